"""``trace import``'s account of the step files: which steps it read, and which files it did not.

Apart from ``test_trace_cli.py`` (what ``trace synth`` and ``trace import`` write, and how they
refuse) because these hold one promise of the summary line: a dump lost, cut to nothing or named
by hand shows in what the import says, in words a reader reads (one step, many with gaps).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer

from tests.service.replay.clirun import run
from tests.service.traceimport.wordtokenizer import write_word_tokenizer


def test_trace_import_names_the_steps_it_imported_so_a_missing_dump_shows(
    cli: typer.Typer, tmp_path: Path
) -> None:
    # It printed "steps 2-5" for dumps of steps 2, 3 and 5: the lost 4.jsonl went unnoticed.
    write_word_tokenizer(tmp_path / "tokenizer.json", ["[UNK]", "a", "b"])
    dumps = tmp_path / "rollouts"
    dumps.mkdir()
    for step in (2, 3, 5):
        (dumps / f"{step}.jsonl").write_text(json.dumps({"input": "a", "output": "b", "score": 1.0}) + "\n")
    args = ["trace", "import", str(dumps), "--tokenizer", str(tmp_path / "tokenizer.json")]
    code, stdout, _ = run(cli, [*args, "--out", str(tmp_path / "t.csv")])
    assert code == 0
    assert "1 prompt, steps 2,3,5 from 3 files" in stdout


def test_trace_import_counts_in_words_that_agree_with_their_numbers(cli: typer.Typer, tmp_path: Path) -> None:
    # It said "1 trajectories, 1 prompts, ... from 1 file(s)".
    write_word_tokenizer(tmp_path / "tokenizer.json", ["[UNK]", "a", "b"])
    (tmp_path / "rollouts").mkdir()
    (tmp_path / "rollouts" / "2.jsonl").write_text(json.dumps({"input": "a", "output": "b"}) + "\n")
    args = ["trace", "import", str(tmp_path / "rollouts"), "--tokenizer", str(tmp_path / "tokenizer.json")]
    code, stdout, _ = run(cli, [*args, "--out", str(tmp_path / "t.csv")])
    assert code == 0
    assert f"imported 1 trajectory, 1 prompt, step 2 from 1 file -> {tmp_path / 't.csv'}" in stdout


def test_trace_import_names_the_step_files_that_held_no_rows(cli: typer.Typer, tmp_path: Path) -> None:
    # A 0-byte 4.jsonl (a dump cut short) imported as nothing, and the summary did not say so.
    write_word_tokenizer(tmp_path / "tokenizer.json", ["[UNK]", "a", "b"])
    dumps = tmp_path / "rollouts"
    dumps.mkdir()
    for step in (2, 3):
        (dumps / f"{step}.jsonl").write_text(json.dumps({"input": "a", "output": "b"}) + "\n")
    (dumps / "4.jsonl").write_bytes(b"")
    (dumps / "6.jsonl").write_text("\n")
    args = ["trace", "import", str(dumps), "--tokenizer", str(tmp_path / "tokenizer.json")]
    code, stdout, _ = run(cli, [*args, "--out", str(tmp_path / "t.csv")])
    assert code == 0
    assert "steps 2-3 from 4 files" in stdout
    assert "no rows in 2 step files: 4.jsonl, 6.jsonl" in stdout.splitlines()


@pytest.mark.parametrize(
    ("beside", "said"),
    [
        (["step3.jsonl"], "skipped 1 .jsonl file not named by a step alone, as veRL names its dumps"),
        ([f"{step}.5.jsonl" for step in range(8)], "skipped 8 .jsonl files not named by a step alone,"),
    ],
    ids=["one", "many"],
)
def test_trace_import_names_the_jsonl_files_it_did_not_read(
    cli: typer.Typer, tmp_path: Path, beside: list[str], said: str
) -> None:
    # A dump renamed by hand (step3.jsonl beside 2.jsonl) was passed over and its rows left out unsaid.
    write_word_tokenizer(tmp_path / "tokenizer.json", ["[UNK]", "a", "b"])
    dumps = tmp_path / "rollouts"
    dumps.mkdir()
    for name in ["2.jsonl", *beside]:
        (dumps / name).write_text(json.dumps({"input": "a", "output": "b"}) + "\n")
    args = ["trace", "import", str(dumps), "--tokenizer", str(tmp_path / "tokenizer.json")]
    code, stdout, _ = run(cli, [*args, "--out", str(tmp_path / "t.csv")])
    assert code == 0
    assert "step 2 from 1 file" in stdout
    [line] = [line for line in stdout.splitlines() if line.startswith("skipped")]
    assert line.startswith(said)
    shown = sorted(beside)[:6]
    assert line.endswith(": " + ", ".join(shown) + (", and 2 more" if len(beside) > 6 else ""))


@pytest.mark.parametrize(
    ("steps", "said"),
    [((4,), "step 4 from 1 file ->"), (tuple(range(1, 20, 2)), "10 steps in 1..19 from 10 files")],
    ids=["one", "many-with-gaps"],
)
def test_trace_import_words_one_step_and_many_scattered_steps_as_a_reader_would(
    cli: typer.Typer, tmp_path: Path, steps: tuple[int, ...], said: str
) -> None:
    # They printed "steps 4-4" and "steps 10 steps, 1..19".
    write_word_tokenizer(tmp_path / "tokenizer.json", ["[UNK]", "a", "b"])
    dumps = tmp_path / "rollouts"
    dumps.mkdir()
    for step in steps:
        (dumps / f"{step}.jsonl").write_text(json.dumps({"input": "a", "output": "b"}) + "\n")
    args = ["trace", "import", str(dumps), "--tokenizer", str(tmp_path / "tokenizer.json")]
    code, stdout, _ = run(cli, [*args, "--out", str(tmp_path / "t.csv")])
    assert code == 0
    assert f"1 prompt, {said}" in stdout
