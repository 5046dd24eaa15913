"""A staging folder a dead save left in the model store goes at the next save; a live save's never does.

Why: a retrain's save runs on a daemon thread, and an exit that cut it (or a SIGKILL, an OOM kill)
left its ``.staging-*`` folder in the store for good (exit51). ``predictors.store_sweep`` says when a
folder is taken for a dead writer's: nothing in it written for ``STALE_S``. Times are set on the
files here, not waited for."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from predictors import store as store_module
from predictors.fsmode import make_ordinary
from predictors.model import FittedModel, fit
from predictors.store import ModelStore
from predictors.store_sweep import STALE_S, sweep_stale
from tests.predictors.helpers import FAST, drifting_trace


@pytest.fixture(scope="module")
def model() -> FittedModel:
    return fit(drifting_trace(steps=2), FAST)


def _staged(root: Path, name: str, written_ago_s: float, files: dict[str, float] | None = None) -> Path:
    """A staging folder as a save leaves it: a booster file in it; the folder and its files last
    written ``written_ago_s`` ago, but for ``files`` (name -> seconds ago)."""
    folder = root / f".staging-{name}"
    folder.mkdir(parents=True)
    written = {"p50.txt": written_ago_s, **(files or {})}
    for file, ago in written.items():
        (folder / file).write_text("booster")
        os.utime(folder / file, (time.time() - ago,) * 2)
    os.utime(folder, (time.time() - written_ago_s,) * 2)
    return folder


def _names(root: Path) -> set[str]:
    return {entry.name for entry in root.iterdir()}


def test_a_staging_folder_a_dead_save_left_goes_at_the_next_save(tmp_path: Path, model: FittedModel) -> None:
    dead = _staged(tmp_path, "dead", written_ago_s=2 * STALE_S)
    version = ModelStore(tmp_path).save(model)
    assert not dead.exists()
    assert _names(tmp_path) == {f"v{version:06d}", ".last-version"}


def test_a_live_saves_staging_folder_is_left_alone_by_another_replicas_save(
    tmp_path: Path, model: FittedModel
) -> None:
    live = _staged(tmp_path, "live", written_ago_s=1.0)
    ModelStore(tmp_path).save(model)
    assert (live / "p50.txt").is_file()


def test_a_folder_whose_newest_file_is_recent_is_a_live_save_however_old_the_folder(tmp_path: Path) -> None:
    """A save writes its files into a folder made earlier: the newest write of all tells."""
    writing = _staged(tmp_path, "writing", written_ago_s=2 * STALE_S, files={"p90.txt": 1.0})
    assert sweep_stale(tmp_path) == []
    assert writing.exists()


def test_a_writer_paused_past_the_bound_publishes_nothing_when_its_folder_was_swept(
    tmp_path: Path, model: FittedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sweep takes the folder by a rename before it removes it: the writer's own rename into
    place then fails, and no version of half its files (or none) is published."""

    def paused_past_the_bound(staging: Path) -> None:
        make_ordinary(staging)
        assert sweep_stale(tmp_path, now=time.time() + 2 * STALE_S) == [staging.name]

    monkeypatch.setattr(store_module, "make_ordinary", paused_past_the_bound)
    store = ModelStore(tmp_path)
    with pytest.raises(FileNotFoundError):
        store.save(model)
    assert store.versions() == []
    assert _names(tmp_path) == set()


def test_a_staged_last_version_file_a_dead_save_left_goes_and_the_highest_number_stays(
    tmp_path: Path, model: FittedModel
) -> None:
    """``.last-version``'s staged file, written then replaced into place: an end between the two left it."""
    left = tmp_path / ".last-version.4242.7"
    left.write_text("7")
    os.utime(left, (time.time() - 2 * STALE_S,) * 2)
    fresh = tmp_path / ".last-version.4243.8"  # a live writer's, about to be replaced into place
    fresh.write_text("8")
    version = ModelStore(tmp_path).save(model)
    assert not left.exists()
    assert fresh.exists()
    assert (tmp_path / ".last-version").read_text() == str(version)
