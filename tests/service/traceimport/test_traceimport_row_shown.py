"""How a csv row of another width than its header is shown in its error: each cell whole up to 40
characters, a longer one cut to its first 40 and ``...``, and at most 8 cells, the rest counted. The
bounds keep the error one readable line whatever the row holds; a cell within them is shown as written,
so the user can find the row by it."""

from __future__ import annotations

from pathlib import Path

import pytest

from predictors.traceio import read_trace
from scheduler.trace import TraceFormatError

HEADER = "step,prompt_id,sample_idx,prompt_tokens,output_tokens"


def _shown(path: Path, cells: list[str]) -> object:
    path.write_text(HEADER + "\n" + ",".join(cells) + "\n")
    with pytest.raises(TraceFormatError) as refused:
        read_trace(path)
    return refused.value.value


def test_a_cell_of_40_characters_is_shown_whole_and_one_of_41_cut(tmp_path: Path) -> None:
    assert _shown(tmp_path / "t.csv", ["0", "a" * 40, "b" * 41]) == ["0", "a" * 40, "b" * 40 + "..."]


def test_a_row_of_8_cells_is_shown_whole_and_one_of_9_counts_the_ninth(tmp_path: Path) -> None:
    eight = [str(i) for i in range(8)]
    assert _shown(tmp_path / "eight.csv", eight) == eight
    assert _shown(tmp_path / "nine.csv", [*eight, "8"]) == [*eight, "... 1 more"]
