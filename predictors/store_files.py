"""What one stored model version's files hold, and the checks each passes before LightGBM parses it.

A version is two LightGBM booster files (``p50.txt``, ``p90.txt``) and ``metadata.json``: the
features, training rows, steps, metrics, calibration shift, the boosters' SHA-256 and, where a retrain
stored it, its lock's fencing token. Writing them, reading the metadata back and checking that the
three agree (``check_files``: the files are the ones saved; ``check_fits``: metadata, boosters and the
features this code builds match) are pure functions of the files, apart from ``ModelStore``'s own
question (``store.py``): which numbered versions exist, which is latest, which a higher fencing token
supersedes, and how a new one is published atomically under a number never reused. They lived in
``store.py`` until it neared the 400-line limit (helper split64).
"""

from __future__ import annotations

import hashlib
import math
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from predictors.features import FeatureSpec
from predictors.model import FittedModel, ModelMetadata

BOOSTERS = ("p50.txt", "p90.txt")
FILES = (*BOOSTERS, "metadata.json")


def write_boosters(model: FittedModel, staging: Path) -> None:
    """Both booster files; an ``OSError`` when one cannot be written (a full disk), as for any file.

    LightGBM reports a failed write as its own ``LightGBMError``, which callers that handle a
    store's I/O errors (``predictor train``) did not expect: a full volume was a traceback."""
    import lightgbm as lgb

    for name, booster in zip(BOOSTERS, (model.p50, model.p90), strict=True):
        try:
            booster.save_model(str(staging / name))
        except lgb.basic.LightGBMError as error:
            raise OSError(f"could not write {staging / name}: {error}") from None


def check_files(directory: Path, checksums: Any) -> None:
    """``ValueError`` unless each booster file is the one saved (before LightGBM parses it).

    Versions saved before checksums were written have none and are trusted as they are."""
    if checksums is None:
        return
    for name in BOOSTERS:
        if sha256(directory / name) != checksums[name]:
            raise ValueError(f"{name} is not the file that was saved (checksum differs: truncated?)")


def check_fits(meta: ModelMetadata, spec: FeatureSpec, *boosters: Any) -> None:
    """``ValueError`` where metadata, boosters and the features this code builds disagree, which would
    fail every prediction later (or, with as many columns, feed the boosters the wrong ones)."""
    if meta.features != spec.names:
        raise ValueError(
            f"its features {list(meta.features)} are not the ones this version builds {list(spec.names)}"
            " (a model of another feature set)"
        )
    for booster in boosters:
        takes, named = booster.num_feature(), len(meta.features)
        if takes != named:
            raise ValueError(f"a booster takes {takes} features, metadata names {named}")
    if not math.isfinite(meta.p90_shift):
        raise ValueError(f"p90_shift {meta.p90_shift} is not finite")


def sha256(path: Path) -> str:
    """The hex SHA-256 of one file: a booster's checksum, kept in ``metadata.json``."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fsync(*paths: Path) -> None:
    """Flush files (and folders, for the names in them) to disk, so a crash leaves no half version."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def metadata_json(model: FittedModel) -> dict[str, Any]:
    """``metadata.json``'s fields of ``model`` (its metadata and numeric features), less the checksums."""
    out = asdict(model.metadata)
    out["numeric"] = list(model.spec.numeric)
    return out


def metadata_from_json(raw: dict[str, Any]) -> ModelMetadata:
    """The metadata a stored ``metadata.json`` holds; fields later versions added default where absent."""
    return ModelMetadata(
        features=tuple(raw["features"]),
        categorical={k: tuple(v) for k, v in raw["categorical"].items()},
        training_rows=int(raw["training_rows"]),
        examples=int(raw["examples"]),
        steps=tuple(int(s) for s in raw["steps"]),
        p90_shift=float(raw["p90_shift"]),
        config=dict(raw["config"]),
        fit_seconds=float(raw["fit_seconds"]),
        metrics={k: float(v) for k, v in raw["metrics"].items()},
        synthetic=raw.get("synthetic", False) is True,  # versions saved before the label have none
        longest_gap=None if raw.get("longest_gap") is None else int(raw["longest_gap"]),  # likewise
    )
