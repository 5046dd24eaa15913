"""A trace holding several infinite features is refused at the first one in the file: the earliest
row holding one, and in that row the leftmost column. The error names one cell, and the one a user
finds first reading the file down is the one to name: fixed, the next run names the next."""

from __future__ import annotations

from pathlib import Path

import pytest

from predictors.traceio import read_trace
from scheduler.trace import TraceFormatError

HEADER = "step,prompt_id,sample_idx,prompt_tokens,output_tokens,a,b\n"


def _refused(path: Path, rows: list[str]) -> tuple[int, str]:
    path.write_text(HEADER + "".join(f"0,p{i},0,5,3,{row}\n" for i, row in enumerate(rows)))
    with pytest.raises(TraceFormatError) as refused:
        read_trace(path)
    return refused.value.line, refused.value.column


def test_the_earliest_row_is_named_whichever_column_holds_it(tmp_path: Path) -> None:
    assert _refused(tmp_path / "t.csv", ["1,2", "3,inf", "inf,4"]) == (3, "b")


def test_in_one_row_the_leftmost_column_is_named(tmp_path: Path) -> None:
    assert _refused(tmp_path / "t.csv", ["1,2", "-inf,inf", "inf,4"]) == (3, "a")
