"""A model store load that fails is counted: ``rollout_model_load_failures_total{what}`` (learn51).

A version that did not load (damaged, foreign) or a store that could not be listed was a log line
only (``model store: ...; passed over``, once per version): no series an alert could watch while
every replica kept serving an older model. Each failed try is counted now, a version's and the
listing's apart, both series there from the start at 0. The damage here is real: a copy of a
stored version with a model file overwritten, read by the replica's own reload."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from fastapi.testclient import TestClient

from tests.service.api_helpers import AppFactory, actual_history
from tests.service.learning.reload_helpers import served


def _failures(client: TestClient, what: str) -> float:
    """The counter's value for ``what`` in the replica's scrape."""
    text = client.get("/metrics").text
    [value] = re.findall(rf'^rollout_model_load_failures_total{{what="{what}"}} (\S+)$', text, re.M)
    return float(value)


def test_a_damaged_version_in_the_store_counts_a_failed_load(make_client: AppFactory, tmp_path: Path) -> None:
    client = make_client(actuals_follow_s=60.0)  # its follower's next tick a minute off
    client.post("/actuals", json={"actuals": actual_history(steps=2)})
    assert client.post("/models/retrain").json()["version"] == "v1"
    assert _failures(client, "version") == 0.0  # the series is there before any failure
    store = tmp_path / "models"
    damaged = store / "v000002"
    shutil.copytree(store / "v000001", damaged)
    (damaged / "p50.txt").write_text("garbage")
    served(client).reload()  # what the follower's tick runs: v2 does not load, v1 stays
    assert served(client).version == "v1"
    assert _failures(client, "version") >= 1.0
    assert _failures(client, "listing") == 0.0


def test_a_store_that_cannot_be_listed_counts_a_failed_listing(
    make_client: AppFactory, tmp_path: Path
) -> None:
    client = make_client(actuals_follow_s=60.0)
    assert _failures(client, "listing") == 0.0
    shutil.rmtree(tmp_path / "models", ignore_errors=True)
    (tmp_path / "models").write_text("not a folder")  # a lost volume: the listing fails
    served(client).reload()
    assert _failures(client, "listing") >= 1.0
