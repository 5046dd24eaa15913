"""``make bench``'s replay section plays what issue 6 names and what the commands it quotes give.

Issue 6, item 4: `trace synth --profile long-cot --prompts 256 --samples 16 --steps 6 --seed 1`,
steps 3-5 replayed on `8xH100,8xAscend910B` with a 7B preset, every policy, with and without stealing,
plus math100 on `4xH100` (step 1); its speed target replays 6 steps x 4,096 trajectories. The section
builds its trace in memory and its configs by hand, beside the command strings docs/benchmarks.md
quotes; nothing held them together until audit61b (2026-12-07). ``replay`` is replaced by a stub that
records what it was asked and stops, so nothing is planned.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from predictors.synthetic import synthetic_trace
from predictors.traceio import read_trace
from predictors.tracetable import Trace
from predictors.tracewrite import write_trace
from service.bench import report as benchreport
from service.replay.harness import ORACLE, ReplayConfig
from service.workerspec import parse_workers

EVERY_POLICY = ("round_robin", "least_loaded", "lpt", "cpsat", ORACLE)


class AskedError(Exception):
    """Raised by the stub in place of a replay: what was asked is in ``calls``."""


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Trace, ReplayConfig]]:
    """The (trace, config) of each replay the section asks for; the first call stops the section."""
    asked: list[tuple[Trace, ReplayConfig]] = []

    def stub(trace: Trace, config: ReplayConfig, *_: object) -> None:
        asked.append((trace, config))
        raise AskedError

    monkeypatch.setattr(benchreport, "replay", stub)
    return asked


def _option(command: str, name: str) -> str:
    words = shlex.split(command)
    return words[words.index(name) + 1]


def test_the_headline_replays_steps_3_to_5_of_the_issues_pool_with_every_policy_both_ways(
    calls: list[tuple[Trace, ReplayConfig]],
) -> None:
    with pytest.raises(AskedError):
        benchreport.replay_section()
    _, config = calls[0]
    assert config.steps == (3, 4, 5)
    assert config.policies == EVERY_POLICY
    assert sorted(config.steal_modes) == [False, True]
    assert config.inventory == parse_workers("8xH100,8xAscend910B", "7b")
    quoted = benchreport.HEADLINE_REPLAY
    assert (_option(quoted, "--workers"), _option(quoted, "--model")) == ("8xH100,8xAscend910B", "7b")
    assert _option(quoted, "--steps") == "3-5"


def test_the_headline_trace_is_the_one_its_quoted_trace_synth_command_writes(
    calls: list[tuple[Trace, ReplayConfig]], cli: typer.Typer, tmp_path: Path
) -> None:
    command = benchreport.HEADLINE_SYNTH
    assert [_option(command, n) for n in ("--profile", "--prompts", "--samples", "--steps", "--seed")] == [
        "long-cot",
        "256",
        "16",
        "6",
        "1",
    ]
    out = tmp_path / "synth.csv"
    written = CliRunner().invoke(cli, [*shlex.split(command)[1:], "--out", str(out)])
    assert written.exit_code == 0, written.output
    with pytest.raises(AskedError):
        benchreport.replay_section()
    played, read = calls[0][0], read_trace(out)
    assert len(played) == 256 * 16 * 6
    for column in ("step", "sample_idx", "prompt_tokens", "output_tokens", "max_new_tokens", "finish_reason"):
        assert np.array_equal(getattr(played, column), getattr(read, column)), column
    assert list(played.prompt_id) == list(read.prompt_id)
    assert np.array_equal(played.reward, read.reward)


def test_the_speed_run_replays_every_step_of_4096_trajectories_with_every_policy(
    calls: list[tuple[Trace, ReplayConfig]],
) -> None:
    trace = synthetic_trace("long-cot", prompts=256, samples=16, steps=6, seed=1)
    with pytest.raises(AskedError):
        benchreport._timing(trace, parse_workers("8xH100,8xAscend910B", "7b"), EVERY_POLICY)
    played, config = calls[0]
    assert config.steps == (0, 1, 2, 3, 4, 5)
    assert config.policies == EVERY_POLICY
    assert all(np.count_nonzero(played.step == step) == 4_096 for step in config.steps)


def test_the_real_trace_is_replayed_at_step_1_on_4xh100_both_ways(
    calls: list[tuple[Trace, ReplayConfig]], tmp_path: Path
) -> None:
    assert "4xH100" in benchreport.REAL_POOLS
    assert _option(benchreport.REAL_REPLAY, "--steps") == "1"
    path = tmp_path / "two_steps.csv"  # stands in for math100_x8 (steps 0 and 1), which may be absent
    write_trace(synthetic_trace("short-cot", prompts=4, samples=2, steps=2, seed=0), path)
    with pytest.raises(AskedError):
        benchreport._real_replay(path, "4xH100")
    _, config = calls[0]
    assert config.steps == (1,)
    assert config.policies == EVERY_POLICY
    assert sorted(config.steal_modes) == [False, True]
    assert config.inventory == parse_workers("4xH100", "7b")
