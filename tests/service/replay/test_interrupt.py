"""Ctrl-C during a multi-process ``replay``: one line, exit 130, at once, and no worker left behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from predictors.synthetic import synthetic_trace
from predictors.tracewrite import write_trace
from tests.service.interrupt import alive, interrupt

PROMPT_EXIT_S = 3.0  # a plan in flight may take its whole --time-budget (8 s here); exiting must not wait


@pytest.fixture(scope="module")
def long_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Twelve steps, each a fit and five plans: a replay still running seconds after it starts."""
    path = tmp_path_factory.mktemp("interrupt") / "long.csv"
    write_trace(synthetic_trace("long-cot", prompts=64, samples=8, steps=12, seed=5), path)
    return path


def _args(trace: Path) -> list[str]:
    return [
        "replay",
        str(trace),
        "--workers",
        "2xH100,2xAscend910B",
        "--processes",
        "2",
        "--time-budget",
        "8",
    ]


def test_ctrl_c_during_a_replay_prints_one_line_and_no_worker_traceback(long_trace: Path) -> None:
    ended = interrupt(_args(long_trace), workers=2, settle_s=1.0)
    assert ended.code == 130, ended.stderr  # a crash's stderr holds every thread's stack (faulthandler)
    assert ended.stderr.strip() == "replay: interrupted"
    assert ended.exit_s < PROMPT_EXIT_S
    assert not any(alive(pid) for pid in ended.workers)


def test_sigint_to_the_replay_alone_ends_it_and_its_workers_without_waiting_for_plans(
    long_trace: Path,
) -> None:
    ended = interrupt(_args(long_trace), workers=2, settle_s=1.0, whole_group=False)
    assert ended.code == 130, ended.stderr  # a crash's stderr holds every thread's stack (faulthandler)
    assert ended.stderr.strip() == "replay: interrupted"
    assert ended.exit_s < PROMPT_EXIT_S
    assert not any(alive(pid) for pid in ended.workers)
