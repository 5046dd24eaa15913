"""Real processes for the sidecar fault tests: engine-sim servers and sidecars on loopback ports.

Each is the ``rollout-scheduler`` console command a user would run (its entry point, under this
interpreter), so a test can SIGKILL, SIGSTOP or SIGTERM it like an orchestrator would.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import uvicorn

from service.delivery.protocol import Delivery
from service.delivery.records import DeliveryItem, Lease, LeaseSettings, PublishedSchedule
from service.embedded import EmbeddedServer
from service.engine_sim.app import build_config, create_app
from service.sidecar.runner import Sidecar
from service.sidecar.session import SessionStats
from tests.service.bound_port import child_port
from tests.service.polling import poller

ROOT = Path(__file__).resolve().parents[3]
KILLED_BEFORE_MS = 1_000  # how long before its successor started a killed sidecar claimed (Redis's clock)
# How long a child process may take to start answering: a bound against "never", not a speed. Its
# imports take seconds on a loaded 2-core host, and eight engine-sims started at once at load ~24 had
# not all answered ``/health`` in 30 s (test_process_end_to_end, round 43).
PROCESS_START_S = 120.0


@dataclass
class Proc:
    """One child process and where its output goes."""

    name: str
    popen: subprocess.Popen[str]
    log: Path

    def signal(self, sig: signal.Signals) -> None:
        """Send ``sig`` to the process (and only it)."""
        if self.popen.poll() is None:
            self.popen.send_signal(sig)

    def stats(self, timeout_s: float = 30.0) -> dict[str, int]:
        """Wait for a sidecar to exit and return the counters it printed as its last stdout line."""
        out, _ = self.popen.communicate(timeout=timeout_s)
        lines = [line for line in out.splitlines() if line.startswith("{")]
        assert lines, f"{self.name} printed no stats; log:\n{self.log.read_text()[-3000:]}"
        return dict(json.loads(lines[-1]))


@dataclass
class Cluster:
    """The processes a test started; all are killed at the end."""

    workdir: Path
    procs: list[Proc] = field(default_factory=list)
    threads: list[tuple[uvicorn.Server, threading.Thread]] = field(default_factory=list)

    def spawn(self, name: str, args: list[str]) -> Proc:
        """Start ``rollout-scheduler <args>``; stderr goes to ``<workdir>/<name>.log``."""
        log = self.workdir / f"{name}.log"
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        popen = subprocess.Popen(
            [sys.executable, "-c", "from service.cli import main; main()", *args],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=log.open("w"),
            text=True,
            env=env,
        )
        proc = Proc(name, popen, log)
        self.procs.append(proc)
        return proc

    def engines(self, specs: dict[str, tuple[str, float]], *extra: str) -> dict[str, str]:
        """Start one ``engine-sim`` process per name from (device, time scale), all in parallel.

        Returns their base URLs once every one answers ``/health``. Each is asked for port 0 and
        found on the port the kernel gave it (``tests.service.bound_port``): a port picked free here
        could be taken by another process before the child bound it (seen once in a CI run, among
        eight engines, when the engines were told a port ``free_port`` picked).
        """
        started = {name: self._engine(name, spec, extra) for name, spec in specs.items()}
        urls = {name: bound_url(proc) for name, proc in started.items()}
        for name, url in urls.items():
            wait_http(f"{url}/health", started[name])
        return urls

    def _engine(self, name: str, spec: tuple[str, float], extra: tuple[str, ...]) -> Proc:
        device, scale = spec
        args = ["engine-sim", "--port", "0", "--device", device, "--time-scale", str(scale)]
        return self.spawn(name, [*args, *extra])

    def engine_threads(
        self, time_scales: dict[str, float], max_num_seqs: int = 256, contexts: dict[str, int] | None = None
    ) -> dict[str, str]:
        """Serve engine-sims from threads of this process (real uvicorn servers on loopback ports);
        ``contexts`` gives an engine a ``max_model_len`` of its own (default 32,768).

        Tests whose faults hit the sidecars use these: a process per engine costs seconds of imports
        on a loaded 2-core machine and adds nothing to what they check.
        """
        urls = {}
        for name, scale in time_scales.items():
            context = (contexts or {}).get(name, 32_768)
            config = build_config("H100", time_scale=scale, max_num_seqs=max_num_seqs, max_model_len=context)
            server = uvicorn.Server(
                uvicorn.Config(create_app(config), host="127.0.0.1", port=0, log_level="warning")
            )
            thread = threading.Thread(target=server.run, name=name, daemon=True)
            thread.start()
            self.threads.append((server, thread))
            urls[name] = f"http://127.0.0.1:{_thread_port(server, thread)}"  # the kernel's pick
        for url in urls.values():
            wait_http(f"{url}/health", None)
        return urls

    def sidecar(self, worker_id: str, engine_url: str, redis_url: str, *extra: str) -> Proc:
        """Start a push-mode sidecar for ``worker_id``."""
        args = ["sidecar", "--worker-id", worker_id, "--engine-url", engine_url, "--redis-url", redis_url]
        return self.spawn(f"sidecar-{worker_id}", [*args, "--idle-poll", "0.05", *extra])

    def close(self) -> None:
        """Kill whatever is still running (SIGCONT first, so a stopped process can die)."""
        for proc in self.procs:
            if proc.popen.poll() is None:
                proc.popen.send_signal(signal.SIGCONT)
                proc.popen.kill()
            proc.popen.wait(timeout=10)
            if proc.popen.stdout:
                proc.popen.stdout.close()
        for server, thread in self.threads:
            server.should_exit = True
            thread.join(timeout=10)


@contextmanager
def cluster(workdir: Path) -> Iterator[Cluster]:
    """A process group for one test, torn down however the test ends."""
    group = Cluster(workdir)
    try:
        yield group
    finally:
        group.close()


def bound_url(proc: Proc) -> str:
    """``http://127.0.0.1:<port>`` of the one port child ``proc`` listens on: an ``engine-sim --port 0``,
    a ``sidecar --pull-api 0`` or ``--health-port 0``, found on the kernel's pick once it listens
    (``tests.service.bound_port``); one that exits first fails with its log."""
    try:
        return f"http://127.0.0.1:{child_port(proc.popen, PROCESS_START_S)}"
    except AssertionError as failed:
        raise RuntimeError(f"{proc.name}: {failed}; log:\n{proc.log.read_text()[-2000:]}") from None


def _thread_port(server: uvicorn.Server, thread: threading.Thread) -> int:
    """The port ``server`` (asked for port 0, running in ``thread``) bound, once it has started."""
    deadline = time.monotonic() + PROCESS_START_S
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"engine-sim {thread.name} did not start")
        time.sleep(0.02)
    return int(server.servers[0].sockets[0].getsockname()[1])


def wait_http(url: str, proc: Proc | None, timeout_s: float = PROCESS_START_S) -> None:
    """Poll ``url`` until it answers 200; fail early if ``proc`` exits."""
    deadline = time.monotonic() + timeout_s
    with poller(0.5) as client:  # not httpx.get per ask: ~34 ms of CPU each (tests.service.polling)
        while time.monotonic() < deadline:
            if proc is not None and proc.popen.poll() is not None:
                raise RuntimeError(f"{proc.name} exited: {proc.log.read_text()[-2000:]}")
            try:
                if client.get(url).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)
    raise RuntimeError(f"nothing answered at {url}")


class InboxReads(Delivery):
    """A real Delivery that counts the reads of an inbox: how a test sees whether a claim asked the
    inbox or walked the schedules it knew (the inbox's outage, ``service.sidecar.inbox``)."""

    reads = 0

    def schedules_for(self, worker_id: str) -> list[str]:
        self.reads += 1
        return super().schedules_for(worker_id)


def item(prompt_id: str, sample_idx: int, actual: int, predicted: float | None = None) -> DeliveryItem:
    """An item whose engine-sim output length is ``actual`` tokens (told through the payload)."""
    return DeliveryItem(
        key=f"{prompt_id}#{sample_idx}",
        prompt_id=prompt_id,
        sample_idx=sample_idx,
        prompt_tokens=100,
        max_new_tokens=16_000,
        predicted_tokens=float(actual if predicted is None else predicted),
        payload={"prompt": f"prompt {prompt_id}", "rollout": {"output_tokens": actual}},
    )


def publish(
    delivery: Delivery,
    schedule_id: str,
    queues: dict[str, list[DeliveryItem]],
    lease_ttl_ms: int = 1000,
    kv_admission: bool = False,
) -> PublishedSchedule:
    """Publish ``queues`` as one schedule with short leases (fault tests want fast redelivery)."""
    schedule = PublishedSchedule(
        schedule_id=schedule_id,
        queues={w: tuple(items) for w, items in queues.items()},
        kv_admission=kv_admission,
        lease=LeaseSettings(lease_ttl_ms=lease_ttl_ms, max_attempts=5),
    )
    delivery.publish(schedule)
    return schedule


def claimed_by_a_killed_sidecar(delivery: Delivery, schedule_id: str, worker_id: str, n: int) -> list[Lease]:
    """Claim ``n`` of ``worker_id``'s items as its killed predecessor did: ``KILLED_BEFORE_MS`` before
    now on Redis's clock, so before any process this test builds next has started.

    A takeover hands back only the leases taken before its process started: ``Delivery.reset`` gets
    the process's age in whole milliseconds and judges each lease's deadline in whole milliseconds of
    Redis's clock, so a lease claimed under a millisecond before the start may count as taken since
    (a live holder's) and is kept, to lapse a lease TTL later. A real predecessor's last claim comes a
    whole process start before its successor's; a test that claimed and built the successor next
    (18 us apart) had the takeover keep that lease about one run in five."""
    seconds, micros = delivery.client.time()
    now_ms = int(seconds) * 1000 + int(micros) // 1000
    return delivery.claim(schedule_id, worker_id, n, now_ms=now_ms - KILLED_BEFORE_MS)


def wait_until(
    condition: Callable[[], bool], timeout_s: float, what: str = "condition", every_s: float = 0.02
) -> None:
    """Poll ``condition`` every ``every_s`` (20 ms: a log's read or a Redis call) until it holds; fail
    the test after ``timeout_s``. A costlier condition (a request through an app) asks less often."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(every_s)
    raise AssertionError(f"{what} did not hold within {timeout_s}s")


def wait_finished(delivery: Delivery, schedule_id: str, timeout_s: float) -> None:
    """Poll progress until every item is done or dead-lettered."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if delivery.progress(schedule_id).finished:
            return
        time.sleep(0.05)
    raise AssertionError(f"schedule {schedule_id} unfinished: {delivery.progress(schedule_id)}")


def warm_up(delivery: Delivery, workers: list[str], tag: str, timeout_s: float = PROCESS_START_S) -> None:
    """Return once every worker's sidecar has run an item of its own (so all are up and polling): eight
    started at once on a loaded host take their imports' time, a bound against never.

    One single-worker schedule each: within a shared schedule an early sidecar would steal a late
    one's warm-up item and prove nothing about it.
    """
    for worker in workers:
        publish(delivery, f"warm-up-{tag}-{worker}", {worker: [item(f"warm-up-{worker}", 0, 1)]})
    for worker in workers:
        wait_finished(delivery, f"warm-up-{tag}-{worker}", timeout_s)


def tally(delivery: Delivery, schedule_id: str, expected: set[str]) -> tuple[int, int]:
    """(lost, accepted_twice) over the results stream: the two numbers every fault test reports."""
    seen: dict[str, int] = {}
    for record in delivery.read_results(schedule_id, count=1_000_000):
        seen[record.key] = seen.get(record.key, 0) + 1
    lost = len(expected - set(seen))
    twice = sum(1 for n in seen.values() if n > 1)
    print(f"schedule {schedule_id}: lost={lost} accepted_twice={twice} results={sum(seen.values())}")
    return lost, twice


def run_until(
    sidecar: Sidecar,
    done: Callable[[], bool],
    timeout_s: float = 30.0,
    watch: Callable[[], None] | None = None,
    stop: asyncio.Event | None = None,
) -> SessionStats:
    """Run ``sidecar`` until ``done()`` or ``timeout_s``, then stop it and return its counters.

    ``done`` does blocking I/O, so it is checked in a thread, off the sidecar's event loop; ``watch``
    runs between checks. ``stop``, where given, is the sidecar's, for a test that sets it from the
    sidecar's own loop (``spies.Started``) rather than at a check. A sidecar that then fails to stop
    (a hung loop) fails the test instead of hanging it."""

    async def main() -> SessionStats:
        stopped = asyncio.Event() if stop is None else stop
        runner = asyncio.create_task(sidecar.run(stopped))
        deadline = time.monotonic() + timeout_s
        while (
            not stopped.is_set()
            and not await asyncio.to_thread(done)
            and time.monotonic() < deadline
            and not runner.done()
        ):
            if watch is not None:
                watch()
            await asyncio.sleep(0.02)
        stopped.set()
        stats = await asyncio.wait_for(runner, 10.0)
        await sidecar.engine.aclose()
        return stats

    return asyncio.run(main())


def counters_line(sidecar: Proc) -> str:
    """The sidecar's counters line (its last on stdout, printed as its command returns), or "" at EOF."""
    assert sidecar.popen.stdout is not None
    for line in sidecar.popen.stdout:
        if line.startswith("{"):
            return line
    return ""


def sigterm_with_redis_paused(
    server: EmbeddedServer, sidecar: Proc, settle_s: float = 0.0
) -> tuple[str, float]:
    """SIGTERM ``sidecar`` ``settle_s`` after ``server`` is SIGSTOPped (connections accepted, nothing
    answered): its counters line and the seconds from the SIGTERM to it, the time a stop's promise
    bounds. The server is resumed and the sidecar reaped whatever happens, so no test leaves either."""
    server.signal(signal.SIGSTOP)
    try:
        time.sleep(settle_s)
        stopped = time.monotonic()
        sidecar.signal(signal.SIGTERM)
        counters = counters_line(sidecar)
        took_s = time.monotonic() - stopped
        sidecar.popen.wait(timeout=120)
    finally:
        server.signal(signal.SIGCONT)
    return counters, took_s
