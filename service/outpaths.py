"""Output paths a command will write, checked before the command's work rather than after it.

Why a shared check: ``replay --plot``, ``trace synth|import --out`` and ``predictor train --out``
each write only at the end, after seconds to minutes of work; a path under a file failed there with
the OS's words (``[Errno 17] File exists: 'afile'``), naming neither the flag nor the path given.
Missing folders are fine: the writers create them. An output's suffix is checked too
(``check_suffix``): ``replay --plot g.txt`` wrote a PNG into g.txt, after the whole replay.

Whether a folder takes new files is asked of the folder itself, by making and removing an empty
file in it: ``os.access`` answers yes to root for a read-only mount or ``/proc``, where the write
failed only after the whole replay. A check still cannot see everything (a name longer than the
file system takes, a full disk), so ``write_all`` writes a command's outputs all or none: a second
output that fails while written no longer leaves the first one, or the folders made for either,
behind.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from predictors.fsmode import make_folders, make_ordinary, remove_folders, temporary_prefix
from scheduler.errors import InvalidInputError


def check_file_path(option: str, path: Path) -> None:
    """Refuse ``path`` as a file to write: a folder, a file this process may not overwrite, or one
    under a file or a folder it may not write to; ``InvalidInputError`` naming ``option``."""
    if path.is_dir():
        raise InvalidInputError(option, str(path), "is a directory")
    if not _creatable_under(path):
        raise InvalidInputError(option, str(path), "cannot be written here")
    if path.exists() and not os.access(path, os.W_OK):
        raise InvalidInputError(option, str(path), "exists and cannot be overwritten")


def check_folder_path(option: str, path: Path) -> None:
    """Refuse ``path`` as a folder to write into: a file, or a path under a file or a folder this
    process may not write to; ``InvalidInputError`` naming ``option``."""
    if path.exists() and not path.is_dir():
        raise InvalidInputError(option, str(path), "exists and is not a folder")
    if path.is_dir() and not _takes_files(path):
        raise InvalidInputError(option, str(path), "is a folder this process may not write to")
    if not path.exists() and not _creatable_under(path):
        raise InvalidInputError(option, str(path), "cannot be created here")


def check_suffix(option: str, path: Path, suffixes: Sequence[str], what: str) -> None:
    """Refuse ``path`` unless its last suffix is one of ``suffixes`` (any case): the file's content is
    one format (``what`` says which), and a name promising another misleads whoever opens it."""
    if path.suffix.lower() not in suffixes:
        raise InvalidInputError(option, str(path), f"must end in {' or '.join(suffixes)} ({what})")


def check_not_input(option: str, path: Path, source: Path, what: str) -> None:
    """Refuse ``path`` as an output when it is the file ``source`` the command reads (``what``):
    ``replay t.csv --plot t.csv`` replaced the trace with a PNG, ``trace import runs.csv --out
    runs.csv`` the user's file with the renamed trace."""
    if source.is_file() and path.exists() and os.path.samefile(source, path):
        raise InvalidInputError(option, str(path), f"is {what}; write it elsewhere")


def check_distinct(outputs: Sequence[tuple[str, Path | None]]) -> None:
    """Refuse two options naming one path: the second output would silently replace the first."""
    seen: dict[str, str] = {}
    for option, path in outputs:
        if path is None:
            continue
        key = os.path.abspath(path)
        if key in seen:
            raise InvalidInputError(option, str(path), f"is also --{seen[key]}'s path")
        seen[key] = option


def write_all(outputs: Sequence[tuple[str, Path, bytes]]) -> None:
    """Write each ``(option, path, data)``, all or none: each to a temporary file beside its target,
    then all renamed into place. On a failure the temporary files, the outputs already renamed and
    the folders made are removed, and ``InvalidInputError`` names the option and path that failed."""
    made: list[Path] = []
    staged: list[tuple[str, Path, Path]] = []  # option, temporary file, target
    renamed: list[Path] = []
    current = ("", "")  # the option and path being written, for the error
    try:
        for option, path, data in outputs:
            current = (option, str(path))
            made += make_folders(path.parent)
            staged.append((option, _write_beside(path, data), path))
        for option, tmp, path in staged:
            current = (option, str(path))
            os.replace(tmp, path)
            renamed.append(path)
    except BaseException as exc:  # an interrupt too: a half-done run leaves nothing either
        for _, tmp, _ in staged:
            tmp.unlink(missing_ok=True)
        for done in renamed:
            done.unlink(missing_ok=True)
        remove_folders(made)
        if isinstance(exc, OSError):
            raise InvalidInputError(*current, f"cannot be written: {exc.strerror or exc}") from None
        raise


def _write_beside(path: Path, data: bytes) -> Path:
    """``data`` in a new temporary file in ``path``'s folder (short-named: ``path``'s own name may
    be as long as the file system takes), with the mode ``open`` would have given it: an existing
    target's own, else the umask's default."""
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=temporary_prefix(path), suffix=".tmp")
    tmp = Path(name)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        make_ordinary(tmp, replacing=path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def _creatable_under(path: Path) -> bool:
    """Whether the nearest existing folder above ``path`` is a folder this process may write to."""
    existing = path.parent
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    return existing.is_dir() and _takes_files(existing)


def _takes_files(folder: Path) -> bool:
    """Whether a new file can be made in ``folder``: ``os.access`` first (cheap, and right for
    everyone but root), then an empty temporary file made and removed, which root needs."""
    if not os.access(folder, os.W_OK):
        return False
    try:
        fd, name = tempfile.mkstemp(dir=folder, prefix=".rollout-check-", suffix=".tmp")
    except OSError:
        return False
    os.close(fd)
    Path(name).unlink(missing_ok=True)
    return True
