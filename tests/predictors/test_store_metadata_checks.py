"""A stored version whose ``metadata.json`` disagrees with its boosters is refused before it serves.

``store_files.check_files`` and ``check_fits`` exist so that a damaged or hand-edited version is
passed over ("does not load") rather than failing every prediction later or feeding the boosters the
wrong columns. Each case here is one field of a saved version's metadata made wrong in a way the
store's other tests leave open (mutation testing of round 64's split, helper mutants65): checksums
that name no booster, a feature dropped from the metadata alone (the boosters take one more), a
calibration shift that is infinite; and a ``synthetic`` label that is not JSON ``true`` reads as not
synthetic, so a stray string does not mark a recorded run's model as the generator's.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from predictors.model import FittedModel
from predictors.store import ModelStore
from scheduler.errors import InvalidInputError
from tests.predictors.helpers import fitted_with

Edit = Callable[[dict[str, Any]], None]


@pytest.fixture(scope="module")
def model() -> FittedModel:
    """A model with one extra numeric feature (``temp``), fitted once for the module."""
    return fitted_with(numeric=("temp",))


def _saved(tmp_path: Path, model: FittedModel, edit: Edit) -> ModelStore:
    store = ModelStore(tmp_path / "models")
    version = store.save(model)
    path = store.path(version) / "metadata.json"
    raw = json.loads(path.read_text())
    edit(raw)
    path.write_text(json.dumps(raw))
    return store


def _no_checksums(raw: dict[str, Any]) -> None:
    raw["checksums"] = {}


def _temp_dropped(raw: dict[str, Any]) -> None:
    raw["numeric"] = [n for n in raw["numeric"] if n != "temp"]
    raw["features"] = [n for n in raw["features"] if n != "temp"]


def _infinite_shift(raw: dict[str, Any]) -> None:
    raw["p90_shift"] = float("inf")


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        (_no_checksums, "p50.txt"),
        (_temp_dropped, "a booster takes"),
        (_infinite_shift, "is not finite"),
    ],
    ids=["checksums-name-no-booster", "feature-dropped-from-metadata-only", "infinite-p90-shift"],
)
def test_a_version_whose_metadata_disagrees_with_its_boosters_does_not_load(
    tmp_path: Path, model: FittedModel, edit: Edit, said: str
) -> None:
    store = _saved(tmp_path, model, edit)
    with pytest.raises(InvalidInputError, match="does not load") as raised:
        store.load()
    assert said in str(raised.value)


@pytest.mark.parametrize(
    ("label", "synthetic"), [(True, True), ("false", False), ("true", False), (1, False)]
)
def test_only_json_true_marks_a_stored_version_synthetic(
    tmp_path: Path, model: FittedModel, label: object, synthetic: bool
) -> None:
    def labelled(raw: dict[str, Any]) -> None:
        raw["synthetic"] = label

    assert _saved(tmp_path, model, labelled).load()[1].metadata.synthetic is synthetic
