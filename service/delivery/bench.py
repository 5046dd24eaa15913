"""Delivery benchmark: claim+complete throughput of concurrent workers, and steal latency.

Throughput: ``workers`` threads, each with its own connection, claim batches from their own queue
(stealing once it drains) and complete each batch in one call, until the schedule is done; we count
items completed, twice (a claim and a completion each), per second of wall time, then audit that every
item was accepted exactly once. By default each round trip completes a batch and claims the next
(``complete_and_claim``, pipelined); ``pipelined=False`` with a batch of 1 calls as a sidecar does
(``service/sidecar/session.py``: each finished item reported in its own call, claims apart), which
takes a round trip per claim and per completion. Steal latency: one thief steals from a schedule of
``queues`` loaded queues, one steal at a time, timing each client round trip (so GIL contention
between benchmark threads does not pollute the figure). Keys live under a fresh prefix and are deleted
afterwards, so running against a real server leaves nothing behind.
"""

from __future__ import annotations

import itertools
import math
import multiprocessing
import os
import platform
import random
import statistics
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any

import redis

from service.delivery.keys import all_keys_pattern
from service.delivery.protocol import Delivery
from service.delivery.records import DeliveryItem, LeaseSettings, PublishedSchedule, TrajectoryResult
from service.interrupts import children_ignore_sigint, end_processes, ignore_sigint

THROUGHPUT_TARGET = 10_000.0  # claims+completions per second with 64 workers on loopback
WARM_STEALS = 50  # steals before the measured ones: warm the connection and the script cache
STEAL_P99_TARGET_MS = 5.0  # steal p99 with 1,024 queues
# The thief's decode rate (tokens/s per sequence) its steals pass, as a sidecar's do once it has
# completed something: with it, and the items' planned runs (``P:due``), the steal script runs its
# deadline guard, which steals without a rate or on items without planned runs skip.
STEAL_RATE = 50.0
_RESULT = TrajectoryResult(output_tokens=512, finish_reason="stop", wall_time_s=1.0, output="x" * 64)


@dataclass(frozen=True, slots=True)
class DeliveryBench:
    """Figures of one benchmark run."""

    workers: int  # concurrent simulated workers
    items: int  # items in the throughput schedule
    batch: int  # items per claim / per complete call
    wall_s: float  # throughput phase wall time
    claims_completions_per_s: float  # 2 x items completed / wall_s (each: one claim, one completion)
    round_trips_per_s: float  # client round trips per second (a complete+claim pipeline is one)
    lost: int  # items not done at the end (must be 0)
    accepted_twice: int  # results-stream entries beyond one per item (must be 0)
    queues: int  # queues in the steal schedule
    steals: int  # timed steals
    steal_p50_ms: float  # median steal round trip
    steal_p99_ms: float  # 99th percentile steal round trip
    steal_server_us: float  # mean server-side script time of one steal (INFO commandstats)
    ping_p50_ms: float  # PING round trip just before each steal: the machine's latency floor
    ping_p99_ms: float  # its 99th percentile: scheduling noise any command's tail includes
    processes: int  # client processes the simulated workers were spread over
    throughput_met: bool  # >= THROUGHPUT_TARGET
    steal_met: bool  # p99 <= STEAL_P99_TARGET_MS
    pipelined: bool = True  # complete a batch and claim the next in one round trip; False: as a sidecar

    def to_json(self) -> dict[str, Any]:
        """Plain dict for ``--json``."""
        return asdict(self)


def _items(prefix: str, n: int, rng: random.Random, planned: bool = False) -> tuple[DeliveryItem, ...]:
    """``n`` single-sample items; ``planned``: each with its planned run, one after another in its queue
    at ``STEAL_RATE``, as the service publishes them, so that the steal script's deadline guard has a
    ``P:due`` to read (and passes a thief as fast as the owner: what is left unstarted is the tail's)."""
    predicted = [round(rng.lognormvariate(6.5, 1.0), 1) for _ in range(n)]
    ends = [0, *itertools.accumulate(math.ceil(1000 * p / STEAL_RATE) for p in predicted)]
    return tuple(
        DeliveryItem(
            key=f"{prefix}-{i}#0",
            prompt_id=f"{prefix}-{i}",
            sample_idx=0,
            prompt_tokens=256,
            max_new_tokens=16_384,
            predicted_tokens=predicted[i],
            payload={"prompt": "Solve: 2 + 2 = ?"},
            planned_start_ms=ends[i] if planned else None,
            deadline_ms=ends[i + 1] if planned else None,
        )
        for i in range(n)
    )


def _schedule(
    sid: str, queues: int, per_queue: int, extra_empty: int, seed: int, planned: bool = False
) -> PublishedSchedule:
    rng = random.Random(seed)
    full = {f"w{q}": _items(f"w{q}", per_queue, rng, planned) for q in range(queues)}
    empty = {f"thief{t}": () for t in range(extra_empty)}
    return PublishedSchedule(sid, {**full, **empty}, lease=LeaseSettings(lease_ttl_ms=600_000))


def _worker_loop(
    delivery: Delivery, sid: str, worker: str, batch: int, trips: list[int], pipelined: bool = True
) -> None:
    """A busy worker: each round trip completes the last batch and claims the next (pipelined), or
    (not) each item is completed in its own call and the next batch claimed apart, as a sidecar does;
    once its own queue drains it steals, until there is nothing left anywhere."""
    n, leases = 1, delivery.claim(sid, worker, batch)
    while True:
        if not leases:
            leases = delivery.steal(sid, worker, batch)
            n += 1
            if not leases:
                break
        done = [(le.key, le.token, _RESULT) for le in leases]
        if pipelined:
            _, leases = delivery.complete_and_claim(sid, worker, done, batch)
        else:
            for entry in done:
                delivery.complete_many(sid, [entry], worker_id=worker)
            leases = delivery.claim(sid, worker, batch)
            n += len(done)
        n += 1
    trips.append(n)


def _process_main(
    url: str, prefix: str, sid: str, workers: list[str], batch: int, gate: Any, out: Any, pipelined: bool
) -> None:
    """One benchmark process: a thread (and a connection) per simulated worker."""
    ignore_sigint()  # Ctrl-C is the parent's to handle: it terminates this process
    clients = [Delivery.from_url(url, prefix) for _ in workers]
    for client in clients:  # connect before the clock starts
        client.client.ping()
    calls = list[int]()
    threads = [
        threading.Thread(target=_worker_loop, args=(c, sid, w, batch, calls, pipelined))
        for c, w in zip(clients, workers, strict=True)
    ]
    gate.wait()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.put(sum(calls))


def measure_throughput(
    url: str,
    prefix: str,
    workers: int,
    per_worker: int,
    batch: int,
    processes: int = 2,
    pipelined: bool = True,
) -> tuple[float, float, float, int, int]:
    """Run the throughput phase; returns (wall_s, ops/s, round trips/s, lost, accepted_twice).

    The simulated workers are spread over ``processes`` processes (threads within each), so the
    client side is not bound to one interpreter lock; the server sees 64 concurrent connections.
    """
    sid = "throughput"
    admin = Delivery.from_url(url, prefix)
    admin.publish(_schedule(sid, workers, per_worker, 0, seed=1))
    ctx = multiprocessing.get_context("spawn")
    gate, out = ctx.Barrier(processes + 1), ctx.Queue()
    names = [f"w{i}" for i in range(workers)]
    procs = [
        ctx.Process(
            target=_process_main, args=(url, prefix, sid, names[p::processes], batch, gate, out, pipelined)
        )
        for p in range(processes)
    ]
    with children_ignore_sigint():
        for proc in procs:
            proc.start()
    try:
        gate.wait()
        start = time.perf_counter()
        calls = sum(out.get() for _ in procs)
        wall = time.perf_counter() - start
    except KeyboardInterrupt:
        end_processes(procs)  # before the caller deletes the schedule their threads are claiming from
        raise
    for proc in procs:
        proc.join()
    total = workers * per_worker
    progress = admin.progress(sid)
    stream_len = int(admin.client.xlen(admin.keys(sid).results))
    # completed items, not items queued: an item lost is neither claimed-and-completed nor counted
    return wall, 2 * progress.done / wall, calls / wall, total - progress.done, stream_len - progress.done


def _evalsha_usec(client: Any) -> tuple[int, int]:
    stats = client.info("commandstats").get("cmdstat_evalsha", {})
    return int(stats.get("calls", 0)), int(stats.get("usec", 0))


def measure_steals(url: str, prefix: str, queues: int, steals: int) -> tuple[list[float], list[float], float]:
    """Time ``steals`` sequential one-item steals against ``queues`` loaded queues, on items with
    planned runs and with a decode rate, as a sidecar steals: the deadline guard runs in each.

    Returns the steal round trips (ms), PING round trips taken just before each steal (ms: the
    machine's own floor, against which the steal's tail is judged), and the server's mean script
    time per steal (us, from INFO commandstats).
    """
    sid = "steal"
    delivery = Delivery.from_url(url, prefix)
    per_queue = max(4, 2 * (steals + WARM_STEALS) // queues + 2)  # the warm-up steals take items too
    delivery.publish(_schedule(sid, queues, per_queue, 1, seed=2, planned=True))
    for _ in range(WARM_STEALS):  # warm the connection and the script cache
        delivery.steal(sid, "thief0", 1, rate_tokens_per_s=STEAL_RATE)
    samples, pings = [], []
    calls0, usec0 = _evalsha_usec(delivery.client)
    for _ in range(steals):
        start = time.perf_counter()
        delivery.client.ping()
        pinged = time.perf_counter()
        got = delivery.steal(sid, "thief0", 1, rate_tokens_per_s=STEAL_RATE)
        samples.append((time.perf_counter() - pinged) * 1000)
        pings.append((pinged - start) * 1000)
        if not got:
            raise RuntimeError("steal benchmark ran out of work; raise --queues or lower --steals")
    calls1, usec1 = _evalsha_usec(delivery.client)
    return samples, pings, (usec1 - usec0) / max(1, calls1 - calls0)


def _percentile(sorted_ms: list[float], q: float) -> float:
    return sorted_ms[min(len(sorted_ms) - 1, round(q * (len(sorted_ms) - 1)))]


def _cleanup(url: str, prefix: str, best_effort: bool = False) -> None:
    """Delete the run's keys. ``best_effort`` after Ctrl-C: an embedded server heard the same Ctrl-C
    and may already be gone, and its failing must not replace the interrupt with a connection error."""
    client = redis.Redis.from_url(url)
    try:
        batch = list(client.scan_iter(match=all_keys_pattern(prefix), count=1000))
        for i in range(0, len(batch), 500):
            client.unlink(*batch[i : i + 500])
    except (redis.RedisError, OSError):
        if not best_effort:
            raise
    finally:
        client.close()


def run_bench(
    url: str,
    workers: int = 64,
    per_worker: int = 400,
    batch: int = 8,
    queues: int = 1024,
    steals: int = 2000,
    processes: int = 2,
    *,
    pipelined: bool = True,
) -> DeliveryBench:
    """Run both phases under a fresh key prefix and remove every key afterwards."""
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    interrupted = False
    try:
        wall, ops, calls, lost, twice = measure_throughput(
            url, prefix, workers, per_worker, batch, processes, pipelined
        )
        raw, raw_pings, server_us = measure_steals(url, prefix, queues, steals)
        samples, pings = sorted(raw), sorted(raw_pings)
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:
        _cleanup(url, prefix, best_effort=interrupted)
    p50, p99 = statistics.median(samples), _percentile(samples, 0.99)
    return DeliveryBench(
        workers=workers,
        items=workers * per_worker,
        batch=batch,
        wall_s=round(wall, 3),
        claims_completions_per_s=round(ops, 1),
        round_trips_per_s=round(calls, 1),
        lost=lost,
        accepted_twice=twice,
        queues=queues,
        steals=steals,
        steal_p50_ms=round(p50, 3),
        steal_p99_ms=round(p99, 3),
        steal_server_us=round(server_us, 1),
        ping_p50_ms=round(statistics.median(pings), 3),
        ping_p99_ms=round(_percentile(pings, 0.99), 3),
        processes=processes,
        throughput_met=ops >= THROUGHPUT_TARGET,
        steal_met=p99 <= STEAL_P99_TARGET_MS,
        pipelined=pipelined,
    )


def markdown_report(url: str | None = None, runs: int = 3) -> str:
    """Run the benchmark ``runs`` times as the target's figure is measured (batches of 8, pipelined)
    and ``runs`` times as a sidecar calls (one item per call, claims apart), and render
    docs/benchmarks.md's "Delivery" section body: the first alone was read as what sidecars get,
    whose calls (a round trip per claim and per completion) measured ~5x fewer on the same host.

    Meant for ``make bench`` (``service.bench.report``): the section sits between
    ``<!-- delivery:begin -->`` and ``<!-- delivery:end -->`` markers.
    """
    from service.embedded import EmbeddedServer

    server = EmbeddedServer().start() if url is None else None
    try:
        target = server.url if server is not None else str(url)
        results = [run_bench(target) for _ in range(runs)]
        sidecar = [run_bench(target, batch=1, pipelined=False) for _ in range(runs)]
    finally:
        if server is not None:
            server.stop()
    return render_markdown(results, sidecar)


def render_markdown(results: list[DeliveryBench], sidecar: list[DeliveryBench]) -> str:
    """The section body: the pipelined runs, the sidecar-pattern runs, the medians of each."""
    first = results[0]
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = [
        f"`rollout-scheduler bench delivery --json`, {len(results)} consecutive runs, then "
        f"{len(sidecar)} of `bench delivery --batch 1 --no-pipeline --json` (as a sidecar calls: each "
        f"finished item reported in its own call, claims apart); {platform.machine()}, "
        f"{os.cpu_count()} CPU cores, Python {platform.python_version()}, {when}. {first.workers} simulated "
        f"workers over {first.processes} client processes x {first.items // first.workers} items; "
        f"{first.steals} sequential one-item steals against {first.queues} queues. Throughput counts "
        "items completed twice (a claim and a completion each).",
        "",
        "| run | calls | claims+completions/s | round trips/s | lost | accepted twice | steal p50 "
        "| steal p99 | server time per steal | PING p50 / p99 |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for i, r in enumerate([*results, *sidecar], start=1):
        calls = (
            f"batch {r.batch}, complete+claim pipelined" if r.pipelined else f"batch {r.batch}, as a sidecar"
        )
        lines.append(
            f"| {i} | {calls} | {r.claims_completions_per_s:,.0f} | {r.round_trips_per_s:,.0f} | {r.lost} "
            f"| {r.accepted_twice} | {r.steal_p50_ms:.3f} ms | {r.steal_p99_ms:.2f} ms "
            f"| {r.steal_server_us:.0f} us | {r.ping_p50_ms:.3f} / {r.ping_p99_ms:.2f} ms |"
        )
    ops = statistics.median(r.claims_completions_per_s for r in results)
    as_sidecar = statistics.median(r.claims_completions_per_s for r in sidecar)
    p99 = statistics.median(r.steal_p99_ms for r in results)
    lines += [
        "",
        f"Medians: {ops:,.0f} claims+completions/s pipelined in batches of {first.batch} (target >= "
        f"{THROUGHPUT_TARGET:,.0f}), {as_sidecar:,.0f}/s as a sidecar calls; steal p99 {p99:.2f} ms "
        f"(target <= {STEAL_P99_TARGET_MS} ms).",
    ]
    return "\n".join(lines)
