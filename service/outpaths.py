"""Output paths a command will write, checked before the command's work rather than after it.

Why a shared check: ``replay --plot``, ``trace synth|import --out`` and ``predictor train --out``
each write only at the end, after seconds to minutes of work; a path under a file failed there with
the OS's words (``[Errno 17] File exists: 'afile'``), naming neither the flag nor the path given.
Missing folders are fine: the writers create them.
"""

from __future__ import annotations

import os
from pathlib import Path

from scheduler.errors import InvalidInputError


def check_file_path(option: str, path: Path) -> None:
    """Refuse ``path`` as a file to write: a folder, a file this process may not overwrite, or one
    under a file or a folder it may not write to; ``InvalidInputError`` naming ``option``."""
    if path.is_dir() or not _creatable_under(path):
        raise InvalidInputError(option, str(path), "cannot be written here")
    if path.exists() and not os.access(path, os.W_OK):
        raise InvalidInputError(option, str(path), "exists and cannot be overwritten")


def check_folder_path(option: str, path: Path) -> None:
    """Refuse ``path`` as a folder to write into: a file, or a path under a file or a folder this
    process may not write to; ``InvalidInputError`` naming ``option``."""
    if path.exists() and not path.is_dir():
        raise InvalidInputError(option, str(path), "exists and is not a folder")
    if path.is_dir() and not os.access(path, os.W_OK):
        raise InvalidInputError(option, str(path), "is a folder this process may not write to")
    if not path.exists() and not _creatable_under(path):
        raise InvalidInputError(option, str(path), "cannot be created here")


def _creatable_under(path: Path) -> bool:
    """Whether the nearest existing folder above ``path`` is a folder this process may write to."""
    existing = path.parent
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    return existing.is_dir() and os.access(existing, os.W_OK)
