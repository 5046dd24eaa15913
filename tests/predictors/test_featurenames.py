"""``without_refused`` on traces whose refused features differ row by row and kind by kind.

Stored reports of an older release carry whichever features their sender set: a row may hold only a
text feature of a refused name (``prompt_id``), another only a number (``max_tokens``), a third none.
Each kind is left out on its own, and the rows counted are those that held a value in any of them,
the figure the warning names (service.learning.actuals). The service's test stores reports holding
all of them at once, which left each kind's own handling unchecked (mutants62).
"""

from __future__ import annotations

import numpy as np

from predictors.featurenames import without_refused
from predictors.tracetable import Trace

NAN = float("nan")


def _rows(numeric: dict[str, list[float]], categorical: dict[str, list[str]]) -> Trace:
    """Three rows of step 0 with these extra columns."""
    rows = 3
    return Trace(
        step=np.zeros(rows, dtype=np.int64),
        prompt_id=np.array([f"p{i}" for i in range(rows)], dtype=object),
        sample_idx=np.zeros(rows, dtype=np.int64),
        prompt_tokens=np.full(rows, 10, dtype=np.int64),
        output_tokens=np.full(rows, 20, dtype=np.int64),
        max_new_tokens=np.full(rows, 64, dtype=np.int64),
        finish_reason=np.full(rows, -1, dtype=np.int8),
        reward=np.full(rows, NAN),
        numeric={k: np.array(v, dtype=np.float64) for k, v in numeric.items()},
        categorical={k: np.array(v, dtype=object) for k, v in categorical.items()},
    )


def test_a_refused_text_feature_alone_is_left_out_and_its_rows_counted() -> None:
    kept, names, held = without_refused(_rows({"x": [1.0, 2.0, 3.0]}, {"prompt_id": ["a", "", "b"]}))
    assert (names, held) == (["prompt_id"], 2)
    assert (list(kept.numeric), list(kept.categorical)) == (["x"], [])


def test_a_refused_number_alone_is_left_out_and_its_rows_counted() -> None:
    kept, names, held = without_refused(_rows({"max_tokens": [NAN, 5.0, NAN]}, {"tag": ["a", "b", ""]}))
    assert (names, held) == (["max_tokens"], 1)
    assert (list(kept.numeric), list(kept.categorical)) == ([], ["tag"])


def test_the_rows_counted_are_those_holding_any_refused_feature_of_either_kind() -> None:
    trace = _rows({"max_tokens": [5.0, NAN, NAN], "x": [1.0, 1.0, 1.0]}, {"prompt_id": ["", "a", ""]})
    kept, names, held = without_refused(trace)
    assert (names, held) == (["max_tokens", "prompt_id"], 2)  # the third row held neither
    assert len(kept) == 3
    assert kept.numeric["x"].tolist() == [1.0, 1.0, 1.0]


def test_a_trace_without_refused_features_is_returned_as_it_is() -> None:
    trace = _rows({"x": [1.0, 2.0, 3.0]}, {"Output_Tokens": ["a", "b", "c"]})  # another case: a feature
    assert without_refused(trace) == (trace, [], 0)
