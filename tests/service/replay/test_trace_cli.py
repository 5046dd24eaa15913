"""``trace synth`` and ``trace import``: a labelled trace on good input, one clear line on bad input."""

from __future__ import annotations

import csv
import json
import stat
import sys
from pathlib import Path

import pytest
import typer

from tests.service.replay.clirun import run
from tests.service.traceimport.wordtokenizer import write_word_tokenizer


def test_trace_synth_writes_a_labelled_synthetic_trace(cli: typer.Typer, tmp_path: Path) -> None:
    out = tmp_path / "s.jsonl"
    args = ["trace", "synth", "--profile", "short-cot", "--prompts", "3", "--samples", "2", "--steps", "2"]
    code, stdout, _ = run(cli, [*args, "--seed", "1", "--out", str(out)])
    assert code == 0
    assert "SYNTHETIC" in stdout
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 12
    assert {r["source"] for r in rows} == {"synthetic"}


@pytest.mark.parametrize(
    ("flags", "said"), [([], "drift 0.005/step"), (["--drift", "0.05"], "drift 0.05/step")]
)
def test_trace_synth_says_the_drift_its_trace_has(
    cli: typer.Typer, tmp_path: Path, flags: list[str], said: str
) -> None:
    # The file does not record it, and the summary named profile, sizes and seed but not a --drift.
    args = ["trace", "synth", "--profile", "short-cot", "--prompts", "2", "--samples", "2", "--steps", "2"]
    code, stdout, _ = run(cli, [*args, *flags, "--out", str(tmp_path / "s.csv")])
    assert code == 0
    assert f"seed 0, {said})" in stdout


@pytest.mark.parametrize("mode", [0o600, 0o640], ids=["0600", "0640"])
def test_trace_synth_over_an_existing_trace_keeps_its_permissions(
    cli: typer.Typer, tmp_path: Path, mode: int
) -> None:
    out = tmp_path / "s.csv"
    out.write_text("old\n")
    out.chmod(mode)
    code, _, _ = run(
        cli, ["trace", "synth", "--prompts", "2", "--samples", "2", "--steps", "1", "--out", str(out)]
    )
    assert code == 0
    assert out.read_text() != "old\n"
    assert stat.S_IMODE(out.stat().st_mode) == mode


def test_trace_synth_refuses_an_unknown_profile(cli: typer.Typer, tmp_path: Path) -> None:
    code, _, err = run(cli, ["trace", "synth", "--profile", "huge", "--out", str(tmp_path / "x.csv")])
    assert code != 0
    assert "huge" in err


def test_trace_import_verl_says_which_tokenizer_counted(cli: typer.Typer, tmp_path: Path) -> None:
    write_word_tokenizer(tmp_path / "tokenizer.json", ["[UNK]", "a", "b"])
    dumps = tmp_path / "rollouts"
    dumps.mkdir()
    (dumps / "3.jsonl").write_text(
        json.dumps({"input": "a b", "output": "b b b", "score": 1.0, "step": 3}) + "\n"
    )
    out = tmp_path / "t.csv"
    args = ["trace", "import", str(dumps), "--from", "verl", "--tokenizer", str(tmp_path / "tokenizer.json")]
    code, stdout, _ = run(cli, [*args, "--out", str(out)])
    assert code == 0
    assert str(tmp_path / "tokenizer.json") in stdout
    row = next(csv.DictReader(out.open()))
    assert (row["step"], row["prompt_tokens"], row["output_tokens"]) == ("3", "2", "3")


def test_trace_import_verl_names_the_tokenizer_by_its_full_path_model_and_vocabulary(
    cli: typer.Typer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every Hugging Face tokenizer is a "tokenizer.json": "tokenizer tokenizer.json" named no model.
    write_word_tokenizer(tmp_path / "tokenizer.json", ["[UNK]", "a", "b"])
    (tmp_path / "rollouts").mkdir()
    line = json.dumps({"input": "a", "output": "b", "step": 3})
    (tmp_path / "rollouts" / "3.jsonl").write_text(line + "\n")
    monkeypatch.chdir(tmp_path)
    args = ["trace", "import", "rollouts", "--tokenizer", "tokenizer.json", "--out", "t.csv"]
    code, stdout, _ = run(cli, args)
    assert code == 0
    said = f"token counts: tokenizer {tmp_path.resolve() / 'tokenizer.json'} (WordLevel, vocabulary 3)"
    assert said in stdout


@pytest.mark.parametrize(
    ("keep", "said"), [([], "acc, gts, level, request_id"), (["level"], "acc, gts, request_id")]
)
def test_trace_import_verl_names_the_fields_it_dropped(
    cli: typer.Typer, tmp_path: Path, keep: list[str], said: str
) -> None:
    # every field but input, output, score and step was left out without a word: a field known
    # before generation (a prompt's level) was lost unless the user had read of --keep-field
    write_word_tokenizer(tmp_path / "tokenizer.json", ["[UNK]", "a", "b"])
    (tmp_path / "rollouts").mkdir()
    line = {"input": "a", "output": "b", "gts": "b", "score": 1.0, "step": 3, "acc": 1.0, "level": "x"}
    (tmp_path / "rollouts" / "3.jsonl").write_text(json.dumps({**line, "request_id": "r0"}) + "\n")
    args = ["trace", "import", str(tmp_path / "rollouts"), "--tokenizer", str(tmp_path / "tokenizer.json")]
    kept = [word for name in keep for word in ("--keep-field", name)]
    code, stdout, _ = run(cli, [*args, *kept, "--out", str(tmp_path / "t.csv")])
    assert code == 0
    assert f"fields dropped: {said} (--keep-field NAME keeps one as a feature, if it is known" in stdout


def test_trace_import_verl_says_no_field_was_dropped_by_saying_nothing(
    cli: typer.Typer, tmp_path: Path
) -> None:
    write_word_tokenizer(tmp_path / "tokenizer.json", ["[UNK]", "a", "b"])
    (tmp_path / "rollouts").mkdir()
    (tmp_path / "rollouts" / "3.jsonl").write_text(
        json.dumps({"input": "a", "output": "b", "step": 3}) + "\n"
    )
    args = ["trace", "import", str(tmp_path / "rollouts"), "--tokenizer", str(tmp_path / "tokenizer.json")]
    code, stdout, _ = run(cli, [*args, "--out", str(tmp_path / "t.csv")])
    assert code == 0
    assert "dropped" not in stdout


def _one_stopped_dump(tmp_path: Path, record: dict[str, object] | None = None) -> list[str]:
    """A dump folder with one line whose output re-encodes to 3 tokens; the import's arguments."""
    write_word_tokenizer(tmp_path / "tokenizer.json", ["[UNK]", "a", "b"])
    (tmp_path / "rollouts").mkdir()
    record = record or {"input": "a b", "output": "b b b", "score": 1.0, "step": 3}
    (tmp_path / "rollouts" / "3.jsonl").write_text(json.dumps(record) + "\n")
    tokenizer = str(tmp_path / "tokenizer.json")
    return [
        "trace",
        "import",
        str(tmp_path / "rollouts"),
        "--tokenizer",
        tokenizer,
        "--out",
        str(tmp_path / "t.csv"),
    ]


@pytest.mark.parametrize("cap", ["0", str(2**63)])
def test_trace_import_verl_refuses_a_cap_no_trace_can_hold_by_its_option(
    cli: typer.Typer, tmp_path: Path, cap: str
) -> None:
    # Past int64 it was refused after the first dump was read and counted, as a cell of its line 1.
    code, _, err = run(cli, [*_one_stopped_dump(tmp_path), "--max-new-tokens", cap])
    assert code == 2
    assert err == f"trace: max-new-tokens={cap}: must be 1..9,223,372,036,854,775,807\n"


@pytest.mark.parametrize(("flags", "tokens"), [([], "4"), (["--count-eos"], "4"), (["--no-count-eos"], "3")])
def test_trace_import_verl_counts_a_stopped_outputs_eos_unless_told_not_to(
    cli: typer.Typer, tmp_path: Path, flags: list[str], tokens: str
) -> None:
    code, _, _ = run(cli, [*_one_stopped_dump(tmp_path), "--max-new-tokens", "8", *flags])
    assert code == 0
    row = next(csv.DictReader((tmp_path / "t.csv").open()))
    assert (row["output_tokens"], row["finish_reason"]) == (tokens, "stop")


def test_trace_import_verl_refuses_count_eos_without_the_cap_that_tells_stopped_from_truncated(
    cli: typer.Typer, tmp_path: Path
) -> None:
    code, _, err = run(cli, [*_one_stopped_dump(tmp_path), "--count-eos"])
    assert code == 2
    assert "count-eos" in err
    assert "needs --max-new-tokens" in err
    assert len(err.strip().splitlines()) == 1


def test_trace_import_verl_refuses_a_validation_dump_in_one_line(cli: typer.Typer, tmp_path: Path) -> None:
    record = {"input": "a b", "output": "b", "score": 1.0, "step": 3, "reward": 1.0}
    code, _, err = run(cli, _one_stopped_dump(tmp_path, record))
    assert code == 2
    assert "3.jsonl:1" in err
    assert "validation_data_dir" in err
    assert len(err.strip().splitlines()) == 1


def test_trace_import_verl_keeps_only_the_extra_fields_named_by_keep_field(
    cli: typer.Typer, tmp_path: Path
) -> None:
    write_word_tokenizer(tmp_path / "tokenizer.json", ["[UNK]", "a", "b"])
    dumps = tmp_path / "rollouts"
    dumps.mkdir()
    record = {"input": "a", "output": "b b", "score": 1.0, "step": 1, "acc": 1.0, "level": "easy"}
    (dumps / "1.jsonl").write_text(json.dumps(record) + "\n")
    out = tmp_path / "t.csv"
    args = ["trace", "import", str(dumps), "--tokenizer", str(tmp_path / "tokenizer.json")]
    code, _, _ = run(cli, [*args, "--keep-field", "level", "--out", str(out)])
    assert code == 0
    row = next(csv.DictReader(out.open()))
    assert row["level"] == "easy"
    assert "acc" not in row


def test_trace_import_verl_without_a_tokenizer_is_refused(cli: typer.Typer, tmp_path: Path) -> None:
    code, _, err = run(cli, ["trace", "import", str(tmp_path), "--out", str(tmp_path / "t.csv")])
    assert code != 0
    assert "tokenizer" in err


def test_trace_import_verl_without_the_trace_extra_names_it_in_one_line(
    cli: typer.Typer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # tokenizers is the trace extra's, not a dependency: a plain `pip install rollout-scheduler`
    # answered a ModuleNotFoundError traceback. None in sys.modules makes its import fail here too.
    write_word_tokenizer(tmp_path / "tokenizer.json", ["[UNK]", "a"])
    (tmp_path / "rollouts").mkdir()
    line = json.dumps({"input": "a", "output": "a", "step": 1})
    (tmp_path / "rollouts" / "1.jsonl").write_text(line + "\n")
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    args = ["trace", "import", str(tmp_path / "rollouts"), "--tokenizer", str(tmp_path / "tokenizer.json")]
    code, _, err = run(cli, [*args, "--out", str(tmp_path / "t.csv")])
    assert code == 2
    assert "pip install 'rollout-scheduler[trace]'" in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "t.csv").exists()


@pytest.mark.parametrize("command", [["replay"], ["trace", "import"]])
def test_a_trace_that_is_not_utf8_is_one_line_and_exit_2(
    cli: typer.Typer, tmp_path: Path, command: list[str]
) -> None:
    path = tmp_path / "latin1.csv"
    path.write_bytes(b"step,prompt_id,sample_idx,prompt_tokens,output_tokens\n0,caf\xe9,0,10,100\n")
    options = {
        "replay": ["--workers", "1xH100"],
        "trace": ["--from", "csv", "--out", str(tmp_path / "o.csv")],
    }
    code, _, err = run(cli, [*command, str(path), *options[command[0]]])
    assert code == 2
    assert "not UTF-8" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("drift", ["nan", "inf", "5"])
def test_trace_synth_refuses_a_drift_that_is_no_number_of_tokens(
    cli: typer.Typer, tmp_path: Path, drift: str
) -> None:
    out = tmp_path / "x.csv"
    code, _, err = run(
        cli, ["trace", "synth", "--prompts", "2", "--steps", "1", "--drift", drift, "--out", str(out)]
    )
    assert code == 2
    assert "drift" in err
    assert not out.exists()


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--max-new-tokens", "50"], "max-new-tokens"),
        (["--tokenizer", "t.json"], "tokenizer"),
        (["--keep-field", "level"], "keep-field"),
    ],
)
def test_trace_import_refuses_an_option_the_input_kind_would_ignore(
    cli: typer.Typer, tmp_path: Path, extra: list[str], needle: str
) -> None:
    path = tmp_path / "t.csv"
    path.write_text("step,prompt_id,sample_idx,prompt_tokens,output_tokens\n0,a,0,10,100\n")
    code, _, err = run(
        cli, ["trace", "import", str(path), "--from", "csv", *extra, "--out", str(tmp_path / "o.csv")]
    )
    assert code == 2
    assert needle in err


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--from", "VERL", "--tokenizer", "t.json"], "from='VERL': expected one of verl, csv"),
        (["--map", "step=epoch"], "only --from csv|jsonl|parquet takes --map (--from defaults to verl)"),
        ([], "--from verl (the default) needs --tokenizer"),
    ],
)
def test_trace_import_names_the_input_kind_when_that_is_the_mistake(
    cli: typer.Typer, tmp_path: Path, extra: list[str], needle: str
) -> None:
    path = tmp_path / "t.csv"
    path.write_text("epoch,prompt_id,sample_idx,prompt_tokens,output_tokens\n0,a,0,10,100\n")
    code, _, err = run(cli, ["trace", "import", str(path), *extra, "--out", str(tmp_path / "o.csv")])
    assert code == 2
    assert needle in err
    assert len(err.strip().splitlines()) == 1


def test_trace_import_says_one_capped_output_in_the_singular(cli: typer.Typer, tmp_path: Path) -> None:
    # It said "1 re-tokenized outputs exceeded 2 tokens and were capped".
    code, stdout, _ = run(cli, [*_one_stopped_dump(tmp_path), "--max-new-tokens", "2"])
    assert code == 0
    assert "1 re-tokenized output exceeded the cap of 2 tokens and was capped" in stdout.splitlines()


def _bad_import(tmp_path: Path, case: str) -> list[str]:
    """The arguments of an import that must fail: a dump folder, or a tokenizer, broken as ``case`` says."""
    write_word_tokenizer(tmp_path / "tokenizer.json", ["[UNK]", "a", "b"])
    dumps = tmp_path / "rollouts"
    tokenizer = tmp_path / ("nope.json" if case == "no-tokenizer" else "tokenizer.json")
    if case != "no-dir":
        dumps.mkdir()
    line = {"input": "a", "output": "b"}
    files = {
        "no-step-files": {"notes.txt": "x\n"},
        "no-input": {"1.jsonl": json.dumps({"output": "b"}) + "\n"},
        "no-output": {"1.jsonl": json.dumps({"input": "a"}) + "\n"},
        "non-integer-step": {"step1.jsonl": json.dumps(line) + "\n", "1.5.jsonl": json.dumps(line) + "\n"},
        "empty-file": {"1.jsonl": ""},
        "no-tokenizer": {"1.jsonl": json.dumps(line) + "\n"},
    }.get(case, {})
    for name, text in files.items():
        (dumps / name).write_text(text)
    return ["trace", "import", str(dumps), "--tokenizer", str(tokenizer), "--out", str(tmp_path / "t.csv")]


@pytest.mark.parametrize(
    ("case", "said"),
    [
        ("no-dir", "rollouts': no such directory"),
        ("no-step-files", "holds no {step}.jsonl rollout dumps (it holds notes.txt)"),
        ("no-input", "1.jsonl:1:input=None: missing (every line of a veRL rollout dump holds decoded input"),
        ("no-output", "1.jsonl:1:output=None: missing (every line of a veRL rollout dump holds decoded"),
        ("non-integer-step", "(it holds 1.5.jsonl, step1.jsonl); veRL names each dump by its step alone"),
        ("empty-file", "rollouts': its {step}.jsonl dumps hold no rows"),
        (
            "no-tokenizer",
            "nope.json': no such file (expected a tokenizer.json or a model folder holding one)",
        ),
    ],
)
def test_each_bad_verl_import_is_one_line_and_exit_2(
    cli: typer.Typer, tmp_path: Path, case: str, said: str
) -> None:
    code, stdout, err = run(cli, _bad_import(tmp_path, case))
    assert code == 2
    assert stdout == ""
    assert said in err
    assert len(err.splitlines()) == 1
    assert not (tmp_path / "t.csv").exists()
