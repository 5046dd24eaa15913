"""The model store's failed saves: a save that fails (a full disk, a name too long) leaves nothing behind.

Apart from ``test_store.py`` (what a saved version is, and how readers see it) because these are
about the write path alone: each fakes one failure part way through ``ModelStore.save`` and states
what the store folder holds afterwards, staging files and folders it made included.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from predictors.model import fit
from predictors.store import ModelStore
from tests.predictors.helpers import FAST, drifting_trace


def test_a_booster_that_cannot_be_written_is_an_os_error_and_leaves_no_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LightGBM reports a full disk as LightGBMError ("Cannot write binary data ... wrote 65536 of
    149269 bytes"); ``predictor train`` handles OSError from the store, and printed a traceback."""
    import lightgbm as lgb

    model = fit(drifting_trace(steps=2), FAST)

    def full_disk(path: str) -> None:
        raise lgb.basic.LightGBMError(f"Cannot write binary data to {path}, wrote 65536 of 149269 bytes")

    monkeypatch.setattr(model.p90, "save_model", full_disk)
    store = ModelStore(tmp_path)
    with pytest.raises(OSError, match=r"could not write .*p90\.txt"):
        store.save(model)
    assert store.versions() == []
    assert [p.name for p in tmp_path.iterdir()] == []  # the staging folder is gone too


def test_a_save_that_fails_leaves_no_folder_it_made(tmp_path: Path) -> None:
    """A store name longer than the file system takes: the folders above it were made and stayed."""
    model = fit(drifting_trace(steps=2), FAST)
    with pytest.raises(OSError, match="too long"):
        ModelStore(tmp_path / "new" / "deeper" / ("m" * 300)).save(model)
    assert list(tmp_path.iterdir()) == []


def test_a_save_that_fails_in_a_store_it_created_removes_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk while the boosters are written: the staging folder went, the new store stayed."""
    import lightgbm as lgb

    model = fit(drifting_trace(steps=2), FAST)

    def full_disk(path: str) -> None:
        raise lgb.basic.LightGBMError(f"Cannot write binary data to {path}")

    monkeypatch.setattr(model.p50, "save_model", full_disk)
    with pytest.raises(OSError, match="could not write"):
        ModelStore(tmp_path / "new" / "models").save(model)
    assert list(tmp_path.iterdir()) == []


def test_a_version_number_that_cannot_be_remembered_leaves_no_staged_file(tmp_path: Path) -> None:
    """Something else at ``.last-version`` (here a folder) makes the rename over it fail: the save
    still succeeds, as remembering is best effort, but the staged ``.last-version.<pid>.<n>`` stayed
    in the store folder for good, one more with every save."""
    (tmp_path / ".last-version").mkdir()
    store = ModelStore(tmp_path)
    assert store.save(fit(drifting_trace(steps=2), FAST)) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == [".last-version", "v000001"]


def test_a_version_number_written_part_way_leaves_no_staged_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk while the number is written: the cut file stayed beside the versions."""
    write_text = Path.write_text

    def full_disk(self: Path, data: str, *args: Any, **kwargs: Any) -> int:
        if not self.name.startswith(".last-version."):
            return write_text(self, data, *args, **kwargs)
        write_text(self, data[:1], *args, **kwargs)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "write_text", full_disk)
    store = ModelStore(tmp_path)
    assert store.save(fit(drifting_trace(steps=2), FAST)) == 1
    assert [p.name for p in tmp_path.iterdir()] == ["v000001"]
