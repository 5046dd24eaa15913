"""A retrain fits, and counts, the history it held at its snapshot: actuals folded in after the
snapshot, between the sync lock's release and the fit, are neither fitted nor counted (the fit's
``rows``, a version's ``history_rows``), on the real embedded valkey."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

import pytest
from fastapi.testclient import TestClient

from predictors.history import History
from predictors.tracetable import Trace
from service.learning.models import ModelService
from tests.service.api_helpers import actual_history, actual_report


class _FoldingAfterTheSnapshot:
    """The service's sync lock, which folds ``late`` actuals just after its first release that
    follows a history snapshot (``snapshot_taken``): the moment a ``POST /actuals`` fold gets in
    once the retrain lets the lock go."""

    def __init__(self, lock: threading.RLock, fold: Callable[[], None]) -> None:
        self._lock, self._fold = lock, fold
        self.snapshot_taken = self.folded = False

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        self._lock.release()
        if self.snapshot_taken and not self.folded:
            self.folded = True
            self._fold()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


def test_a_retrain_fits_the_rows_held_at_its_snapshot_not_those_folded_after_it(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Steps 0 and 1 reported (64 rows); a retrain takes its snapshot, and 8 late samples of step 1
    are folded in as it lets the sync lock go. The retrain fits the 64 it held: the 8 are in the
    history (72 rows) for the next one, not in this model, which says it saw 64."""
    assert client.post("/actuals", json={"actuals": actual_history(steps=2)}).status_code == 200
    models: ModelService = client.app.state.context.models  # type: ignore[attr-defined]
    models.sync()
    assert models.rows == 64

    def post_late_samples() -> None:
        late = [actual_report(1, p, 4) for p in range(8)]
        assert client.post("/actuals", json={"actuals": late}).status_code == 200
        models.sync()

    lock = _FoldingAfterTheSnapshot(models._sync_lock, post_late_samples)
    read_history = History.held

    def held_noted(self: History) -> Callable[[], Trace]:
        lock.snapshot_taken = True
        return read_history(self)

    monkeypatch.setattr(models, "_sync_lock", lock)
    monkeypatch.setattr(History, "held", held_noted)
    retrained = models.retrain()
    assert lock.folded
    assert models.rows == 72
    assert retrained.rows == 64
    stored = tmp_path / "models" / f"v{retrained.version:06d}" / "metadata.json"
    assert json.loads(stored.read_text())["training_rows"] == 64
