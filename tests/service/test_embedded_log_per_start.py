"""A server's start is judged by the lines it wrote itself, not by its log's earlier starts.

A ``data_dir``'s log (``valkey.log``) is kept across starts, each appending, so that whoever reads it
sees why an earlier one ended. Its whole text was searched for ``Address already in use``: an earlier
start's taken port named a later start's unrelated failure (a bad argument) a taken port, and on a
port picked at start it was tried ``PORT_TRIES`` times over.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from service.embedded import EmbeddedServer, EmbeddedServerError, PortTakenError

TAKEN = "Address already in use"
BAD = "Bad directive or wrong number of arguments"


def _start_error(server: EmbeddedServer) -> EmbeddedServerError:
    """``server``'s failed start's error, the server stopped after it."""
    try:
        with pytest.raises(EmbeddedServerError) as failed:
            server.start()
    finally:
        server.stop()
    return failed.value


def test_an_earlier_starts_taken_port_does_not_name_a_later_starts_bad_argument(tmp_path: Path) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        earlier = _start_error(EmbeddedServer(port=held.getsockname()[1], data_dir=tmp_path))
    assert isinstance(earlier, PortTakenError), earlier

    later = _start_error(EmbeddedServer(data_dir=tmp_path, extra_args=("--no-such-directive", "1")))

    assert type(later) is EmbeddedServerError, later  # not a taken port
    assert BAD in str(later), later
    assert TAKEN not in str(later), later
    log = (tmp_path / "valkey.log").read_text()
    assert log.count(BAD) == 1  # tried once: a port picked again would not help it
    assert TAKEN in log  # the earlier start's lines are kept for whoever reads the log


def _silent_binary(tmp_path: Path, lines: str) -> str:
    """A server binary (a wrapper script, as ``not_a_program`` lets run) that ends at once, status 1,
    after running ``lines`` with its stderr on the log."""
    binary = tmp_path / "bin" / "valkey-server"
    binary.parent.mkdir()
    binary.write_text(f"#!/bin/sh\n{lines}exit 1\n")
    binary.chmod(0o755)
    return str(binary)


def test_a_start_that_wrote_nothing_is_said_without_an_earlier_starts_lines(tmp_path: Path) -> None:
    (tmp_path / "valkey.log").write_text(f"an earlier start: {TAKEN}\n")
    later = _start_error(EmbeddedServer(data_dir=tmp_path, binary=_silent_binary(tmp_path, "")))
    assert type(later) is EmbeddedServerError, later
    assert str(later) == "valkey-server exited at start (status 1): ", later


def test_a_log_cut_since_the_start_began_is_read_whole(tmp_path: Path) -> None:
    """The log emptied and written again while the start ran (a rotation's copy and truncate): its
    lines are this start's, all of them, though the log is now shorter than where the start began."""
    (tmp_path / "valkey.log").write_text("an earlier start's line, longer than the later start's\n")
    cut_then_said = ': > /proc/$$/fd/2\necho "fatal: said after the cut" >&2\n'
    later = _start_error(EmbeddedServer(data_dir=tmp_path, binary=_silent_binary(tmp_path, cut_then_said)))
    assert str(later) == "valkey-server exited at start (status 1): fatal: said after the cut", later
