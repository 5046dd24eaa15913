"""A replica started on a store whose versions were fitted on features no request may send any more
(a release before round 61 trained on stored actuals that carried them) serves the fallbacks, says why
in one warning, counts no failed load, and serves the next retrain's version, fitted without them.

It had loaded such a version and served it until a retrain replaced it, its predictions reading each
refused feature (``completion_tokens``, the length it predicts) as missing
(``predictors.store.RetiredFeaturesError``; the store's side:
tests/predictors/test_store_retired_features.py).
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from predictors.store import ModelStore
from tests.predictors.helpers import fitted_with
from tests.service.api_helpers import AppFactory, actual_history
from tests.service.learning.reload_helpers import served


def test_a_store_of_such_versions_serves_the_fallbacks_with_one_warning_until_a_retrain(
    make_client: AppFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = ModelStore(tmp_path / "models")
    retired = fitted_with(numeric=("completion_tokens",))
    store.save(retired)
    store.save(retired)
    with caplog.at_level(logging.WARNING, logger="service.models"):
        client = make_client(actuals_follow_s=60.0)  # its follower's next tick a minute off
        assert client.get("/models").json()["version"] == "fallback"
        served(client).reload()  # what the follower's tick runs: passed over again, not told again
        told = [r for r in caplog.records if r.name == "service.models" and r.levelno >= logging.WARNING]
    assert [r.levelname for r in told] == ["WARNING"], [r.getMessage() for r in told]
    message = told[0].getMessage()
    assert "v000002" in message
    assert "'completion_tokens'" in message
    assert "the fallbacks, predicts until a retrain (POST /models/retrain" in message
    text = client.get("/metrics").text
    assert re.search(r'^rollout_model_load_failures_total\{what="version"\} 0\.0$', text, re.M)  # no damage
    client.post("/actuals", json={"actuals": actual_history(steps=2)})
    assert client.post("/models/retrain").json()["version"] == "v3"
    served(client).reload()
    assert served(client).version == "v3"
