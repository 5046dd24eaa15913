"""Every replay option is checked before the trace is read: a large trace takes seconds to load, and a
typo in an option was reported only after it (or, for a device that cannot hold the model, after the
predictor was fitted too). The trace here does not exist or is not a trace at all, so an error about
the option rather than the trace shows that the trace was never opened."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import typer

from tests.service.replay.clirun import run

CASES: dict[str, tuple[list[str], str]] = {
    "a device that cannot hold the model's weights": (
        ["--workers", "8xH100,8xAscend910B", "--model", "32b"],
        "replay: workers='8xAscend910B': one Ascend910B offers 57.6 GiB to the engine",
    ),
    "a count with no device": (
        ["--workers", "8x"],
        "replay: workers='8x': malformed (a count with no device); expected COUNTxDEVICE[:max_num_seqs], "
        "e.g. 8xH100,8xAscend910B",
    ),  # was "replay: device='8x': unknown; expected one of A100-80GB, ..."
    "an unknown device": (
        ["--workers", "8xB200"],
        "replay: device='B200': unknown; expected one of A100-80GB, Ascend910B, H100, H200",
    ),
    "a zero time budget": (["--time-budget", "0"], "replay: time_budget=0.0: must be a positive"),
    "a NaN time budget": (["--time-budget", "nan"], "replay: time_budget=nan: must be a positive"),
    "a negative seed": (["--seed", "-1"], "replay: seed=-1: must be an integer >= 0"),
    "an unknown engine": (
        ["--engine", "vllm-v2"],
        "replay: engine='vllm-v2': unknown; expected one of vllm-v0, vllm-v1",
    ),
    "steps that are no number": (["--steps", "abc"], "replay: steps='abc': expected a step"),
    "a range that runs backwards": (["--steps", "5-3"], "replay: steps='5-3': a range must run"),
    "empty steps": (["--steps", " "], "replay: steps=' ': empty"),
    "a per-worker policy not replayed": (
        ["--policies", "lpt", "--per-worker", "cpsat"],
        "replay: per_worker='cpsat': not among --policies (lpt)",
    ),
    "a plot under a file": (
        ["--plot", "{blocker}/g.png"],
        "replay: plot='{blocker}/g.png': cannot be written",
    ),
    "a report under a file": (
        ["--report", "{blocker}/r.html"],
        "replay: report='{blocker}/r.html': cannot be written",
    ),
}


@pytest.fixture(params=["missing.csv", "garbage.csv"])
def unread_trace(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """A trace path whose reading would fail with an error of its own: absent, or not a trace."""
    path = tmp_path / str(request.param)
    if path.name == "garbage.csv":
        path.write_bytes(b"\x00\xff not a trace \x00" * 1_000)
    return path


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_bad_option_is_one_line_naming_it_before_the_trace_is_read(
    case: str, cli: typer.Typer, unread_trace: Path, tmp_path: Path
) -> None:
    blocker = tmp_path / "afile"
    blocker.write_text("")
    args, line = CASES[case]
    args = [a.format(blocker=blocker) for a in args]
    if "--workers" not in args:
        args = [*args, "--workers", "1xH100"]
    code, out, err = run(cli, ["replay", str(unread_trace), *args])
    assert code == 2
    assert out == ""
    assert len(err.splitlines()) == 1, err
    assert err.startswith(line.format(blocker=blocker)), err
    assert "Traceback" not in err


def test_an_output_folder_that_may_not_be_written_is_refused_before_the_trace_is_read(
    cli: typer.Typer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    real_access = os.access

    def access(path: str | os.PathLike[str], mode: int) -> bool:
        """Root may write into any folder: answer for this one as the OS answers other users."""
        return not (Path(path) == locked and mode & os.W_OK) and real_access(path, mode)

    monkeypatch.setattr(os, "access", access)
    target = locked / "g.png"
    code, _, err = run(
        cli, ["replay", str(tmp_path / "missing.csv"), "--workers", "1xH100", "--plot", str(target)]
    )
    assert code == 2
    assert err.splitlines() == [f"replay: plot={str(target)!r}: cannot be written here"]


def test_a_trace_read_after_the_options_pass_is_still_named_when_missing(
    cli: typer.Typer, tmp_path: Path
) -> None:
    code, _, err = run(cli, ["replay", str(tmp_path / "missing.csv"), "--workers", "1xH100", "--steps", "1-"])
    assert code == 2
    assert "missing.csv" in err
