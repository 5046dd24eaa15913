"""A version's fencing token is read once while its ``metadata.json`` is the same file, and read again
once another file is in its place, however like the first it looks.

Since round 63 (edges63) ``ModelStore.fence_token`` keeps each version's token with the file's
identity (``ModelStore.identity``: inode, size, modified and changed times), so a listing at every
reload tick reads no token twice. A token kept past its file would let a version renamed in under a
superseded one's number stay passed over (or a stale model stay served): the listing must judge the
file now in place. Round 63's tests replaced a version only by a new file of another size and time,
which a key of fewer fields (or none) tells apart too (mutants64)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from predictors.model import FittedModel
from predictors.store import ModelStore
from tests.predictors.helpers import fitted_with

EARLIER, STALE, FRESH = 5, 3, 7  # one digit each: the metadata files of one model are the same size


@pytest.fixture(scope="module")
def model() -> FittedModel:
    return fitted_with()


def _superseded_second(tmp_path: Path, model: FittedModel) -> ModelStore:
    """A store whose v2 was fitted under a lock older than v1's: passed over."""
    store = ModelStore(tmp_path)
    store.save(model, fence_token=EARLIER)
    store.save(model, fence_token=STALE)
    assert store.versions() == [1]
    return store


def test_a_copy_keeping_size_and_times_put_in_a_versions_place_is_judged_by_its_own_token(
    tmp_path: Path, model: FittedModel
) -> None:
    """A copy that keeps the times (``cp -p``, ``rsync -a``, a restore) of a file the same size is
    still another file: its token is read, and the version it now is taken."""
    store = _superseded_second(tmp_path, model)
    copy = store.save(model, fence_token=FRESH)  # v3, renamed in as v2
    old, new = store.path(2) / "metadata.json", store.path(copy) / "metadata.json"
    assert old.stat().st_size == new.stat().st_size
    kept = old.stat()
    os.utime(new, ns=(kept.st_atime_ns, kept.st_mtime_ns))
    shutil.rmtree(store.path(2))
    store.path(copy).rename(store.path(2))
    assert store.versions() == [1, 2]
    assert store.fence_token(2) == FRESH


def test_a_metadata_file_rewritten_in_place_is_read_again(tmp_path: Path, model: FittedModel) -> None:
    """An operator's edit of the token in the file itself (the same inode, written later): read again."""
    store = _superseded_second(tmp_path, model)
    path = store.path(2) / "metadata.json"
    kept = path.stat()
    meta = json.loads(path.read_text())
    with path.open("r+") as file:  # into the same file, not a new one put in its place
        file.write(json.dumps({**meta, "fence_token": FRESH}, indent=2))
        file.truncate()
    os.utime(path, ns=(kept.st_atime_ns, kept.st_mtime_ns + 1_000_000_000))  # a second later
    assert path.stat().st_ino == kept.st_ino
    assert store.versions() == [1, 2]
    assert store.fence_token(2) == FRESH
