"""``trace synth`` writes the same bytes for the same seed in any process, in every output format, and
every format reads back labelled synthetic (what replay, ``predictor train`` and ``GET /models`` key on).

In-process tests (tests/scheduler/test_synth.py) cannot see a dependence on the interpreter: hash
randomisation (set or dict order of strings) or state left by an earlier call. Two fresh processes with
different ``PYTHONHASHSEED`` can.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from predictors.synthetic import is_synthetic
from predictors.traceio import read_trace

ROOT = Path(__file__).resolve().parents[3]
SYNTH = ["trace", "synth", "--profile", "long-cot", "--prompts", "6", "--samples", "3", "--steps", "2"]


def _synth_in_a_fresh_process(out: Path, hash_seed: str) -> bytes:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "service.cli", *SYNTH, "--seed", "1", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    return out.read_bytes()


@pytest.mark.parametrize("suffix", ["csv", "jsonl", "parquet"])
def test_the_same_seed_writes_the_same_bytes_in_two_processes_and_reads_back_synthetic(
    tmp_path: Path, suffix: str
) -> None:
    first = _synth_in_a_fresh_process(tmp_path / f"a.{suffix}", "0")
    second = _synth_in_a_fresh_process(tmp_path / f"b.{suffix}", "1")
    assert first == second
    trace = read_trace(tmp_path / f"a.{suffix}")
    assert len(trace.step) == 6 * 3 * 2
    assert is_synthetic(trace)
    assert set(trace.categorical["source"]) == {"synthetic"}
