"""A server whose start never became the server fails its owner's ``start`` saying why, and leaves
nothing of its start behind: no watcher, no pipe, no thread.

The start is a shell that tells the watcher its pid, then ``exec``s the server
(``embedded_watch.TELL``): a binary that cannot be run ends the shell, 127 (not there) or 126 (not
executable), and with the start's stderr at /dev/null the error read ``valkey-server exited at
start: `` with nothing after it, where ``Popen`` of the binary itself had named the path (review53d).
The start's stderr is now the server's log, read into that error, with the status's meaning. A
``Popen`` that fails (fork refused, EAGAIN at the process limit; no shell) fails after the watcher
and its two pipes were made, which the failed start ends and closes.
"""

from __future__ import annotations

import errno
import gc
import os
import subprocess
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from service import embedded_watch
from service.embedded import EmbeddedServer, EmbeddedServerError, find_server_binary
from tests.service.procfs import children, open_fds

pytestmark = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="reads /proc (Linux)")


def _held() -> tuple[set[int], set[int], Counter[str]]:
    """This process's descriptors, children and threads (by name, counted)."""
    return open_fds(), children(), Counter(t.name for t in threading.enumerate())


def _added(
    before: tuple[set[int], set[int], Counter[str]], after: tuple[set[int], set[int], Counter[str]]
) -> tuple[set[int], set[int], Counter[str]]:
    """What ``after`` holds that ``before`` did not. Only what was added counts: an earlier test's
    thread (a step keeper winding down) or descriptor may end while the start runs, and that is not
    the start's to answer for (seen in a run at ``-n 6``)."""
    return after[0] - before[0], after[1] - before[1], after[2] - before[2]


def _failed_start(server: EmbeddedServer, error: type[Exception] = EmbeddedServerError) -> str:
    """``server``'s start's error, once it is shown to leave nothing of the start behind (before the
    ``stop`` that removes its temporary dir)."""
    gc.collect()  # earlier tests' garbage, collected mid-test, would close descriptors of its own
    before = _held()
    try:
        with pytest.raises(error) as failed:
            server.start()
        left = _added(before, _held())
        assert left == (set(), set(), Counter()), f"the failed start left {left}"
    finally:
        server.stop()
    return str(failed.value)


def test_a_binary_that_is_not_there_fails_the_start_with_127_and_the_shells_words(tmp_path: Path) -> None:
    binary = tmp_path / "valkey-server"
    said = _failed_start(EmbeddedServer(binary=str(binary)))
    assert "(status 127: its binary not found)" in said, said
    assert f"{binary}: not found" in said, said  # the shell's words


def test_a_binary_that_is_not_executable_fails_the_start_with_126_and_the_shells_words(
    tmp_path: Path,
) -> None:
    binary = tmp_path / "valkey-server"
    binary.write_text("not a program")
    binary.chmod(0o644)
    said = _failed_start(EmbeddedServer(binary=str(binary)))
    assert "(status 126: its binary found but not executable)" in said, said
    assert f"{binary}: Permission denied" in said, said


def test_a_start_ended_by_a_signal_names_the_signal_not_a_status(tmp_path: Path) -> None:
    """A server killed before it answered (the OOM killer's SIGKILL) ended by no status of its own:
    the error names the signal, where a status would read as the server's own exit."""
    binary = tmp_path / "valkey-server"
    binary.write_text("#!/bin/sh\nkill -KILL $$\n")  # its own pid: the shell exec'd it
    binary.chmod(0o755)
    said = _failed_start(EmbeddedServer(binary=str(binary)))
    assert "valkey-server exited at start (SIGKILL)" in said, said


def test_a_server_that_refuses_its_arguments_fails_the_start_with_its_own_lines() -> None:
    """valkey-server says a bad argument on its stderr, before it opens its log: the log now."""
    said = _failed_start(EmbeddedServer(extra_args=("--no-such-directive", "1")))
    assert "(status 1)" in said, said
    assert "Bad directive or wrong number of arguments" in said, said


def _fork_refused(monkeypatch: pytest.MonkeyPatch, refused: str) -> None:
    """``Popen`` raises fork's EAGAIN (a process limit reached) for the command whose first word or
    script is ``refused``, and starts every other one."""
    real = subprocess.Popen

    def popen(args: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        if refused in args[:5]:
            raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")
        return real(args, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", popen)


def test_a_start_whose_servers_fork_is_refused_leaves_no_watcher_nor_pipe(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The watcher is started, armed, with its two pipes, before the server's ``Popen``
    (``Watch.before``), which then fails."""
    _fork_refused(monkeypatch, embedded_watch.SHELL)
    _failed_start(EmbeddedServer(), BlockingIOError)


def test_a_start_whose_shell_is_not_there_leaves_no_watcher_nor_pipe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real ``Popen`` that fails after its fork: the exec of the server's start finds no shell."""
    monkeypatch.setattr(embedded_watch, "SHELL", str(tmp_path / "sh"))
    _failed_start(EmbeddedServer(), FileNotFoundError)


def test_a_start_whose_watchers_fork_is_refused_leaves_no_pipe(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first ``Popen`` of the start fails: no server is started without its watcher."""
    _fork_refused(monkeypatch, embedded_watch.WATCHER)
    _failed_start(EmbeddedServer(), BlockingIOError)


@pytest.mark.parametrize("text", ["touch {ran}\n", ""])
def test_a_text_file_given_as_the_binary_is_refused_naming_it_and_never_run(
    tmp_path: Path, text: str
) -> None:
    """The start's shell ran a text file without ``#!`` as a script of its own (the kernel refuses
    it, ENOEXEC): its lines ran as commands, and the 127 of its first unknown word was said as
    ``its binary not found`` (trace55)."""
    ran = tmp_path / "ran"
    binary = tmp_path / "valkey-server"
    binary.write_text(text.format(ran=ran))
    binary.chmod(0o755)
    said = _failed_start(EmbeddedServer(binary=str(binary)))
    why = "a text file without '#!'" if text else "an empty file"
    assert said == f"valkey-server binary {binary} is {why}, not a program: the kernel would not run it"
    assert not ran.exists()


def test_a_wrapper_script_with_its_interpreter_named_starts_the_server(tmp_path: Path) -> None:
    real = find_server_binary()
    wrapper = tmp_path / "valkey-server"
    wrapper.write_text(f'#!/bin/sh\nexec {real} "$@"\n')
    wrapper.chmod(0o755)
    server = EmbeddedServer(binary=str(wrapper)).start()
    try:
        assert server.url.startswith("redis://127.0.0.1:")
    finally:
        server.stop()


def test_a_bare_name_is_the_path_s_program_not_a_text_file_of_that_name_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A name without a folder is looked up on PATH by the start's shell: a text file of that name in
    the working directory is not the one run, so it is not judged (``not_a_program``)."""
    real = Path(find_server_binary())
    monkeypatch.setenv("PATH", f"{real.parent}:{os.environ.get('PATH', '')}")
    monkeypatch.chdir(tmp_path)
    (tmp_path / real.name).write_text("not the server\n")
    (tmp_path / real.name).chmod(0o755)
    server = EmbeddedServer(binary=real.name).start()
    try:
        assert server.url.startswith("redis://127.0.0.1:")
    finally:
        server.stop()
