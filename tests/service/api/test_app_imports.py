"""What ``serve`` loads before it answers: every module ``service.app`` imports is time before
``/readyz`` turns ready, in every replica start and in every test that starts a ``serve``.

scipy.stats (~0.8 s on the 2-core dev host, of ~3.9 s for the whole app) came in through
``predictors/drift.py`` for one Student t quantile, which ``scipy.special`` gives to the bit (helper
ci53, docs/experiments.md). ``predictors/evaluate.py`` keeps scipy.stats: serving never imports it.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

LOADED = 'import sys, service.app; print(" ".join(sorted(m for m in {modules} if m in sys.modules)))'


@pytest.mark.timeout(120)
def test_the_service_app_loads_no_scipy_stats_and_no_offline_evaluation() -> None:
    heavy = {"scipy.stats", "predictors.evaluate"}
    code = LOADED.format(modules=sorted(heavy))
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert set(done.stdout.split()) == set()
