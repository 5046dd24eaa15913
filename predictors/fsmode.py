"""Ordinary permissions for files written atomically.

``tempfile.mkstemp`` and ``mkdtemp`` create their file or folder private (0600 / 0700), and a rename
into place keeps that mode: traces written by ``trace synth``/``trace import`` and model versions in
a store that replicas under other users read came out readable by their writer alone. Writers set
what ``open``/``mkdir`` would have given instead: 0666 / 0777 less the process umask.
"""

from __future__ import annotations

import os
from pathlib import Path


def _umask() -> int:
    """The process umask, read without changing it where Linux says it (``os.umask`` sets it)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def make_ordinary(path: Path) -> None:
    """Give ``path`` (a file, or a folder and the files in it) the mode ``open``/``mkdir`` would."""
    mask = _umask()
    if path.is_dir():
        path.chmod(0o777 & ~mask)
        for child in path.iterdir():
            if child.is_file():
                child.chmod(0o666 & ~mask)
    else:
        path.chmod(0o666 & ~mask)
