"""A model swap gives the heap its fit or its old boosters freed back to the OS (``service.learning.heap``).

A replica retraining between plans grew 225 -> 447 MB in a soak with no model version held: glibc
kept the fit's freed native buffers resident in the arenas of the threads that ran it."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.learning import heap, models
from tests.service.api_helpers import AppFactory, actual_history, batch_body
from tests.service.learning.reload_helpers import noticed, serving_beside_a_trainer


def _versions_trimmed_at(client: TestClient, monkeypatch: pytest.MonkeyPatch, thread: str = "") -> list[str]:
    """The version ``client``'s replica served at each heap release (those on threads named ``thread``
    only, where given), filled as they happen."""
    service = client.app.state.context.models  # type: ignore[attr-defined]
    seen: list[str] = []

    def release() -> bool:
        if not thread or threading.current_thread().name == thread:
            seen.append(service.version)
        return True

    monkeypatch.setattr(models, "release_freed_heap", release)
    return seen


def test_a_retrain_releases_the_freed_heap_once_its_version_serves(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    trimmed = _versions_trimmed_at(client, monkeypatch)
    client.post("/actuals", json={"actuals": actual_history(steps=2)})
    assert client.post("/models/retrain").json()["version"] == "v1"
    assert trimmed == ["v1"]  # after the swap: the fallback's or old version's boosters are garbage then


def test_a_hot_reload_releases_the_heap_of_the_boosters_it_swapped_out(
    make_client: AppFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    trainer_side, other = serving_beside_a_trainer(make_client, monkeypatch)
    # the reload's, on the other's follower (the trainer's holds v1 already: it swaps nothing); not
    # the trainer's own release, on its request's thread
    trimmed = _versions_trimmed_at(other, monkeypatch, thread="actuals-follower")
    assert trainer_side.post("/models/retrain").json()["version"] == "v1"
    noticed(other, "v1")
    assert other.post("/schedule", json=batch_body(step=2, publish=False)).json()["model_version"] == "v1"
    assert trimmed == ["v1"]  # once, for the swap; a reload that found nothing new trims nothing


# run in a fresh interpreter: a process that already ran fits (the tests above) has arenas whose state
# decides where new chunks land, and the measure would read that, not the release
_FIT_LIKE = """
import sys, threading
from service.learning import heap

def resident_kib():
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmRSS:"))

def fit_like():
    chunk = b"\\x01" * (64 * 1024)  # copied, not calloc'ed: the pages are touched, resident
    freed = [bytearray(chunk) for _ in range(512)]  # 32 MiB, below the mmap threshold: in the arena
    pinned = bytearray(chunk[:4096])  # allocated last: the arena's top stays in use
    del freed
    before = resident_kib()
    released = heap.release_freed_heap()
    print(int(released), before - resident_kib())
    del pinned

worker = threading.Thread(target=fit_like)
worker.start()
worker.join()
"""


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or heap._malloc_trim() is None, reason="glibc's malloc_trim"
)
def test_pages_freed_below_a_live_allocation_go_back_to_the_os() -> None:
    """What a fit leaves on a worker thread: freed chunks that free() alone keeps resident, since a
    chunk still in use lies above them in the thread's arena."""
    root = str(Path(__file__).resolve().parents[3])
    run = subprocess.run(
        [sys.executable, "-c", _FIT_LIKE],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": root},
    )
    released, dropped_kib = (int(word) for word in run.stdout.split())
    assert released == 1
    assert dropped_kib >= 16 * 1024  # at least half of the 32 MiB freed
