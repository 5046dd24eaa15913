"""Another tool's name for a trace column (OpenAI's ``input_tokens``, veRL's ``response_length``): a
``--map`` onto it is refused naming the column meant and the ``--map`` that imports it, and a header
lacking the column but holding it, in any case, is pointed at it; a header holding another tool's
name for some other column is not offered for the one missing (edges59's names, mutants60)."""

from __future__ import annotations

from pathlib import Path

import pytest

from predictors.traceio import read_trace
from predictors.tracerename import check_target
from scheduler.errors import InvalidInputError
from scheduler.trace import TraceFormatError


@pytest.mark.parametrize(
    ("target", "meant", "whose"),
    [
        ("max_output_tokens", "max_new_tokens", "OpenAI's Responses API's name for the cap"),
        ("input_tokens", "prompt_tokens", "OpenAI's Responses API's name for the prompt length (usage)"),
    ],
)
def test_a_map_onto_openais_responses_api_names_is_refused_naming_the_column(
    target: str, meant: str, whose: str
) -> None:
    with pytest.raises(InvalidInputError) as refused:
        check_target(target, f"{target}=col")
    assert str(refused.value) == (
        f"map='{target}=col': {target!r} is {whose}; the trace's column is {meant!r} "
        f"(--map {meant}=col; a --map onto another name keeps a feature)"
    )


def test_the_map_a_refusal_offers_names_the_source_column_without_its_padding() -> None:
    # --map strips both names, so 'max_tokens = cap' maps the column 'cap': the offered --map says so
    with pytest.raises(InvalidInputError) as refused:
        check_target("max_tokens", "max_tokens = cap")
    assert str(refused.value).endswith(
        "the trace's column is 'max_new_tokens' (--map max_new_tokens=cap; "
        "a --map onto another name keeps a feature)"
    )


def _missing(tmp_path: Path, header: str, row: str) -> str:
    path = tmp_path / "runs.csv"
    path.write_text(f"{header}\n{row}\n")
    with pytest.raises(TraceFormatError) as info:
        read_trace(path)
    return str(info.value)


def test_a_header_with_openais_name_for_the_prompt_length_is_pointed_at_it(tmp_path: Path) -> None:
    message = _missing(tmp_path, "step,prompt_id,sample_idx,input_tokens,output_tokens", "1,a,0,10,5")
    assert (
        "required column is missing (the header has 'input_tokens', OpenAI's Responses API's name for the "
        "prompt length (usage): import it with trace import --map prompt_tokens=input_tokens)"
    ) in message


def test_a_header_with_another_tools_name_in_another_case_is_pointed_at_it_as_written(tmp_path: Path) -> None:
    message = _missing(tmp_path, "step,prompt_id,sample_idx,prompt_tokens,Response_Length", "1,a,0,10,5")
    assert (
        "required column is missing (the header has 'Response_Length', veRL's name for the output length: "
        "import it with trace import --map output_tokens=Response_Length)"
    ) in message


def test_another_tools_name_for_another_column_is_not_offered_for_the_missing_one(tmp_path: Path) -> None:
    # 'max_output_tokens' and 'max_tokens' are caps: mapped to output_tokens they would import each
    # trajectory's cap as its length
    header = "step,prompt_id,sample_idx,prompt_tokens,max_output_tokens,max_tokens"
    message = _missing(tmp_path, header, "1,a,0,10,512,512")
    assert "required column is missing (import it with trace import --map output_tokens=COLUMN)" in message
