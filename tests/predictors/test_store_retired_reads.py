"""A version passed over for features no request may send is not read again at each reload tick.

Round 62 had ``LengthPredictor.reload`` pass over such a version (``RetiredFeaturesError``) as over a
damaged one, which it tried again at every tick: its ``metadata.json`` read for its stamp, the store
listed once more to load it, the file read again, every version's read for its fencing token each
listing. With the 20 versions a store keeps all fitted so (a replica just upgraded), a tick read 460
files and took ~0.2 s under the swap lock, at every tick until the retrain (edges63). Now the version
is remembered with its file's identity (``ModelStore.identity``, a stat), and the fencing tokens
likewise: a tick reads none of its files, and a version put in its place, or a newer one, is read.
"""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import pytest

from predictors.history import History
from predictors.model import FittedModel
from predictors.predictor import LengthPredictor
from predictors.store import ModelStore, RetiredFeaturesError
from scheduler.errors import InvalidInputError
from tests.predictors.helpers import fitted_with


@pytest.fixture(scope="module")
def retired() -> FittedModel:
    return fitted_with(numeric=("completion_tokens",))


@pytest.fixture(scope="module")
def plain() -> FittedModel:
    return fitted_with(numeric=("x",))


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Each ``metadata.json`` read, by its version's folder name."""
    counted: Counter[str] = Counter()
    read_text = Path.read_text

    def counting(path: Path, *args: object, **kwargs: object) -> str:
        if path.name == "metadata.json":
            counted[path.parent.name] += 1
        return read_text(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_text", counting)
    return counted


def test_a_tick_reads_no_file_of_a_version_passed_over_and_a_newer_one_is_taken(
    tmp_path: Path, retired: FittedModel, plain: FittedModel, reads: Counter[str]
) -> None:
    store = ModelStore(tmp_path)
    store.save(plain)
    store.save(retired)  # v2, the newest, fitted by the release before
    told: list[InvalidInputError] = []
    predictor = LengthPredictor(History())
    assert predictor.reload(store, told.append)
    assert predictor.model_version == 1
    assert [type(error) for error in told] == [RetiredFeaturesError]
    reads.clear()
    for _ in range(5):
        assert not predictor.reload(store, told.append)
    assert reads["v000002"] == 0, reads
    assert len(told) == 1  # told once, not at each tick
    assert store.save(plain) == 3  # the next retrain's
    assert predictor.reload(store, told.append)
    assert predictor.model_version == 3
    assert len(told) == 1


def test_with_every_version_passed_over_a_tick_reads_none(
    tmp_path: Path, retired: FittedModel, reads: Counter[str]
) -> None:
    store = ModelStore(tmp_path)
    for _ in range(4):
        store.save(retired)
    told: list[InvalidInputError] = []
    predictor = LengthPredictor(History())
    assert not predictor.reload(store, told.append)
    assert len(told) == 4
    reads.clear()
    for _ in range(3):
        assert not predictor.reload(store, told.append)
    assert sum(reads.values()) == 0, reads
    assert len(told) == 4
    assert predictor.model is None


def test_a_version_put_in_its_place_under_its_number_is_read_and_taken(
    tmp_path: Path, retired: FittedModel, plain: FittedModel
) -> None:
    store = ModelStore(tmp_path)
    store.save(plain)
    store.save(retired)
    predictor = LengthPredictor(History())
    assert predictor.reload(store)
    assert predictor.model_version == 1
    _put_in_place(store, plain, 2)  # a new file under the number passed over
    assert predictor.reload(store)
    assert predictor.model_version == 2
    assert predictor.model is not None
    assert predictor.model.spec.numeric == ("x",)


def test_the_held_version_refused_under_its_number_is_kept_at_every_tick_not_rolled_back(
    tmp_path: Path, retired: FittedModel, plain: FittedModel
) -> None:
    """The held version's folder replaced under its number by one fitted on retired features: the
    first tick refuses it and keeps the model held (``reload`` never rolls back for what does not
    read now); remembered as refused, the next ticks passed it over and loaded the version before it
    (review64), the roll-back the first tick had refused."""
    store = ModelStore(tmp_path)
    store.save(plain)
    store.save(plain)
    told: list[InvalidInputError] = []
    predictor = LengthPredictor(History())
    assert predictor.reload(store, told.append)
    assert predictor.model_version == 2
    _put_in_place(store, retired, 2)
    for _ in range(3):
        assert not predictor.reload(store, told.append)
        assert predictor.model_version == 2
    assert [type(error) for error in told] == [RetiredFeaturesError]


def _put_in_place(store: ModelStore, model: FittedModel, version: int) -> None:
    """``model`` stored under ``version``'s number in place of what was there: saved as the next
    version, then renamed in, as an operator's copy would be."""
    replacement = store.save(model)
    shutil.rmtree(store.path(version))
    store.path(replacement).rename(store.path(version))


def test_a_damaged_version_is_read_again_once_its_files_are_whole_under_the_same_metadata(
    tmp_path: Path, plain: FittedModel
) -> None:
    """Only a version refused for its features is remembered: one that does not load for damage (a
    booster half copied) may be unreadable only now, and its ``metadata.json`` is the same file once
    the booster is whole again. It is read at the next tick and taken, as before round 63."""
    store = ModelStore(tmp_path)
    store.save(plain)
    store.save(plain)
    booster = store.path(2) / "p50.txt"
    whole = booster.read_bytes()
    booster.write_bytes(whole[: len(whole) // 2])  # a copy half done
    told: list[InvalidInputError] = []
    predictor = LengthPredictor(History())
    assert predictor.reload(store, told.append)
    assert predictor.model_version == 1
    assert len(told) == 1
    booster.write_bytes(whole)
    assert predictor.reload(store, told.append)
    assert predictor.model_version == 2


def test_a_rollback_below_a_version_passed_over_takes_the_one_before(
    tmp_path: Path, retired: FittedModel, plain: FittedModel
) -> None:
    """The newest version, passed over for its features, is not read again, but the reload goes on to
    the older ones: the one held removed (an operator's rollback), the one before it is taken."""
    store = ModelStore(tmp_path)
    store.save(plain)
    store.save(plain)
    store.save(retired)
    predictor = LengthPredictor(History())
    assert predictor.reload(store)
    assert predictor.model_version == 2
    shutil.rmtree(store.path(2))
    assert predictor.reload(store)
    assert predictor.model_version == 1


def test_a_version_replaced_while_it_was_read_is_read_again(
    tmp_path: Path, retired: FittedModel, plain: FittedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What is remembered of a version passed over is its file as it was before the read: one put in
    its place while the reload read it (a folder renamed in meanwhile) is another file, read next tick."""
    store = ModelStore(tmp_path)
    store.save(plain)
    store.save(retired)
    load = store.load
    replaced: list[int] = []

    def replaced_while_read(version: int | None = None) -> tuple[int, FittedModel]:
        try:
            return load(version)
        finally:
            if version == 2 and not replaced:  # after the read, before the reload looks at it again
                replaced.append(ModelStore(tmp_path).save(plain))  # v3, renamed in as v2
                shutil.rmtree(store.path(2))
                store.path(replaced[0]).rename(store.path(2))

    monkeypatch.setattr(store, "load", replaced_while_read)
    predictor = LengthPredictor(History())
    assert predictor.reload(store)
    assert predictor.model_version == 1
    assert predictor.reload(store)
    assert predictor.model_version == 2
