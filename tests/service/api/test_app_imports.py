"""What ``serve`` loads before it answers: every module ``service.app`` imports is time before
``/readyz`` turns ready, in every replica start and in every test that starts a ``serve``.

scipy.stats (~0.8 s on the 2-core dev host, of ~3.9 s for the whole app) came in through
``predictors/drift.py`` for one Student t quantile, which ``scipy.special`` gives to the bit (helper
ci53, docs/experiments.md). ``predictors/evaluate.py`` keeps scipy.stats: serving never imports it.
scipy.special itself (~0.3-0.5 CPU-s a start) is read only by a model's predictions: it comes with
the model's load (``predictors.drift.prepare``), not in a replica without one nor in the first
prediction of one with a model. httpx (~0.2 s with what it imports) is the trainers' client's, which
the service's retrain read one rule of (``scheduler.trace.result_says_length``): helper ci59a.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from predictors.history import History
from predictors.model import fit
from predictors.store import ModelStore
from tests.predictors.helpers import FAST, drifting_trace

HEAVY = ("scipy.stats", "predictors.evaluate", "scipy.special", "httpx")
# the app imported; a predictor made without a model; a model loaded from a store as a replica's start or
# reload loads it; a predictor made with one; then the offline evaluation imported for its types
PROBE = """
import json, sys
import service.app
loaded = sorted(m for m in {heavy} if m in sys.modules)
from predictors.predictor import LengthPredictor
from predictors.store import ModelStore
bare = LengthPredictor()
seen = {{"bare": "scipy.special" in sys.modules}}
took = bare.reload(ModelStore(sys.argv[1]))
seen["special"] = "scipy.special" in sys.modules
del sys.modules["scipy.special"]  # as if never loaded: a predictor made with a model loads it again
LengthPredictor(model=ModelStore(sys.argv[1]).load()[1])
seen["given"] = "scipy.special" in sys.modules
import predictors.evaluate
seen["evaluate"] = "scipy.stats" in sys.modules
print(json.dumps({{"app": loaded, "took_model": took, **seen}}))
"""


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """What one process has loaded once it imported ``service.app``, and once it then took a model."""
    store = tmp_path_factory.mktemp("models")
    trace = drifting_trace()
    ModelStore(store).save(fit(History(trace.take(trace.step < 3)), FAST))
    code = PROBE.format(heavy=HEAVY)
    done = subprocess.run(
        [sys.executable, "-c", code, str(store)], capture_output=True, text=True, timeout=120, check=True
    )
    result: dict[str, Any] = json.loads(done.stdout)
    return result


@pytest.mark.timeout(120)
def test_the_service_app_loads_no_scipy_no_offline_evaluation_and_no_http_client(
    loaded: dict[str, Any],
) -> None:
    assert loaded["app"] == []


@pytest.mark.timeout(120)
def test_a_predictor_that_takes_a_model_has_what_its_predictions_read_loaded(loaded: dict[str, Any]) -> None:
    assert (loaded["took_model"], loaded["special"], loaded["given"]) == (True, True, True)


@pytest.mark.timeout(120)
def test_a_predictor_without_a_model_leaves_scipy_special_unloaded(loaded: dict[str, Any]) -> None:
    # a replica with no model yet answers from the fallbacks, which read no drift (mutants60)
    assert loaded["bare"] is False


@pytest.mark.timeout(120)
def test_the_offline_evaluation_imported_for_its_types_leaves_scipy_stats_unloaded(
    loaded: dict[str, Any],
) -> None:
    # scipy.stats comes with a score, not with the module: each pytest worker imports it at collection
    assert loaded["evaluate"] is False
