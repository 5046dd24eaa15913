"""A versioned model store on disk that a running service can hot-reload from.

Layout: ``ROOT/v000001/{p50.txt, p90.txt, metadata.json}``, one directory per version, numbered up.
A version is written in full under a temporary name in ROOT and then renamed into place: rename is
atomic on POSIX, so a reader sees either no version N or all of it, and two writers racing for the
same number cannot both win (the loser retries with the next number). Latest = highest complete
version. LightGBM's own text format holds the boosters; metadata.json the rest (features, training
rows, steps covered, metrics, calibration shift, whether the trace was synthetic) and each booster
file's SHA-256 (``store_files.py``: those files, written, read back and checked; this module, the
numbered versions).

The checksums are checked before LightGBM parses a file: a truncated booster file makes LightGBM
abort the process (C++ ``terminate``), which no ``except`` catches, so a damaged version would kill
every replica that loads it. Files are fsynced before the rename, so a crash leaves no such version.
Numbers are never reused (``.last-version`` keeps the highest handed out), and a version's checksums
are its ``stamp``: a replica notices a version removed for a rollback, or replaced under its number.
A version a retrain stored carries its lock's fencing token; one stored after a version of a higher
token (its lock lapsed before it was renewed in) is superseded: listed by no reader (``_superseded``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

from predictors.featurenames import refused
from predictors.features import FeatureSpec
from predictors.fsmode import make_folders, make_ordinary, remove_folders
from predictors.model import FittedModel
from predictors.store_files import (
    BOOSTERS,
    FILES,
    check_files,
    check_fits,
    fsync,
    metadata_from_json,
    metadata_json,
    sha256,
    write_boosters,
)
from predictors.store_sweep import PREFIX as STAGING
from predictors.store_sweep import sweep_stale, sweep_stale_marks
from scheduler.errors import InvalidInputError

_VERSION_DIR = re.compile(r"^v(\d{6,})$")
_LAST = ".last-version"  # the highest number handed out, so a removed version's number is not reused


class RetiredFeaturesError(InvalidInputError):
    """The version was fitted on extra features of a name no request may send any more
    (``predictors.featurenames.refused``): a release before round 61 trained on the actuals that
    carried them. Its predictions read each as missing, and one such feature was the very length
    they predict (``completion_tokens``), so it is not used; the next retrain stores one without them.
    ``names`` are those features. Not damage: nothing to remove or re-copy (``service.learning.models``)."""

    def __init__(self, field: str, value: str, names: list[str]) -> None:
        self.names = names
        super().__init__(
            field,
            value,
            f"fitted on features a request can no longer send ({', '.join(map(repr, names))}: named as "
            "trace columns or by another tool's name for one); not used until a retrain replaces it",
        )

    def __reduce__(self) -> tuple[type[InvalidInputError], tuple[object, ...]]:
        """Pickle by the constructor's arguments (see ``InvalidInputError.__reduce__``)."""
        return type(self), (self.field, self.value, self.names)


class VersionGoneError(InvalidInputError):
    """The version asked for is not in the store (none stored, or one removed after a listing named
    it: a rollback, a prune, a fenced fit taken back): a version absent, not one that fails to load,
    which a reload passes over unreported (``LengthPredictor.reload``; review51a)."""


class ModelStore:
    """Numbered, immutable model versions under one directory. One store serves all of an app's
    threads, with no lock of its own: see ``_fences``, its only state besides the folder."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        # version -> (identity, token): each token read once while its file stays (``fence_token``).
        # No lock, though an app's threads share it: the follower's reload tick and a request's
        # (under the swap lock), and outside that lock a retrain's prune, ``GET /models``' listing
        # and the retrain lock's token read. Each access is one dict operation or one assignment; no
        # thread deletes from the dict, a listing replaces it whole and walks the folders, not it.
        # So a race only drops an entry (a listing's new dict replacing the one another thread just
        # added to), paid by one more read of a small file, and no entry is ever wrong: one is used
        # only while the file's identity, taken before its token was read, is still the file's, so
        # one written late by a thread that read an older file is passed over and read again
        # (tests/predictors/test_store_fence_reads.py). A lock would buy back only those re-reads.
        self._fences: dict[int, tuple[tuple[int, ...], int | None]] = {}

    def versions(self) -> list[int]:
        """Complete versions present, ascending; none while the store's folder is not made yet.

        A store that cannot be listed raises its ``OSError``, a path that names no folder too (the
        volume it was on replaced by a file): read as "no versions", it made every replica drop the
        model it served for the fallbacks, as if an operator had withdrawn every version."""
        return self._listed()[0]

    def _listed(self) -> tuple[list[int], list[int]]:
        """(complete versions, superseded ones), each ascending; see ``_superseded``."""
        try:
            entries = list(self.root.iterdir())
        except FileNotFoundError:
            return [], []
        found = []
        for entry in entries:
            match = _VERSION_DIR.match(entry.name)
            if match and all((entry / f).is_file() for f in FILES):
                found.append(int(match.group(1)))
        fences = {version: self.fence_token(version) for version in found}
        kept = self._fences  # the versions gone forgotten
        self._fences = {version: kept[version] for version in found if version in kept}
        superseded = _superseded(sorted(found), fences)
        return [v for v in sorted(found) if v not in superseded], sorted(superseded)

    def fence_token(self, version: int) -> int | None:
        """The fencing token ``version`` was saved with (its retrain lock's, ``service.learning.retrain``);
        None when saved without one (``predictor train``) or unreadable. Read once while its
        ``metadata.json`` is the same file (``identity``): each listing, a reload's at every tick, had
        read every version's, one passed over for good (``RetiredFeaturesError``) too (edges63)."""
        seen = self.identity(version)  # before the read: a file replaced meanwhile is read again
        known = self._fences.get(version)
        if seen is not None and known is not None and known[0] == seen:
            return known[1]
        try:
            token = json.loads((self.path(version) / "metadata.json").read_text()).get("fence_token")
        except (OSError, ValueError, AttributeError):
            token = None
        token = token if isinstance(token, int) and not isinstance(token, bool) else None
        if seen is not None:
            self._fences[version] = (seen, token)
        return token

    def highest_fence_token(self) -> int:
        """The highest fencing token of a version present, superseded ones included; 0 with none."""
        listed, superseded = self._listed()
        return max((t for v in listed + superseded if (t := self.fence_token(v)) is not None), default=0)

    def latest_version(self) -> int | None:
        """The highest complete version, None when the store is empty."""
        versions = self.versions()
        return versions[-1] if versions else None

    def path(self, version: int) -> Path:
        """Directory of one version."""
        return self.root / f"v{version:06d}"

    def save(self, model: FittedModel, fence_token: int | None = None) -> int:
        """Write a new version atomically and return its number; ``fence_token``, where given, is
        that of the lock the model was fitted under (``versions`` passes over a version whose token
        is below an earlier number's).

        The folders made for the store are removed again when the save fails (a root name longer
        than the file system takes, a full disk): a refused ``predictor train`` leaves nothing."""
        made = make_folders(self.root)
        try:
            return self._save_staged(model, fence_token)
        except BaseException:
            remove_folders(made)
            raise

    def _save_staged(self, model: FittedModel, fence_token: int | None) -> int:
        """Write the version under a temporary name in the store, then publish it under a number;
        first, sweep those a save that died mid-write left (``store_sweep``: never a live save's)."""
        sweep_stale(self.root)
        sweep_stale_marks(self.root)
        staging = Path(tempfile.mkdtemp(dir=self.root, prefix=STAGING))
        try:
            write_boosters(model, staging)
            meta = {**metadata_json(model), "checksums": {f: sha256(staging / f) for f in BOOSTERS}}
            if fence_token is not None:
                meta["fence_token"] = fence_token
            (staging / "metadata.json").write_text(json.dumps(meta, indent=2))
            make_ordinary(staging)  # replicas under other users read the store
            fsync(staging, *(staging / f for f in FILES))
            return self._publish(staging)
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def prune(self, keep: int) -> list[int]:
        """Remove all but the newest ``keep`` complete versions; return the numbers removed.

        A service retraining every few steps would otherwise fill its volume (~280 KB a version) and
        slow every reload's listing. Half-written folders are left alone (a writer may own them: the
        next save sweeps those a dead writer left, ``store_sweep``); numbers are not reused after
        pruning (``.last-version``)."""
        if keep < 1:
            raise InvalidInputError("keep", keep, "must be at least 1")
        listed, superseded = self._listed()
        doomed = sorted(listed[:-keep] + superseded)
        for version in doomed:
            self.discard(version)
        return doomed

    def discard(self, version: int) -> None:
        """Remove one version (its number is not reused): a fit that finds, once stored, that its
        lock lapsed takes its version back (``service.learning.models``)."""
        shutil.rmtree(self.path(version), ignore_errors=True)

    def stamp(self, version: int) -> str:
        """What tells two versions stored under one number apart: the booster files' checksums."""
        try:
            raw = json.loads((self.path(version) / "metadata.json").read_text())
            return json.dumps(raw.get("checksums", {}), sort_keys=True)
        except (OSError, ValueError, AttributeError):
            return ""

    def identity(self, version: int) -> tuple[int, ...] | None:
        """What tells ``version``'s ``metadata.json`` from a file put in its place since, without
        reading it (a stat: inode, size, modified and changed times); None where it cannot be stat'ed.
        A stored version is never rewritten; a folder copied or renamed in under its number is a new
        file. A reload passes over a version it found unusable while this stays the same."""
        try:
            stat = (self.path(version) / "metadata.json").stat()
        except OSError:
            return None
        return (stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)

    def _publish(self, staging: Path) -> int:
        for _ in range(100):
            version = self._highest_number() + 1
            try:
                os.rename(staging, self.path(version))
            except OSError:
                if not self.path(version).exists():
                    raise
                continue
            fsync(self.root)
            self._remember(version)
            return version
        raise RuntimeError(f"could not claim a version number in {self.root}")

    def _remember(self, version: int) -> None:
        """Raise ``.last-version`` to ``version`` (never lower it: writers race), replaced atomically.

        Best effort: the version is already in place, and the folder names still count. A staged
        file that could not be put in place is removed, or every failed save left one in the store."""
        staged = self.root / f".last-version.{os.getpid()}.{version}"
        try:
            staged.write_text(str(max(version, self._highest_number())))
            os.replace(staged, self.root / _LAST)
        except BaseException as exc:  # an interrupt too: it leaves no staged file either
            with contextlib.suppress(OSError):
                staged.unlink(missing_ok=True)
            if not isinstance(exc, OSError):
                raise

    def _highest_number(self) -> int:
        """Past every version folder, complete or not, and every number handed out before."""
        names = (_VERSION_DIR.match(entry.name) for entry in self.root.iterdir())
        numbers = [int(match.group(1)) for match in names if match]
        with contextlib.suppress(OSError, ValueError):  # absent, or cut short by a crash
            numbers.append(int((self.root / _LAST).read_text()))
        return max(numbers, default=0)

    def load(self, version: int | None = None) -> tuple[int, FittedModel]:
        """(version, model): the given version, or the latest; a typed error if there is none."""
        import lightgbm as lgb

        try:
            present = self.versions()
        except OSError as error:  # the folder cannot be listed (a lost network volume)
            raise InvalidInputError("model_store", str(self.root), f"cannot be listed ({error})") from None
        chosen = (present[-1] if present else None) if version is None else version
        if chosen is None or chosen not in present:
            missing = f"has no model version {chosen or ''}".strip()
            raise VersionGoneError("model_store", str(self.root), missing)
        directory = self.path(chosen)
        try:
            raw = json.loads((directory / "metadata.json").read_text())
            meta = metadata_from_json(raw)
            spec = FeatureSpec(numeric=tuple(raw["numeric"]), categorical=meta.categorical)
            _check_features(spec, directory)  # before the boosters are read: a reload meets it each tick
            check_files(directory, raw.get("checksums"))
            p50 = lgb.Booster(model_file=str(directory / "p50.txt"))
            p90 = lgb.Booster(model_file=str(directory / "p90.txt"))
            check_fits(meta, spec, p50, p90)
        except RetiredFeaturesError:
            raise
        # AttributeError: metadata of another shape (a list where a mapping belongs), which must be
        # passed over like any damaged version, not fail every replica's reload
        except (OSError, ValueError, KeyError, TypeError, AttributeError, lgb.basic.LightGBMError) as error:
            raise InvalidInputError("model_store", str(directory), f"does not load ({error})") from None
        return chosen, FittedModel(p50=p50, p90=p90, spec=spec, metadata=meta)


def _superseded(versions: list[int], fences: dict[int, int | None]) -> set[int]:
    """The versions (ascending) whose fencing token is below that of an earlier-numbered version.

    A token is handed out as a retrain takes its lock, so tokens rise in lock order, and numbers
    rise in the order versions were renamed into place. A fit checks its lock just before the
    rename, but the two are not one step: a fit paused between them (a GC pause, a slow volume)
    while its lock lapsed and another replica fitted newer actuals and stored them renames its
    stale model in last, under the higher number. Its lower token gives it away, to every reader
    alike, whenever it lands: that is the check made atomic with the rename. A version without a
    token (``predictor train``) neither is passed over nor passes over others."""
    highest: int | None = None
    superseded = set()
    for version in versions:
        token = fences[version]
        if token is None:
            continue
        if highest is not None and token < highest:
            superseded.add(version)
        else:
            highest = token
    return superseded


def _check_features(spec: FeatureSpec, directory: Path) -> None:
    """``RetiredFeaturesError`` where the version's extra features include a name now refused."""
    names = [name for name in (*spec.numeric, *spec.categorical) if refused(name)]
    if names:
        raise RetiredFeaturesError("model_store", str(directory), names)
