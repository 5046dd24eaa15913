"""Staging folders a save left in the model store when its process died mid-write, swept at the next save.

Why. A version is written under ``.staging-*`` in the store, then renamed into place
(``ModelStore._save_staged``), whose ``finally`` removes the folder when the save fails. A process
that ends while a save runs leaves the folder for good: the retrain's fit and save run on a daemon
thread, which the interpreter's exit stops with no ``finally`` run (exit51), and a SIGKILL, an OOM
kill or a lost node run none either. Each is a version's size (~280 KB) that no prune removed
(``prune`` leaves half-written folders alone: a writer may own them), and every listing reads past it.
``.last-version``'s staged files (``ModelStore._remember``: written, then replaced into place) are
left the same way by an end between the two, and go by the same rule (``sweep_stale_marks``).

When. At the next save, on whichever replica: a writer is writing anyway, where the store's start or a
reader (``GET /models``, ``predictor`` commands, a read-only mount) must not. A folder goes once
nothing in it was written for ``STALE_S``: a save writes its three files and renames the folder in
well under a second (seconds on a slow network volume), and each file it writes moves the folder's
newest time on; an hour also covers any clock skew between a replica's host and the volume's server
that leaves a fleet working. So no live save's folder is taken, on this replica or another sharing
the store.

How. A stale folder is first renamed to a name of the sweep's own, atomically, and removed under
that name: of its writer's rename into place (a writer paused past ``STALE_S``) and the sweep's, one
wins, so the sweep never removes the files of a version being published, and a writer whose folder
was taken fails its save (``FileNotFoundError``), publishing nothing. The new name is a staging
name too, and keeps the folder's times, so a sweep cut short is finished by the next. Best effort:
the save goes on whatever the sweep meets (another user's folder it may not remove, a volume's
hiccup).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
import uuid
from pathlib import Path

PREFIX = ".staging-"  # ``ModelStore._save_staged``'s folders, and the sweep's own names for them
MARK_PREFIX = ".last-version."  # ``ModelStore._remember``'s staged files (``.last-version`` is not one)
STALE_S = 3600.0  # untouched this long, a staging folder's writer is gone (module doc: why an hour)


def sweep_stale(root: Path, now: float | None = None) -> list[str]:
    """Remove the staging folders in ``root`` untouched for ``STALE_S`` (at ``now``, the wall clock's
    by default); the names removed."""
    now = time.time() if now is None else now
    swept = []
    for folder in _staging(root):
        newest = _newest_write(folder)
        if newest is None or now - newest < STALE_S:
            continue
        taken = root / f"{PREFIX}swept-{uuid.uuid4().hex}"
        try:
            os.rename(folder, taken)  # its writer's rename into place and this one: one wins
        except OSError:  # published or swept meanwhile, or not ours to move
            continue
        shutil.rmtree(taken, ignore_errors=True)
        swept.append(folder.name)
    return swept


def sweep_stale_marks(root: Path, now: float | None = None) -> list[str]:
    """Remove the staged ``.last-version.<pid>.<n>`` files (``ModelStore._remember``) untouched for
    ``STALE_S``: one is replaced into place within a moment of its write, so one that old was left
    by a process that ended between the two; the names removed. Its writer, were it alive, only
    fails a best-effort write (the version folders' names still count)."""
    now = time.time() if now is None else now
    swept = []
    with contextlib.suppress(OSError):
        for entry in root.iterdir():
            newest = _newest_write(entry) if entry.name.startswith(MARK_PREFIX) else None
            if newest is not None and now - newest >= STALE_S:
                with contextlib.suppress(OSError):
                    entry.unlink()
                    swept.append(entry.name)
    return swept


def _staging(root: Path) -> list[Path]:
    """The staging folders in ``root`` now; none where it cannot be listed."""
    try:
        return [entry for entry in root.iterdir() if entry.name.startswith(PREFIX) and entry.is_dir()]
    except OSError:
        return []


def _newest_write(path: Path) -> float | None:
    """The newest modification time of ``path`` and, a folder, the files in it; None where it is gone."""
    with contextlib.suppress(OSError):
        inside = path.iterdir() if path.is_dir() else ()
        return max([path.lstat().st_mtime, *(entry.lstat().st_mtime for entry in inside)])
    return None
