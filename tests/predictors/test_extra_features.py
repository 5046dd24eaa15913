"""Extra trace columns (reward fields, difficulty tags) train and serve whatever they are called.

Their names come from users: trace files, veRL dumps and workers' ``POST /actuals`` reports. LightGBM
refuses some names outright (JSON punctuation, a name given twice), and a name may equal one of the
predictor's own features. None of that may stop a fit: a bad name stored once in the actuals stream
would otherwise break every retrain after it.
"""

from __future__ import annotations

import numpy as np
import pytest

from predictors.features import BASE_FEATURES, FeatureSpec, build_features
from predictors.history import History
from predictors.model import fit
from predictors.predictor import LengthPredictor
from predictors.promptprior import prior_from_stats
from predictors.queries import Query, QueryBatch
from predictors.tracetable import Trace
from scheduler.trace import TraceRow
from tests.predictors.helpers import FAST

AWKWARD_NAMES = ("score,acc", "judge:format", "[x]", '{"q"}', "step", "log_base", "a b", "a_b")


def _rows(step: int, features: dict[str, float | str], prompts: int = 12, n: int = 4) -> list[TraceRow]:
    return [
        TraceRow(step, f"p{p}", i, 50, 100 + 40 * p + 3 * i + 10 * step, 4096, "stop", float(p % 2), features)
        for p in range(prompts)
        for i in range(n)
    ]


def test_columns_with_names_lightgbm_refuses_still_train_and_serve() -> None:
    features: dict[str, float | str] = {name: float(k) for k, name in enumerate(AWKWARD_NAMES)}
    history = History([*_rows(0, features), *_rows(1, features)])
    model = fit(history, FAST)
    assert model.metadata.features == (*BASE_FEATURES, *AWKWARD_NAMES)
    predictor = LengthPredictor(history=history, model=model)
    answer = predictor.predict([Query("p3", 0, 50, 4096, features)], step=2)
    assert answer.source == ("lightgbm",)
    assert 1 <= answer.p50[0] <= 4096


def test_a_column_numeric_in_one_report_and_text_in_another_is_one_categorical_column() -> None:
    history = History(_rows(0, {"bucket": 1.0}))
    history.append(_rows(1, {"bucket": "hard"}))
    trace = history.trace
    assert "bucket" not in trace.numeric
    assert set(trace.categorical["bucket"].tolist()) == {"1", "hard"}
    assert fit(history, FAST).spec.categorical == {"bucket": ("1", "hard")}


def test_concatenated_traces_type_their_columns_as_one_trace_of_all_rows_would() -> None:
    first, second = _rows(0, {"bucket": 2.0, "temp": 0.5}), _rows(1, {"bucket": "easy", "temp": 0.7})
    joined = Trace.concat([Trace.from_rows(first), Trace.from_rows(second)])
    whole = Trace.from_rows([*first, *second])
    assert set(joined.numeric) == set(whole.numeric) == {"temp"}
    np.testing.assert_array_equal(joined.numeric["temp"], whole.numeric["temp"])
    assert joined.categorical["bucket"].tolist() == whole.categorical["bucket"].tolist()


@pytest.mark.parametrize("value", [1.0, "1"])
def test_a_categorical_feature_sent_as_a_number_or_as_text_finds_the_same_level(value: float | str) -> None:
    history = History(_rows(0, {}))
    spec = FeatureSpec(numeric=(), categorical={"bucket": ("1", "hard")})
    queries = QueryBatch.of([Query("p1", 0, 50, 4096, {"bucket": value})])
    stats = history.stats_before(1)
    row = build_features(prior_from_stats(stats, queries.prompt_id), queries, 1, stats.trend, spec)
    assert row[0, spec.categorical_indices[0]] == 0.0


def test_a_history_holds_at_most_the_first_64_feature_names_it_meets() -> None:
    # every name is a dense column over every row: reports inventing fresh names grew a replica by
    # rows x names floats without end, and the stream kept them for every restart to meet again
    history = History()
    for batch in range(20):
        history.append(_rows(batch, {f"b{batch}_f{j}": 1.0 for j in range(64)}, prompts=2, n=2))
    trace = history.trace
    assert [*trace.numeric, *trace.categorical] == [f"b0_f{j}" for j in range(64)]
    assert len(trace) == 80


def test_names_held_only_by_trimmed_rows_make_room_for_new_ones() -> None:
    history = History(max_rows=4)
    history.append(_rows(0, {f"old{j}": 1.0 for j in range(64)}, prompts=1, n=4))
    history.append(_rows(1, {}, prompts=1, n=4))  # the rows holding the 64 names are trimmed
    history.append(_rows(2, {"new": 3.0}, prompts=1, n=4))
    assert list(history.trace.numeric) == ["new"]


def _hot_rows(step: int) -> list[TraceRow]:
    """Odd samples run at a temperature that triples their length: the model must read ``temp``."""
    return [
        TraceRow(
            step,
            f"p{p}",
            i,
            50,
            (100 + 20 * p) * (3 if i % 2 else 1),
            8192,
            "stop",
            0.0,
            {"temp": 0.5 + i % 2},
        )
        for p in range(40)
        for i in range(8)
    ]


def test_a_sample_is_predicted_in_a_batch_as_it_is_alone_even_where_it_differs_from_its_siblings() -> None:
    """The predictor builds one feature row per prompt when its samples agree on every input the
    model reads; a sample whose extra column or cap differs from its siblings' keeps its own."""
    history = History([*_hot_rows(0), *_hot_rows(1)])
    predictor = LengthPredictor(history=history, model=fit(history, FAST))
    queries = [Query(f"p{p}", i, 50, 8192, {"temp": 0.5}) for p in range(40) for i in range(4)]
    queries[13] = Query("p3", 1, 50, 8192, {"temp": 1.5})  # hot, among cool siblings
    queries[22] = Query("p5", 2, 50, 64, {"temp": 0.5})  # capped
    batch = predictor.predict(queries, step=2)
    alone = [predictor.predict([q], step=2) for q in queries]
    assert set(batch.source) == {"lightgbm"}
    np.testing.assert_array_equal(batch.p50, [a.p50[0] for a in alone])
    np.testing.assert_array_equal(batch.p90, [a.p90[0] for a in alone])
    assert batch.p50[13] > 1.5 * batch.p50[12]  # the hot sample: its own row, not its siblings'
    assert batch.p50[22] == 64 < batch.p50[21]


def test_a_numeric_feature_sent_as_text_is_read_as_its_number() -> None:
    """The history types a column of numbers sent as text (``"1.5"``) as numbers, so the model reads
    them as such; a query batch holding any text in the column (a number sent as text, or one odd
    value) had the column read as missing for every query in it."""
    history = History([*_hot_rows(0), *_hot_rows(1)])
    predictor = LengthPredictor(history=history, model=fit(history, FAST))
    as_numbers = [Query("p3", 0, 50, 8192, {"temp": 0.5}), Query("p3", 1, 50, 8192, {"temp": 1.5})]
    expected = predictor.predict(as_numbers, step=2)
    as_text = [Query("p3", 0, 50, 8192, {"temp": "0.5"}), Query("p3", 1, 50, 8192, {"temp": "1.5"})]
    beside_an_odd_one = [*as_numbers, Query("p4", 0, 50, 8192, {"temp": "warm"})]
    for queries in (as_text, beside_an_odd_one):
        answer = predictor.predict(queries, step=2)
        np.testing.assert_array_equal(answer.p50[:2], expected.p50)
        np.testing.assert_array_equal(answer.p90[:2], expected.p90)
    assert expected.p50[1] > 1.5 * expected.p50[0]
