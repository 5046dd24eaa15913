"""A stored model fitted on a feature no request may send any more is not used for prediction.

Round 61 made the actuals read drop features named as trace columns or by another tool's name for one
(``predictors.featurenames``), so a retrain no longer fits them; but a version a release before it
stored had been fitted on them (``completion_tokens``: the very length it predicts) and was still
loaded and served until the next retrain, reading each such feature as missing. Now the store refuses
to load it (``RetiredFeaturesError``, before its boosters are parsed), and a reload passes over it as
it passes over a damaged version: an older version that loads serves, else the fallbacks.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from predictors.history import History
from predictors.model import FittedModel
from predictors.predictor import SOURCES, LengthPredictor
from predictors.queries import NO_CAP, QueryBatch
from predictors.store import ModelStore, RetiredFeaturesError
from predictors.tracetable import Trace
from scheduler.errors import InvalidInputError
from tests.predictors.helpers import drifting_trace, fitted_with

TRACE = drifting_trace(steps=3)  # fitted_with's


@pytest.fixture(scope="module")
def retired() -> FittedModel:
    return fitted_with(numeric=("completion_tokens", "x"), categorical=("max_tokens",))


@pytest.fixture(scope="module")
def plain() -> FittedModel:
    return fitted_with(numeric=("x", "Output_Tokens"))  # another case of a column's name stays a feature


def _queries(trace: Trace) -> QueryBatch:
    return QueryBatch.from_trace(trace.take(trace.step == 2), NO_CAP)


def test_a_version_fitted_on_a_refused_feature_is_refused_naming_them(
    tmp_path: Path, retired: FittedModel
) -> None:
    store = ModelStore(tmp_path)
    version = store.save(retired)
    with pytest.raises(RetiredFeaturesError) as caught:
        store.load(version)
    assert caught.value.names == ["completion_tokens", "max_tokens"]
    assert caught.value.value == str(store.path(version))
    assert "a request can no longer send ('completion_tokens', 'max_tokens'" in str(caught.value)
    assert "not used until a retrain replaces it" in str(caught.value)


def test_it_is_refused_before_its_boosters_are_read(tmp_path: Path, retired: FittedModel) -> None:
    store = ModelStore(tmp_path)
    version = store.save(retired)
    (store.path(version) / "p50.txt").write_text("garbage")  # would be "does not load (checksum...)"
    with pytest.raises(RetiredFeaturesError):
        store.load(version)


def test_a_version_whose_features_are_all_allowed_loads(tmp_path: Path, plain: FittedModel) -> None:
    store = ModelStore(tmp_path)
    store.save(plain)
    assert store.load()[1].spec.numeric == ("x", "Output_Tokens")


def test_a_reload_passes_over_it_to_an_older_version_that_loads(
    tmp_path: Path, plain: FittedModel, retired: FittedModel
) -> None:
    store = ModelStore(tmp_path)
    store.save(plain)
    store.save(retired)  # v2, the newest, stored by the release before
    told: list[InvalidInputError] = []
    predictor = LengthPredictor(History(TRACE.take(TRACE.step < 2)))
    assert predictor.reload(store, told.append)
    assert predictor.model_version == 1
    assert [type(error) for error in told] == [RetiredFeaturesError]
    assert set(predictor.predict(_queries(TRACE), 2).source) == {"lightgbm"}


def test_with_only_such_versions_the_fallbacks_predict_until_a_retrain_stores_one(
    tmp_path: Path, retired: FittedModel, plain: FittedModel
) -> None:
    store = ModelStore(tmp_path)
    store.save(retired)
    store.save(retired)
    told: list[InvalidInputError] = []
    predictor = LengthPredictor(History(TRACE.take(TRACE.step < 2)))
    assert not predictor.reload(store, told.append)
    assert predictor.model is None
    assert len(told) == 2
    answered = predictor.predict(_queries(TRACE), 2)
    assert answered.model_version is None
    assert "lightgbm" not in answered.source
    assert set(answered.source) <= set(SOURCES)
    assert store.save(plain) == 3  # the next retrain's
    assert predictor.reload(store, told.append)
    assert predictor.model_version == 3
    assert len(told) == 2  # the newest loads: the older ones are not read again


def test_the_refusal_crosses_a_process_boundary_with_its_names(tmp_path: Path, retired: FittedModel) -> None:
    # the replay's worker processes send errors back pickled (``InvalidInputError.__reduce__``): the
    # names and the reason must arrive as they were raised (mutation testing, helper mutants63)
    store = ModelStore(tmp_path)
    version = store.save(retired)
    with pytest.raises(RetiredFeaturesError) as caught:
        store.load(version)
    back = pickle.loads(pickle.dumps(caught.value))
    assert type(back) is RetiredFeaturesError
    assert (back.field, back.value, back.names) == ("model_store", caught.value.value, caught.value.names)
    assert str(back) == str(caught.value)
