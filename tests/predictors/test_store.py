"""The model store: versions round-trip exactly, appear atomically, and a predictor hot-reloads them."""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from predictors.history import History
from predictors.model import FitConfig, FittedModel, fit
from predictors.predictor import LengthPredictor
from predictors.queries import NO_CAP, QueryBatch
from predictors.store import ModelStore
from predictors.tracetable import Trace
from scheduler.errors import InvalidInputError
from tests.predictors.helpers import FAST, drifting_trace

TwoFits = tuple[FittedModel, FittedModel]  # an older and a newer model of one trace


@pytest.fixture(scope="module")
def two_fits() -> TwoFits:
    """The models of steps 0-1 and of steps 0-2 of a three-step trace, fitted once for the module:
    the tests only save them (a save writes files, it never changes the model) and read back copies."""
    trace = drifting_trace(steps=3)
    return fit(trace.take(trace.step < 2), FAST), fit(trace, FAST)


def test_a_saved_model_loads_back_with_identical_predictions_and_metadata(tmp_path: Path) -> None:
    trace = drifting_trace()
    history = History(trace.take(trace.step < 3))
    model = fit(history, FAST)
    store = ModelStore(tmp_path / "models")
    version = store.save(model)
    loaded_version, loaded = store.load()
    assert loaded_version == version == 1
    assert loaded.metadata == model.metadata
    assert loaded.spec == model.spec
    queries = QueryBatch.from_trace(trace.take(trace.step == 3), NO_CAP)
    a = LengthPredictor(history, model).predict(queries, 3)
    b = LengthPredictor(history, loaded).predict(queries, 3)
    np.testing.assert_allclose(a.p50, b.p50)
    np.testing.assert_allclose(a.p90, b.p90)


def test_fits_are_deterministic() -> None:
    trace = drifting_trace(steps=2)
    a, b = fit(trace, FAST), fit(trace, FAST)
    assert a.p50.model_to_string() == b.p50.model_to_string()
    assert a.metadata.p90_shift == b.metadata.p90_shift


def test_a_predictor_hot_reloads_the_newest_version_once(tmp_path: Path, two_fits: TwoFits) -> None:
    older, newer = two_fits  # steps 0-1, then steps 0-2
    store = ModelStore(tmp_path)
    predictor = LengthPredictor(History(drifting_trace(steps=3)))
    assert not predictor.reload(store)  # empty store: nothing to load, fallbacks keep answering
    store.save(older)
    assert predictor.reload(store)
    assert predictor.model_version == 1
    assert not predictor.reload(store)
    store.save(newer)
    assert predictor.reload(store)
    assert predictor.model_version == 2
    assert predictor.model is not None
    assert predictor.model.metadata.steps == (0, 1, 2)


def test_half_written_versions_are_invisible(tmp_path: Path) -> None:
    store = ModelStore(tmp_path)
    (tmp_path / "v000007").mkdir()  # a crashed writer's leftover without its files
    (tmp_path / "v000007" / "p50.txt").write_text("partial")
    assert store.versions() == []
    assert store.latest_version() is None


def test_loading_from_an_empty_store_is_a_typed_error(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="no model version"):
        ModelStore(tmp_path).load()


def test_a_saved_version_is_readable_by_other_users_as_the_umask_allows(tmp_path: Path) -> None:
    """Replicas under other uids share the store: mkdtemp's private 0700 must not survive the save."""
    store = ModelStore(tmp_path / "models")
    trace = drifting_trace()
    version = store.save(fit(History(trace.take(trace.step < 2)), FAST))
    old = os.umask(0o022)
    os.umask(old)
    folder = store.path(version)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o777 & ~old
    for child in folder.iterdir():
        assert stat.S_IMODE(child.stat().st_mode) == 0o666 & ~old


def test_the_documented_fit_defaults_are_the_codes() -> None:
    text = (Path(__file__).parents[2] / "docs" / "predictors.md").read_text()
    config = FitConfig()
    assert f"{config.num_rounds} rounds, learning rate {config.learning_rate}" in text
    assert f"Above {config.bagging_rows:,}" in text


def test_a_damaged_version_is_a_typed_error_naming_its_folder(tmp_path: Path) -> None:
    store = ModelStore(tmp_path / "models")
    folder = store.path(1)
    folder.mkdir(parents=True)
    for name in ("p50.txt", "p90.txt", "metadata.json"):
        (folder / name).write_text("garbage")
    with pytest.raises(InvalidInputError, match="does not load"):
        store.load()


def _two_versions(root: Path, two_fits: TwoFits) -> tuple[ModelStore, LengthPredictor]:
    """A store holding ``two_fits`` as versions 1 and 2, and a predictor that reloaded version 2."""
    store = ModelStore(root)
    for model in two_fits:
        store.save(model)
    predictor = LengthPredictor(History(drifting_trace(steps=3)))
    assert predictor.reload(store)
    assert predictor.model_version == 2
    return store, predictor


def test_removing_the_newest_version_rolls_a_running_predictor_back(
    tmp_path: Path, two_fits: TwoFits
) -> None:
    store, predictor = _two_versions(tmp_path, two_fits)
    shutil.rmtree(store.path(2))
    assert predictor.reload(store)
    assert predictor.model_version == 1


def test_removing_every_version_rolls_a_running_predictor_back_to_the_fallbacks(
    tmp_path: Path, two_fits: TwoFits
) -> None:
    """As a replica started now would answer; it kept serving the removed model until restarted."""
    store, predictor = _two_versions(tmp_path, two_fits)
    shutil.rmtree(store.path(2))
    shutil.rmtree(store.path(1))
    assert predictor.reload(store)
    assert predictor.model is None
    assert predictor.model_version is None
    assert not predictor.reload(store)
    queries = QueryBatch.from_trace(drifting_trace(steps=3).take(np.arange(4)), NO_CAP)
    assert set(predictor.predict(queries, step=3).source) == {"prompt_history_mean"}


def test_a_model_set_by_hand_is_kept_by_a_reload_from_an_empty_store(tmp_path: Path) -> None:
    trace = drifting_trace(steps=2)
    predictor = LengthPredictor(History(trace), fit(trace, FAST))
    assert not predictor.reload(ModelStore(tmp_path))
    assert predictor.model is not None


def _listing_fails_after(monkeypatch: pytest.MonkeyPatch, calls: int) -> None:
    """The store's folder lists ``calls`` times, then fails as a lost network volume does (ESTALE)."""
    listed = ModelStore.versions
    left = [calls]

    def versions(store: ModelStore) -> list[int]:
        left[0] -= 1
        if left[0] < 0:
            raise OSError(errno.ESTALE, "Stale file handle", str(store.root))
        return listed(store)

    monkeypatch.setattr(ModelStore, "versions", versions)


@pytest.mark.parametrize("calls", [0, 1])
def test_a_store_that_cannot_be_listed_keeps_the_model_held_and_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, calls: int, two_fits: TwoFits
) -> None:
    """A reload runs before every prediction; its ``OSError`` failed each of them (and a replica's
    start), where a damaged version is passed over. Listed once then failing: inside ``load``."""
    store, predictor = _two_versions(tmp_path, two_fits)
    shutil.rmtree(store.path(2))  # so the reload would have something to do
    _listing_fails_after(monkeypatch, calls)
    told: list[InvalidInputError] = []
    assert not predictor.reload(store, told.append)
    assert predictor.model_version == 2
    assert [error.field for error in told] == ["model_store"]


def test_a_store_whose_path_names_no_folder_is_not_read_as_an_empty_one(
    tmp_path: Path, two_fits: TwoFits
) -> None:
    """Its volume replaced by a file, the store listed no version, and every replica dropped the
    model it served for the fallbacks, as if an operator had removed every version."""
    store, predictor = _two_versions(tmp_path / "volume" / "models", two_fits)
    shutil.move(tmp_path / "volume", tmp_path / "away")
    (tmp_path / "volume").write_text("not a folder")
    with pytest.raises(NotADirectoryError):
        store.versions()
    assert not predictor.reload(store)
    assert predictor.model_version == 2
    assert ModelStore(tmp_path / "not-made-yet").versions() == []


def test_a_removed_versions_number_is_not_handed_out_again(tmp_path: Path, two_fits: TwoFits) -> None:
    store, predictor = _two_versions(tmp_path, two_fits)
    shutil.rmtree(store.path(2))
    trace = drifting_trace(steps=3)
    assert store.save(fit(trace.take(trace.step < 1), FAST)) == 3
    assert predictor.reload(store)
    assert predictor.model_version == 3


def test_a_version_stored_again_under_the_held_number_is_taken(tmp_path: Path, two_fits: TwoFits) -> None:
    store, predictor = _two_versions(tmp_path, two_fits)
    other = ModelStore(tmp_path / "elsewhere")
    trace = drifting_trace(steps=3)
    other.save(fit(trace.take(trace.step < 1), FAST))
    shutil.rmtree(store.path(2))
    shutil.copytree(other.path(1), store.path(2))  # an operator's copy over the bad version
    assert predictor.reload(store)
    assert predictor.model is not None
    assert predictor.model.metadata.steps == (0,)


def test_the_held_version_reading_damaged_for_a_while_is_kept_not_rolled_back(
    tmp_path: Path, two_fits: TwoFits
) -> None:
    store, predictor = _two_versions(tmp_path, two_fits)
    meta = store.path(2) / "metadata.json"
    whole = meta.read_bytes()
    meta.write_bytes(whole[: len(whole) // 2])  # as a network volume's hiccup reads it
    passed_over: list[InvalidInputError] = []
    assert not predictor.reload(store, passed_over.append)
    assert predictor.model_version == 2
    assert [error.field for error in passed_over] == ["model_store"]
    meta.write_bytes(whole)
    assert not predictor.reload(store)
    assert predictor.model_version == 2


def test_an_incomplete_version_folder_does_not_block_the_next_save(tmp_path: Path) -> None:
    store = ModelStore(tmp_path)
    (tmp_path / "v000003").mkdir()
    (tmp_path / "v000003" / "metadata.json").write_text("{}")
    trace = drifting_trace(steps=2)
    assert store.save(fit(trace, FAST)) == 4


def test_a_truncated_booster_file_is_a_typed_error_not_an_aborted_process(
    tmp_path: Path, two_fits: TwoFits
) -> None:
    """LightGBM aborts the process (C++ terminate) on a cut model file; the checksum stops it first."""
    store, _ = _two_versions(tmp_path, two_fits)
    booster = store.path(2) / "p50.txt"
    booster.write_bytes(booster.read_bytes()[: booster.stat().st_size // 2])
    probe = (
        "import sys\nfrom predictors.store import ModelStore\n"
        "from scheduler.errors import InvalidInputError\n"
        "try:\n    ModelStore(sys.argv[1]).load(2)\nexcept InvalidInputError as e:\n    print(e)"
    )
    done = subprocess.run([sys.executable, "-c", probe, str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "p50.txt is not the file that was saved" in done.stdout


def test_metadata_that_does_not_match_its_boosters_is_refused_at_load(
    tmp_path: Path, two_fits: TwoFits
) -> None:
    store, _ = _two_versions(tmp_path, two_fits)
    meta_path = store.path(2) / "metadata.json"
    meta = json.loads(meta_path.read_text())
    meta["features"] = meta["features"][:-1]
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(InvalidInputError, match="features"):
        store.load(2)


def test_a_report_sent_twice_trains_the_same_model_as_once() -> None:
    """A client's retry of POST /actuals repeats rows; a repeat must not be its own leave-one-out sibling."""
    trace = drifting_trace(steps=3)
    doubled = Trace.concat([trace, trace.take(trace.step == 1)])
    once, twice = fit(trace, FAST), fit(doubled, FAST)
    assert twice.p50.model_to_string() == once.p50.model_to_string()
    assert twice.metadata.p90_shift == once.metadata.p90_shift
    assert twice.metadata.examples == once.metadata.examples


def test_pruning_keeps_the_newest_versions_and_never_reuses_a_number(tmp_path: Path) -> None:
    store = ModelStore(tmp_path)
    trace = drifting_trace(steps=2)
    model = fit(trace, FAST)
    for _ in range(4):
        store.save(model)
    assert store.prune(2) == [1, 2]
    assert store.versions() == [3, 4]
    assert store.save(model) == 5
    with pytest.raises(InvalidInputError, match="at least 1"):
        store.prune(0)


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda meta: meta.update(features=[*reversed(meta["features"])]), id="reordered"),
        pytest.param(lambda meta: meta.update(numeric=["another_column"]), id="another-feature-set"),
    ],
)
def test_a_model_of_another_feature_set_is_refused_at_load_not_at_every_prediction(
    tmp_path: Path, change: Any, two_fits: TwoFits
) -> None:
    """Serving builds ``BASE_FEATURES`` + the stored extras: a version whose feature list differs
    (another release's features, reordered columns) loaded, then failed or misread every prediction."""
    store, _ = _two_versions(tmp_path, two_fits)
    meta_path = store.path(2) / "metadata.json"
    meta = json.loads(meta_path.read_text())
    change(meta)
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(InvalidInputError, match="another feature set"):
        store.load(2)
    predictor = LengthPredictor()
    assert predictor.reload(store)  # the version is passed over, as a damaged one is
    assert predictor.model_version == 1


@pytest.mark.parametrize("field", ["categorical", "metrics"])
def test_metadata_of_the_wrong_shape_is_passed_over_like_a_damaged_version(
    tmp_path: Path, field: str, two_fits: TwoFits
) -> None:
    """A metadata.json another tool wrote (a list where a mapping belongs) raised ``AttributeError``
    out of ``reload``, which failed the start of every replica reading the store."""
    store, _ = _two_versions(tmp_path, two_fits)
    meta_path = store.path(2) / "metadata.json"
    meta = json.loads(meta_path.read_text())
    meta[field] = []
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(InvalidInputError, match="does not load"):
        store.load(2)
    predictor = LengthPredictor()
    assert predictor.reload(store)
    assert predictor.model_version == 1


def test_a_version_stored_after_one_of_a_higher_fencing_token_is_served_by_no_reader(tmp_path: Path) -> None:
    """A fit whose retrain lock lapsed between its check and its rename lands after the newer fit
    of the replica that took the lock over, under the higher number: its lower token (taken with the
    older lock) has every reader pass it over; a version without a token (``predictor train``) is
    neither passed over nor passes over others, and pruning removes the superseded one first."""
    store = ModelStore(tmp_path)
    model = fit(drifting_trace(steps=2), FAST)
    assert store.save(model, fence_token=7) == 1  # the replica that took the lock over
    assert store.save(model, fence_token=6) == 2  # the lapsed fit, renamed in last
    assert store.versions() == [1]
    assert store.load()[0] == 1
    predictor = LengthPredictor(History(drifting_trace(steps=2)))
    assert predictor.reload(store)
    assert predictor.model_version == 1
    assert store.save(model) == 3  # predictor train: no token
    assert store.save(model, fence_token=8) == 4
    assert store.versions() == [1, 3, 4]
    assert store.highest_fence_token() == 8
    assert store.prune(2) == [1, 2]
    assert store.versions() == [3, 4]
