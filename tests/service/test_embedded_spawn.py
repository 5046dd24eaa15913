"""A server that cannot be started (its binary gone, not executable) fails its owner's start with
``Popen``'s own error, raised in the owner's thread though ``Popen`` ran on the spawn's, and is handed
to nobody (``embedded_spawn.spawn``)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from service.embedded_spawn import spawn


class _Held:
    """A holder of no server yet."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None


def test_a_server_binary_that_is_not_there_fails_the_start_with_its_own_error(tmp_path: Path) -> None:
    held = _Held()
    with pytest.raises(FileNotFoundError):
        spawn([str(tmp_path / "valkey-server")], held)
    assert held.proc is None


def test_a_server_binary_that_cannot_be_run_fails_the_start_with_its_own_error(tmp_path: Path) -> None:
    binary = tmp_path / "valkey-server"
    binary.write_text("not a program")
    binary.chmod(0o644)
    held = _Held()
    with pytest.raises(PermissionError):
        spawn([str(binary)], held)
    assert held.proc is None
