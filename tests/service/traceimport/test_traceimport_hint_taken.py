"""A missing column's hint never points at a column the ``--map`` already took: a header's ``Step``
mapped onto ``reward`` is no candidate for the missing ``step`` (``--map step=Step`` would land two
maps on one column, which ``parse_mapping`` refuses). The hint offers the generic ``--map`` instead,
and the list says what ``Step`` became."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.trace import TraceFormatError
from service.traceimport.importers import import_generic, parse_mapping


def test_a_case_variant_the_mapping_took_is_not_offered_for_the_missing_column(tmp_path: Path) -> None:
    path = tmp_path / "runs.csv"
    path.write_text("Step,prompt_id,sample_idx,prompt_tokens,output_tokens\n0,a,0,10,120\n")
    with pytest.raises(TraceFormatError) as refused:
        import_generic(path, "csv", parse_mapping(["reward=Step"]))
    assert str(refused.value) == (
        f"{path}:1:step=None: required column is missing (import it with trace import --map step=COLUMN); "
        "the columns it has: 'Step' (as reward), 'prompt_id', 'sample_idx', 'prompt_tokens', 'output_tokens'"
    )
