"""Small traces for the replay tests (the registered CLI is tests/conftest.py's `cli`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from predictors.synthetic import synthetic_trace
from predictors.tracetable import Trace
from predictors.tracewrite import write_trace


@pytest.fixture(scope="session")
def small_trace() -> Trace:
    """Long CoT, 12 prompts x 4 samples x 3 steps: big enough to plan, small enough to replay in seconds."""
    return synthetic_trace("long-cot", prompts=12, samples=4, steps=3, seed=5)


@pytest.fixture
def small_trace_file(tmp_path: Path, small_trace: Trace) -> Path:
    path = tmp_path / "small.csv"
    write_trace(small_trace, path)
    return path
