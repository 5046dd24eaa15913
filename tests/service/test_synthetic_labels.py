"""The predictor's figures on a generated trace say they are synthetic: ``predictor eval`` of a trace
whose rows carry ``source=synthetic``, and ``bench predictor-drift``, which always generates its own.
Both printed the same title and JSON as for a recorded run (replay's label: tests/service/replay/
test_synthetic_label.py)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import typer
from typer.testing import CliRunner

from predictors.synthetic import synthetic_trace
from predictors.tracewrite import write_trace

DRIFT = ["bench", "predictor-drift", "--prompts", "12", "--samples", "2", "--steps", "3"]


def _write_synthetic_and_recorded(folder: Path) -> None:
    """The same rows twice: ``synth.csv`` labelled ``source=synthetic`` as generated, ``recorded.csv``
    without the label, as a recorded trace has it."""
    trace = synthetic_trace("short-cot", prompts=12, samples=2, steps=2, seed=1)
    write_trace(trace, folder / "synth.csv")
    write_trace(dataclasses.replace(trace, categorical={}), folder / "recorded.csv")


def _eval(cli: typer.Typer, path: Path, *flags: str) -> str:
    result = CliRunner().invoke(cli, ["predictor", "eval", str(path), *flags])
    assert result.exit_code == 0, result.stderr
    return result.stdout


def test_predictor_eval_of_a_synthetic_trace_says_so_and_of_a_recorded_one_does_not(
    cli: typer.Typer, tmp_path: Path
) -> None:
    _write_synthetic_and_recorded(tmp_path)
    assert "scored step(s) of a SYNTHETIC trace" in _eval(cli, tmp_path / "synth.csv")
    assert json.loads(_eval(cli, tmp_path / "synth.csv", "--json"))["synthetic"] is True
    assert "SYNTHETIC" not in _eval(cli, tmp_path / "recorded.csv")
    assert json.loads(_eval(cli, tmp_path / "recorded.csv", "--json"))["synthetic"] is False


def test_bench_predictor_drift_says_its_trace_is_synthetic_and_which_drift_it_had(cli: typer.Typer) -> None:
    result = CliRunner().invoke(cli, DRIFT)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines()[0] == (
        "SYNTHETIC short-cot trace (12 prompts x 2 samples x 3 steps, seed 1), "
        "drift 0.005/step (the profile's own), 72 rows"
    )  # was "short-cot, drift profile default/step, 72 rows"
    result = CliRunner().invoke(cli, [*DRIFT, "--drift", "0.05", "--json"])
    report = json.loads(result.stdout)
    assert (report["synthetic"], report["drift"]) == (True, 0.05)


def _train(cli: typer.Typer, trace: Path, out: Path) -> str:
    result = CliRunner().invoke(cli, ["predictor", "train", str(trace), "--out", str(out)])
    assert result.exit_code == 0, result.stderr
    return result.stdout


def _stored_metadata(out: Path) -> dict[str, object]:
    loaded: dict[str, object] = json.loads((out / "v000001" / "metadata.json").read_text())
    return loaded


def test_predictor_train_on_a_synthetic_trace_says_so_and_stores_the_label_with_the_model(
    cli: typer.Typer, tmp_path: Path
) -> None:
    _write_synthetic_and_recorded(tmp_path)
    said = _train(cli, tmp_path / "synth.csv", tmp_path / "synth-models")
    assert said.splitlines()[0].startswith(
        f"saved model version 1 to {tmp_path / 'synth-models' / 'v000001'}: SYNTHETIC trace, 48 rows, "
    )  # was "...: 48 rows, ...", as for a recorded run
    assert _stored_metadata(tmp_path / "synth-models")["synthetic"] is True
    assert "SYNTHETIC" not in _train(cli, tmp_path / "recorded.csv", tmp_path / "recorded-models")
    assert _stored_metadata(tmp_path / "recorded-models")["synthetic"] is False


def test_a_version_saved_before_the_label_loads_as_not_synthetic(cli: typer.Typer, tmp_path: Path) -> None:
    from predictors.store import ModelStore

    write_trace(synthetic_trace("short-cot", prompts=12, samples=2, steps=2, seed=1), tmp_path / "s.csv")
    _train(cli, tmp_path / "s.csv", tmp_path / "models")
    meta_path = tmp_path / "models" / "v000001" / "metadata.json"
    older = {k: v for k, v in json.loads(meta_path.read_text()).items() if k != "synthetic"}
    meta_path.write_text(json.dumps(older))
    assert ModelStore(tmp_path / "models").load()[1].metadata.synthetic is False
