"""A multi-turn veRL dump, whose outputs hold tool results between the assistant's turns, is said to
be one: the dump cannot tell generated tokens from the tool output the engine prefilled, so the
import counts each output whole and says how many hold tool results (``holds_tool_output``).

The fixture mirrors veRL's tool agent loop (``verl/experimental/agent_loop/tool_agent_loop.py``):
each tool result is rendered by the chat template (Qwen's: a ``user`` turn wrapping it in
``<tool_response>``) and appended to ``responses``, which ``_log_rollout_data`` decodes with
``skip_special_tokens=True`` (``<|im_start|>``/``<|im_end|>`` gone, the tags kept)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer

from service.traceimport.importers import holds_tool_output, import_verl
from tests.service.replay.clirun import run
from tests.service.traceimport.wordtokenizer import write_word_tokenizer

QUESTION = "system\nCall calc inside <tool_call></tool_call> tags\nuser\nwhat is two plus two\nassistant\n"
TOOL_LOOP = (
    'let me compute <tool_call>\n{"name": "calc", "arguments": {"expr": "2+2"}}\n</tool_call>\n'
    "user\n<tool_response>\n4\n</tool_response>\nassistant\nso four"
)


@pytest.fixture
def tokenizer_json(tmp_path: Path) -> Path:
    return write_word_tokenizer(tmp_path / "tokenizer.json", ["[UNK]", "so", "four"])


def _dump(folder: Path, lines: list[dict[str, object]]) -> Path:
    folder.mkdir(exist_ok=True)
    (folder / "1.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return folder


def _import(folder: Path, tokenizer_json: Path) -> list[str]:
    out = str(folder.parent / "t.csv")
    return ["trace", "import", str(folder), "--tokenizer", str(tokenizer_json), "--out", out]


def _line(output: str, **extra: object) -> dict[str, object]:
    return {"input": QUESTION, "output": output, "gts": "4", "score": 1.0, "step": 1, **extra}


def test_outputs_holding_tool_results_are_counted_whole_and_counted_apart(
    tmp_path: Path, tokenizer_json: Path
) -> None:
    folder = _dump(tmp_path / "d", [_line(TOOL_LOOP), _line("so four"), _line(TOOL_LOOP)])
    result = import_verl(folder, tokenizer_json, max_new_tokens=None)
    assert result.tool_turns == 2
    assert result.trace.output_tokens.tolist()[1] == 2
    assert result.trace.output_tokens.tolist()[0] > 2  # the tool call and its result counted too


def test_a_single_turn_dump_whose_prompt_names_the_tool_tags_is_not_multi_turn(
    tmp_path: Path, tokenizer_json: Path
) -> None:
    """A tool-enabled template's system prompt teaches the tags; only the output's tool results tell."""
    folder = _dump(tmp_path / "d", [_line("so four"), {**_line("four"), "input": QUESTION + TOOL_LOOP}])
    assert import_verl(folder, tokenizer_json, max_new_tokens=None).tool_turns == 0


@pytest.mark.parametrize(
    ("turns", "multi"), [(2, False), (4, True), (True, False), ("4", False)], ids=["2", "4", "bool", "text"]
)
def test_a_num_turns_field_above_verls_single_turn_two_marks_a_multi_turn_line(
    turns: object, multi: bool
) -> None:
    """veRL counts the user's turn, the assistant's and each tool's: a single-turn rollout is 2."""
    assert holds_tool_output(_line("so four", num_turns=turns)) is multi
    assert holds_tool_output(_line("so four", __num_turns__=turns)) is multi


def test_the_summary_says_how_many_outputs_hold_tool_results(
    cli: typer.Typer, tmp_path: Path, tokenizer_json: Path
) -> None:
    folder = _dump(tmp_path / "d", [_line(TOOL_LOOP), _line("so four")])
    code, stdout, _ = run(cli, _import(folder, tokenizer_json))
    assert code == 0
    said = [line for line in stdout.splitlines() if line.startswith("multi-turn: ")]
    assert said == [
        "multi-turn: tool results in 1 of 2 outputs; their output_tokens count the tool output the "
        "engine prefilled, not only generated tokens (docs/trace-format.md)"
    ]


def test_a_single_turn_import_says_nothing_of_turns(
    cli: typer.Typer, tmp_path: Path, tokenizer_json: Path
) -> None:
    folder = _dump(tmp_path / "d", [_line("so four")])
    code, stdout, _ = run(cli, _import(folder, tokenizer_json))
    assert code == 0
    assert "multi-turn" not in stdout
