"""Ordinary permissions for files written atomically, and folders made for a write undone when it fails.

``tempfile.mkstemp`` and ``mkdtemp`` create their file or folder private (0600 / 0700), and a rename
into place keeps that mode: traces written by ``trace synth``/``trace import`` and model versions in
a store that replicas under other users read came out readable by their writer alone. Writers set
what ``open``/``mkdir`` would have given instead: 0666 / 0777 less the process umask. A file that
replaces an existing one keeps that file's permission bits, as ``open(path, "w")`` would: a report
or trace its owner had made private (0600) or group-readable (0640) came back as the umask allows.

A writer creates the missing folders above its target; when the write then fails (a name the file
system refuses, a full disk) a command that refused its input must leave nothing behind, so the
folders it made are removed again (``make_folders`` / ``remove_folders``).

A temporary file beside a target is named from the target's name (``temporary_prefix``), cut short in
bytes: the file system's limit is 255 bytes, and a name as long as it takes leaves no room for more.
"""

from __future__ import annotations

import os
import stat
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


def make_ordinary(path: Path, replacing: Path | None = None) -> None:
    """Give ``path`` (a file, or a folder and the files in it) the mode ``open``/``mkdir`` would:
    an existing file ``replacing``'s permission bits (not its owner), else the umask's default."""
    mask = _umask()
    if path.is_dir():
        path.chmod(0o777 & ~mask)
        for child in path.iterdir():
            if child.is_file():
                child.chmod(0o666 & ~mask)
        return
    kept = _file_mode(replacing) if replacing is not None else None
    path.chmod(0o666 & ~mask if kept is None else kept)


def _file_mode(path: Path) -> int | None:
    """The permission bits of the file at ``path`` (through a link, as ``open`` goes); None when
    there is no file there to keep them from."""
    try:
        status = path.stat()
    except OSError:
        return None
    return stat.S_IMODE(status.st_mode) & 0o777 if stat.S_ISREG(status.st_mode) else None


def make_folders(folder: Path) -> list[Path]:
    """Create ``folder`` and the missing folders above it; those this call created, outermost first,
    for ``remove_folders`` to undo should the write they were made for fail. A failure here removes
    what it had created before raising."""
    missing = []
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    made: list[Path] = []
    try:
        for each in reversed(missing):
            each.mkdir()
            made.append(each)
    except BaseException:
        remove_folders(made)
        raise
    return made


def remove_folders(made: list[Path]) -> None:
    """Remove folders ``make_folders`` created, innermost first; one something else has written
    into meanwhile is kept, with the folders above it."""
    for folder in reversed(made):
        try:
            folder.rmdir()
        except OSError:
            return


def temporary_prefix(path: Path) -> str:
    """The ``mkstemp`` prefix for a temporary file beside ``path``: a dot and the first 64 bytes of its
    name, so the temporary name fits wherever the target's does. Cut in characters, a name of 63
    four-byte characters (252 bytes, legal) gave a prefix of 254 bytes and a temporary name past 255."""
    name = path.name.encode("utf-8", "surrogateescape")[:64].decode("utf-8", "ignore")
    return f".{name}."
