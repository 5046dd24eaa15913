"""The serving predictor always answers, from the best source available, within [1, max_new_tokens]."""

from __future__ import annotations

import dataclasses
import tracemalloc
from typing import Any

import numpy as np
import pytest

import predictors.history as history_module
import predictors.predictor as predictor_module
from predictors.fallbacks import GlobalPrior
from predictors.history import History
from predictors.model import fit
from predictors.predictor import LengthPredictor, Predictions
from predictors.quantiles import at_quantile
from predictors.queries import NO_CAP, Query, QueryBatch
from predictors.tracetable import Trace
from scheduler.errors import InvalidInputError
from scheduler.trace import TraceRow
from tests.predictors.helpers import FAST, drifting_trace


def test_with_no_model_and_no_history_the_prior_is_a_share_of_the_cap() -> None:
    out = LengthPredictor().predict([Query("p", 0, 50, 1000), Query("q", 0, 50, 8000)], step=0, quantile=0.5)
    assert out.source == ("global_prior", "global_prior")
    assert out.p50.tolist() == [250.0, 2000.0]
    assert out.value.tolist() == out.p50.tolist()


def test_a_prompt_with_history_but_no_model_gets_its_own_mean() -> None:
    rows = [TraceRow(0, "p", i, 10, n, 4096) for i, n in enumerate((100, 200, 300))]
    predictor = LengthPredictor()
    predictor.observe(rows)
    out = predictor.predict([Query("p", 0, 10, 4096), Query("new", 0, 10, 4096)], step=1)
    assert out.source == ("prompt_history_mean", "global_prior")
    assert out.p50[0] == 200.0
    assert out.p90[0] >= out.p50[0]


def test_a_capped_history_keeps_only_its_newest_rows_and_predicts_from_them() -> None:
    history = History(max_rows=3)
    predictor = LengthPredictor(history)
    predictor.observe([TraceRow(0, "p", i, 10, 1000, 4096) for i in range(3)])
    assert predictor.predict([Query("p", 0, 10, 4096)], step=2).p50[0] == 1000.0
    predictor.observe([TraceRow(1, "p", i, 10, 100, 4096) for i in range(3)])  # the step-0 rows age out
    assert len(history) == 3
    assert predictor.predict([Query("p", 0, 10, 4096)], step=2).p50[0] == 100.0


def test_a_capped_history_holds_the_same_rows_however_they_arrived() -> None:
    # a replica following the stream gets it batch by batch, a restarted one whole, with the few
    # rows past the cap XADD MAXLEN ~ leaves: both must hold exactly the newest max_rows
    rows = [TraceRow(i // 10, f"p{i % 7}", i % 10, 10, 100 + i, 4096) for i in range(130)]
    followed = History(max_rows=100)
    for start in range(0, 130, 30):
        followed.append(rows[start : start + 30])
    loaded = History(rows[-105:], max_rows=100)
    for history in (followed, loaded):
        assert len(history) == 100
        assert history.trace.output_tokens.tolist() == [row.output_tokens for row in rows[-100:]]
        assert history.stats_before(13).num_rows == 100


def test_a_capped_history_keeps_bookkeeping_for_the_steps_it_holds_not_for_every_step_it_saw() -> None:
    # a service follows the actuals of thousands of steps: what it keeps per step must go with the rows
    history = History(max_rows=40)
    for step in range(600):
        history.append([TraceRow(step, f"p{i % 3}", i, 10, 100 + step + i, 4096) for i in range(10)])
    assert len(history._appends) <= 40 // 10 + 1  # the held steps, and one for every step dropped
    fresh = History(history.trace)
    for step in (595, 598, 599, 600, 601):  # cached per step: each still sees exactly the held rows
        held, expected = history.stats_before(step), fresh.stats_before(step)
        assert (held.num_rows, held.total.tolist()) == (expected.num_rows, expected.total.tolist())


def test_history_of_the_step_being_predicted_is_not_used() -> None:
    predictor = LengthPredictor()
    predictor.observe([TraceRow(3, "p", 0, 10, 100, 4096)])
    out = predictor.predict([Query("p", 1, 10, 4096)], step=3)
    assert out.source == ("global_prior",)


def test_the_model_answers_prompts_with_history_and_fallbacks_the_rest() -> None:
    trace = drifting_trace()
    history = History(trace.take(trace.step < 3))
    predictor = LengthPredictor(history, fit(history, FAST))
    seen = QueryBatch.from_trace(trace.take(trace.step == 3), NO_CAP)
    out = predictor.predict(seen, step=3)
    assert set(out.source) == {"lightgbm"}
    fresh = predictor.predict([Query("never-seen", 0, 80, 4096)], step=3)
    assert fresh.source == ("global_prior",)


def test_every_prediction_lies_within_one_and_the_cap() -> None:
    trace = drifting_trace()
    history = History(trace.take(trace.step < 3))
    predictor = LengthPredictor(history, fit(history, FAST))
    now = trace.take(trace.step == 3)
    batch = QueryBatch.from_trace(now, NO_CAP)
    tight = QueryBatch(batch.prompt_id, batch.sample_idx, batch.prompt_tokens, np.full(len(batch), 150))
    for quantile in (0.01, 0.5, 0.9, 0.999):
        out = predictor.predict(tight, step=3, quantile=quantile)
        assert np.all(out.value >= 1)
        assert np.all(out.value <= 150)
        assert np.all(out.p90 >= out.p50)
        assert np.all(out.p90 <= 150)


@pytest.mark.parametrize("bagging_rows", [FAST.bagging_rows, 300], ids=["whole", "bagged"])
def test_the_fitted_model_does_not_depend_on_the_order_of_the_rows(bagging_rows: int) -> None:
    # Calibration folds followed first-seen prompt order, and past bagging_rows examples LightGBM
    # bags rows by position: shuffled rows moved the p90 shift (0.0286 vs 0.0220), and every p90.
    config = dataclasses.replace(FAST, bagging_rows=bagging_rows)
    trace = drifting_trace()
    shuffled = trace.take(np.random.default_rng(1).permutation(len(trace)))
    a, b = fit(trace, config), fit(shuffled, config)
    assert a.metadata.p90_shift == b.metadata.p90_shift
    queries = QueryBatch.from_trace(trace.take(trace.step == 3), NO_CAP)
    history_a = History(trace.take(trace.step < 3))
    history_b = History(shuffled.take(shuffled.step < 3))
    out_a = LengthPredictor(history_a, a).predict(queries, step=3)
    out_b = LengthPredictor(history_b, b).predict(queries, step=3)
    assert set(out_a.source) == {"lightgbm"}
    np.testing.assert_array_equal(out_a.p50, out_b.p50)
    np.testing.assert_array_equal(out_a.p90, out_b.p90)


def test_other_quantiles_interpolate_between_and_extrapolate_beyond_p50_and_p90() -> None:
    p50, p90, caps = np.array([100.0]), np.array([200.0]), np.array([10_000])
    q = [float(at_quantile(p50, p90, t, caps)[0]) for t in (0.1, 0.5, 0.7, 0.9, 0.99)]
    assert q[1] == pytest.approx(100.0)
    assert q[3] == pytest.approx(200.0)
    assert q[0] < 100.0 < q[2] < 200.0 < q[4]


@pytest.mark.parametrize("quantile", [0.0, 1.0, -0.2, 1.5])
def test_a_quantile_outside_zero_one_is_refused(quantile: float) -> None:
    with pytest.raises(InvalidInputError, match="quantile"):
        LengthPredictor().predict([Query("p", 0, 1, 10)], step=0, quantile=quantile)


def test_a_query_with_a_cap_below_one_is_refused_by_name() -> None:
    with pytest.raises(InvalidInputError, match=r"queries\[1\]\.max_new_tokens"):
        LengthPredictor().predict([Query("p", 0, 1, 10), Query("p", 1, 1, 0)], step=0)


def test_a_negative_step_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="step"):
        LengthPredictor().predict([Query("p", 0, 1, 10)], step=-1)


def test_fitting_on_nothing_learnable_is_a_typed_error() -> None:
    with pytest.raises(InvalidInputError, match=r"nothing|no prompt"):
        fit(History([TraceRow(0, "p", 0, 10, 100)]))


@pytest.mark.parametrize("prompt_lengths", [(512,), (100, 200)])
@pytest.mark.parametrize("new_prompt_tokens", [50, 170, 512, 4096])
def test_a_new_prompt_gets_a_finite_prior_when_history_prompts_share_few_lengths(
    prompt_lengths: tuple[int, ...], new_prompt_tokens: int
) -> None:
    rows = [
        TraceRow(
            step=0,
            prompt_id=f"p{p}",
            sample_idx=i,
            prompt_tokens=prompt_lengths[p % len(prompt_lengths)],
            output_tokens=300 + p,
            max_new_tokens=1024,
            finish_reason="stop",
            reward=None,
            features={},
        )
        for p in range(30)
        for i in range(4)
    ]
    predicted = LengthPredictor(History(rows)).predict([Query("new", 0, new_prompt_tokens, 1024)], 1, 0.5)
    assert 300 <= predicted.p50[0] <= 330
    assert np.isfinite(predicted.p90[0])


def _capped_history(truncated_per_prompt: int, cap: int = 1000) -> list[TraceRow]:
    """30 prompts x 4 samples x 3 steps; in each step the first ``truncated_per_prompt`` samples of
    every prompt are cut at ``cap``, the others finish at 600-690 tokens."""
    rows = []
    for step in range(3):
        for j in range(30):
            for i in range(4):
                cut = i < truncated_per_prompt
                length = cap if cut else 600 + 30 * i
                rows.append(TraceRow(step, f"p{j}", i, 50, length, cap, "length" if cut else "stop"))
    return rows


def _predict_both(
    rows: list[TraceRow], cap: int, with_model: bool, monkeypatch: pytest.MonkeyPatch
) -> tuple[Predictions, Predictions]:
    """Predictions for step 3 at ``cap``, with the censoring rule and with it switched off."""
    history = History(rows)
    predictor = LengthPredictor(history, fit(history, FAST) if with_model else None)
    queries = [Query(f"p{j}", i, 50, cap) for j in range(3) for i in range(4)]
    ruled = predictor.predict(queries, step=3, quantile=0.9)
    monkeypatch.setattr(predictor_module, "raise_censored", lambda p50, p90, *_: (p50, p90), raising=False)
    return ruled, predictor.predict(queries, step=3, quantile=0.9)


@pytest.mark.parametrize("with_model", [True, False])
def test_a_prompt_always_cut_at_the_old_cap_is_planned_past_it_once_the_cap_is_raised(
    with_model: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Truncated lengths are lower bounds: history all cut at 1000, new cap 8000. Both the model and
    # the fallback predicted p50 = p90 = 1000 (the old cap), under-planning the longest prompts.
    out, _ = _predict_both(_capped_history(truncated_per_prompt=4), 8000, with_model, monkeypatch)
    assert set(out.source) == {"lightgbm" if with_model else "prompt_history_mean"}
    assert np.all(out.p50 >= 1000)
    assert np.all(out.p90 > 1000)
    assert np.all(out.p90 <= 8000)
    assert np.all(out.p50 <= out.p90)
    assert np.all(out.value == out.p90)


@pytest.mark.parametrize("with_model", [True, False])
@pytest.mark.parametrize("cap", [1000, 300])
def test_with_the_cap_unchanged_or_lowered_truncated_prompts_predict_as_before(
    with_model: bool, cap: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    ruled, plain = _predict_both(_capped_history(truncated_per_prompt=4), cap, with_model, monkeypatch)
    assert ruled.p50.tolist() == plain.p50.tolist()
    assert ruled.p90.tolist() == plain.p90.tolist()
    assert ruled.value.tolist() == plain.value.tolist()


@pytest.mark.parametrize("with_model", [True, False])
def test_a_prompt_mostly_finishing_below_the_cap_keeps_its_p50_and_its_p90_is_only_held_at_the_cut(
    with_model: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a quarter cut at 1000 ran past it: the p90 is at least 1000, not the new cap (tests/predictors/
    # test_censored_tail.py); the median is left
    ruled, plain = _predict_both(_capped_history(truncated_per_prompt=1), 8000, with_model, monkeypatch)
    assert ruled.p50.tolist() == plain.p50.tolist()
    assert ruled.p90.tolist() == np.maximum(plain.p90, 1000.0).tolist()


def test_once_a_prompt_ran_under_the_raised_cap_its_observed_lengths_decide_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rows = _capped_history(truncated_per_prompt=4)[:-120]  # steps 0 and 1 cut at 1000
    rows += [TraceRow(2, f"p{j}", i, 50, 1500 + 10 * i, 8000, "stop") for j in range(30) for i in range(4)]
    ruled, plain = _predict_both(rows, 8000, False, monkeypatch)
    assert ruled.p90.tolist() == plain.p90.tolist()


def test_asked_without_a_quantile_the_predictor_answers_the_median() -> None:
    # the service and the replay plan on p50; a caller leaving the quantile out must not get p90
    rows = [TraceRow(0, "p", i, 10, n, 4096) for i, n in enumerate((100, 400, 1600))]
    predictor = LengthPredictor(History(rows))
    out = predictor.predict([Query("p", 0, 10, 4096), Query("new", 0, 10, 4096)], step=1)
    assert out.quantile == 0.5
    assert out.value.tolist() == out.p50.tolist()
    assert np.all(out.p90 > out.p50)  # the spread is real: p90 would have been a different answer


def test_with_one_sample_per_prompt_a_step_the_history_mean_p90_still_covers_most_lengths() -> None:
    """PPO-style runs sample each prompt once a step: no within-step spread exists, and the p90 must
    come from the spread across steps (it was the p50, covering half the next step's lengths)."""
    trace = drifting_trace(prompts=200, samples=4, steps=4, drift=0.0)
    once = trace.take(trace.sample_idx == 0)
    for step in (1, 2, 3):
        predictor = LengthPredictor(History(once.take(once.step < step)))
        now = once.take(once.step == step)
        out = predictor.predict(QueryBatch.from_trace(now, NO_CAP), step)
        assert set(out.source) == {"prompt_history_mean"}
        assert 0.85 <= np.mean(now.output_tokens <= out.p90) <= 0.99, step


def test_with_one_sample_per_prompt_the_p90_spread_is_that_of_a_prompt_across_its_steps() -> None:
    rows = [
        TraceRow(s, p, 0, 10, n, 4096)
        for s, (a, b) in enumerate([(100, 1000), (200, 2000)])
        for p, n in (("a", a), ("b", b))
    ]
    out = LengthPredictor(History(rows)).predict([Query("a", 0, 10, 4096)], step=2)
    spread = np.log(200 / 100) / np.sqrt(2)  # each prompt's log lengths around their mean, pooled
    assert out.p50[0] == 150.0
    assert out.p90[0] == pytest.approx(150.0 * np.exp(1.2815515655446004 * spread))


def test_a_prompt_cut_at_a_cap_its_trace_does_not_record_keeps_its_prediction_under_an_unknown_cap() -> None:
    """Evaluation asks with ``NO_CAP`` where the trace records no cap: a stand-in, not a raised cap,
    so the censored rule must not plan the prompt at 2**31 - 1 tokens."""
    rows = [TraceRow(0, "p", i, 10, n, None, "length") for i, n in enumerate((900, 1000, 1000, 800))]
    out = LengthPredictor(History(rows)).predict([Query("p", 0, 10, NO_CAP)], step=1, quantile=0.9)
    assert out.p50[0] == 925.0
    assert out.p90[0] < 2 * 925.0


def test_a_steps_first_prediction_does_not_copy_the_historys_extra_columns() -> None:
    """The global prior reads prompt and output tokens only; it took the earlier rows of the whole
    trace, every extra column too, a transient copy of them all (264 MiB at 2 M rows, 8 columns)."""
    trace = drifting_trace(prompts=2_000, samples=8, steps=4)
    extras = {f"x{i}": np.random.default_rng(i).random(len(trace)) for i in range(32)}
    history = History(dataclasses.replace(trace, numeric=extras))
    history.stats_before(3)  # the per-prompt fold is cached by the history, whatever the prior costs
    query = QueryBatch.from_trace(trace.take(np.arange(1)), NO_CAP)
    tracemalloc.start()
    try:
        LengthPredictor(history).predict(query, step=3)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < sum(column.nbytes for column in extras.values()) / 2


def _three_steps() -> list[TraceRow]:
    """Steps 0-2 of 6 prompts x 4 samples, lengths growing with prompt, sample and step."""
    return [
        TraceRow(s, f"p{i}", j, 10 + i, 100 + 40 * i + 9 * j + s, 4096)
        for s in range(3)
        for i in range(6)
        for j in range(4)
    ]


def test_a_warmed_step_predicts_the_same_without_folding_again(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = _three_steps()
    queries = [Query(f"p{i}", 0, 10 + i, 4096) for i in range(8)]
    warmed, cold = LengthPredictor(History(rows)), LengthPredictor(History(rows))
    warmed.warm(3)
    computed: list[str] = []

    def counted(fold: Any, name: str) -> Any:
        def call(*args: Any) -> Any:
            computed.append(name)
            return fold(*args)

        return call

    for owner, name in ((history_module, "stats_of"), (history_module, "resume_stats"), (GlobalPrior, "of")):
        monkeypatch.setattr(owner, name, counted(getattr(owner, name), name))
    out = warmed.predict(queries, step=3)
    assert computed == []  # the stats fold and the prior were the warm's
    assert out.p50.tolist() == cold.predict(queries, step=3).p50.tolist()


def test_a_warm_after_new_actuals_does_not_join_the_history(monkeypatch: pytest.MonkeyPatch) -> None:
    # predict reads the history's chunks unjoined (the resumed fold, the counted prior), yet the warm
    # still joined the whole trace after every append (~20 ms at 1 M rows) for nothing to read it.
    rows = _three_steps()
    history = History([r for r in rows if r.step < 2])
    predictor = LengthPredictor(history)
    predictor.warm(2)
    history.append([r for r in rows if r.step == 2])
    joined: list[int] = []  # rows of each concatenation
    concat = Trace.concat

    def counted(traces: list[Trace]) -> Trace:
        joined.append(sum(len(t) for t in traces))
        return concat(traces)

    monkeypatch.setattr(Trace, "concat", staticmethod(counted))
    predictor.warm(3)
    assert max(joined, default=0) < len(rows)  # the new step's rows only: the resumed fold's
