"""How many examples a fuzz property draws: a few in every run, many more under ``-m slow``.

Each fuzz test states its property once and is run at both sizes by ``pytest.mark.parametrize`` over
``runs``, not written twice (a default test and a ``test_many_...`` copy with other settings)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, settings


def runs(some: int, many: int, fixtures: bool = True) -> list[Any]:
    """The two sizes as ``pytest.param``s of a hypothesis ``settings``: ``some`` examples, and
    ``many`` marked ``slow``. ``fixtures``: the property draws inside a function-scoped fixture's test
    (the app, Redis), which hypothesis warns of unless told that the fixture is meant to be shared."""
    quiet = [HealthCheck.function_scoped_fixture] if fixtures else []
    return [
        pytest.param(settings(max_examples=some, suppress_health_check=quiet), id=f"{some}-examples"),
        pytest.param(
            settings(max_examples=many, suppress_health_check=quiet),
            id=f"{many}-examples",
            marks=pytest.mark.slow,
        ),
    ]
