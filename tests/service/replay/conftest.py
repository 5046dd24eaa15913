"""Small traces and a registered CLI for the replay tests."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer

from predictors.synthetic import synthetic_trace
from predictors.traceio import write_trace
from predictors.tracetable import Trace


@pytest.fixture(scope="session")
def small_trace() -> Trace:
    """Long CoT, 12 prompts x 4 samples x 3 steps: big enough to plan, small enough to replay in seconds."""
    return synthetic_trace("long-cot", prompts=12, samples=4, steps=3, seed=5)


@pytest.fixture
def small_trace_file(tmp_path: Path, small_trace: Trace) -> Path:
    path = tmp_path / "small.csv"
    write_trace(small_trace, path)
    return path


@pytest.fixture(scope="session")
def cli() -> typer.Typer:
    """The root app with every command group attached (what the console script runs)."""
    from service.cli import _register, app

    if not app.registered_groups or not any(g.name == "trace" for g in app.registered_groups):
        _register()
    return app
