"""The store's sweep at its edges: the hour's bound itself, names that are not a save's staging, a
sweep cut short, and a folder another replica's sweep took first (``predictors.store_sweep``).

Times are set on the files (whole seconds, so ``now`` can be exactly a bound past them), not waited for."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from predictors import store_sweep
from predictors.model import FittedModel, fit
from predictors.store import ModelStore
from predictors.store_sweep import STALE_S, sweep_stale, sweep_stale_marks
from tests.predictors.helpers import FAST, drifting_trace

WRITTEN_S = 1_700_000_000  # when the files here were last written (a whole second: exact as a float)


@pytest.fixture(scope="module")
def model() -> FittedModel:
    return fit(drifting_trace(steps=2), FAST)


def _written_at(path: Path, at_s: int = WRITTEN_S) -> Path:
    os.utime(path, ns=(at_s * 10**9,) * 2)
    return path


def _staged(root: Path, name: str) -> Path:
    """A staging folder as a dead save left it, a booster file in it, all last written at ``WRITTEN_S``."""
    folder = root / f".staging-{name}"
    folder.mkdir()
    (folder / "p50.txt").write_text("booster")
    _written_at(folder / "p50.txt")
    return _written_at(folder)


def test_a_staging_folder_goes_once_untouched_for_the_bound_and_not_a_moment_before(tmp_path: Path) -> None:
    folder = _staged(tmp_path, "dead")
    assert sweep_stale(tmp_path, now=WRITTEN_S + STALE_S - 0.5) == []
    assert sweep_stale(tmp_path, now=WRITTEN_S + STALE_S) == [folder.name]
    assert list(tmp_path.iterdir()) == []


def test_a_staged_mark_goes_once_untouched_for_the_bound_and_not_a_moment_before(tmp_path: Path) -> None:
    mark = tmp_path / ".last-version.4242.7"
    mark.write_text("7")
    _written_at(mark)
    assert sweep_stale_marks(tmp_path, now=WRITTEN_S + STALE_S - 0.5) == []
    assert sweep_stale_marks(tmp_path, now=WRITTEN_S + STALE_S) == [mark.name]
    assert not mark.exists()


def test_the_highest_number_handed_out_stays_however_long_it_is_untouched(
    tmp_path: Path, model: FittedModel
) -> None:
    """``.last-version`` itself is no staged file: its number outlives the versions pruned, so a save
    after a quiet hour still numbers past it (a reused number would name two models)."""
    (tmp_path / ".last-version").write_text("7")
    os.utime(tmp_path / ".last-version", (time.time() - 2 * STALE_S,) * 2)
    assert ModelStore(tmp_path).save(model) == 8


def test_a_file_named_like_a_staging_folder_is_not_the_sweeps(tmp_path: Path) -> None:
    notes = tmp_path / ".staging-notes"
    notes.write_text("an operator's")
    _written_at(notes)
    assert sweep_stale(tmp_path, now=WRITTEN_S + 2 * STALE_S) == []
    assert [entry.name for entry in tmp_path.iterdir()] == [notes.name]
    assert notes.read_text() == "an operator's"


def test_a_sweep_cut_between_its_rename_and_the_removal_is_finished_by_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sweep's own name is a staging name and keeps the folder's times: the next sweep takes it."""
    _staged(tmp_path, "dead")
    with monkeypatch.context() as cut:
        cut.setattr(
            "predictors.store_sweep.shutil.rmtree", lambda *args, **kwargs: None
        )  # the process ended there
        sweep_stale(tmp_path, now=WRITTEN_S + 2 * STALE_S)
    (left,) = tmp_path.iterdir()
    assert sweep_stale(tmp_path, now=WRITTEN_S + 2 * STALE_S) == [left.name]
    assert list(tmp_path.iterdir()) == []


def test_a_save_goes_on_where_another_replicas_sweep_took_the_folders_first(
    tmp_path: Path, model: FittedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both replicas list the same dead folders; the other's sweep renames them first: this one's
    renames fail, and it passes each over (its save publishes as ever)."""
    for name in ("dead-a", "dead-b"):
        _staged(tmp_path, name)
    newest_write = store_sweep._newest_write
    others: list[list[str]] = []

    def the_other_replica_sweeps_first(path: Path) -> float | None:
        newest = newest_write(path)  # this sweep has read the folder's times: it is stale
        if not others:
            others.append([])  # before the other's sweep: it reads the times through here too
            others[0] = sweep_stale(tmp_path)
        return newest

    monkeypatch.setattr(store_sweep, "_newest_write", the_other_replica_sweeps_first)
    version = ModelStore(tmp_path).save(model)
    assert sorted(others[0]) == [".staging-dead-a", ".staging-dead-b"]
    assert {entry.name for entry in tmp_path.iterdir()} == {f"v{version:06d}", ".last-version"}
