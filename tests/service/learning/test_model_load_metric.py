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

import pytest
from fastapi.testclient import TestClient

from predictors.model import FittedModel
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


def test_a_version_removed_between_the_listing_and_its_load_is_no_failed_load(
    make_client: AppFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An operator's rollback (or a fenced fit taken back) removed the newest version just after a
    reload listed it: the reload passes it over and keeps what it holds. That is no failure, and
    above all not the store's listing failing (review51a: it was counted as one)."""
    client = make_client(actuals_follow_s=60.0)
    client.post("/actuals", json={"actuals": actual_history(steps=2)})
    assert client.post("/models/retrain").json()["version"] == "v1"
    store = tmp_path / "models"
    shutil.copytree(store / "v000001", store / "v000002")  # a second version, whole
    models = served(client)
    load = models.store.load

    def removed_first(version: int | None = None) -> tuple[int, FittedModel]:
        if version == 2:
            shutil.rmtree(store / "v000002")  # withdrawn after the reload listed it
        return load(version)

    monkeypatch.setattr(models.store, "load", removed_first)
    models.reload()
    assert models.version == "v1"
    assert _failures(client, "listing") == 0.0
    assert _failures(client, "version") == 0.0
