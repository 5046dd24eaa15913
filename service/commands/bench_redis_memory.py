"""``rollout-scheduler bench redis-memory``: Redis memory one schedule takes, published and finished.

Operators size Redis from this (docs/operations.md). A schedule is planned (``lpt``) and built as the
service builds one (``schedule_from_plan``: planned runs, paces, KV caps) and published through the
real delivery protocol, with the answer the service stores for a retry under a caller-chosen id
(``P:answer``: a ``POST /schedule`` answer naming every trajectory, ``service/pipeline/republish.py``); its
keys, and the index keys its publish makes outside its slot (inboxes, active index), are measured with
``MEMORY USAGE <key> SAMPLES 0`` (exact, nested values included), then every item is claimed and
completed with an output of ``--output-chars`` characters and the keys are measured again. Each item
carries its prompt's payload, which the schedule stores once per prompt; the results stream holds
every accepted output until the schedule's retention lapses.
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Annotated, Any

import typer

SIZES: tuple[tuple[int, int], ...] = ((1024, 16), (4096, 32))  # (trajectories, workers)
SAMPLES = 16  # per prompt (GRPO group size)
PREFIX = "rs-memory-bench"  # its own key namespace, so a shared server's real schedules are untouched
HELP = "Redis memory one schedule takes, published and finished: what to size Redis by."
# Its own text, not the module docstring's first line, which names the command in reST literals.


@dataclass(frozen=True)
class MemoryResult:
    """Memory of one schedule's keys at one size."""

    trajectories: int
    workers: int
    published_bytes: int  # every key of the schedule right after publish
    finished_bytes: int  # the same keys once every item is done (results stream included)
    published_per_trajectory: float  # bytes
    finished_per_trajectory: float  # bytes
    results_bytes: int  # the results stream alone, at the end
    answer_bytes: int  # the stored answer alone (``P:answer``), in the published bytes
    answer_json_bytes: int  # that answer's JSON, as it would be stored uncompressed
    index_bytes: int = 0  # keys outside the schedule's slot its publish made (inboxes, active index)


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    """Attach ``bench redis-memory``."""
    del app
    bench_app.command("redis-memory", help=HELP)(bench_redis_memory)


def bench_redis_memory(
    redis_url: Annotated[
        str | None, typer.Option(envvar="REDIS_URL", help="Measure on this server; default embedded.")
    ] = None,
    prompt_chars: Annotated[int, typer.Option(min=0, help="Prompt text per prompt, characters.")] = 800,
    output_chars: Annotated[int, typer.Option(min=0, help="Output text per trajectory, characters.")] = 4000,
    seed: Annotated[int, typer.Option(help="Seed of the predicted lengths.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Publish, measure, complete everything, measure again; print a table (or JSON)."""
    import redis

    from service.delivery import Delivery

    try:
        _check_url(redis_url)
    except ValueError as error:
        typer.echo(f"bench redis-memory: {error}", err=True)
        raise typer.Exit(2) from None
    try:
        with _server(redis_url) as url:
            delivery = Delivery(redis.Redis.from_url(url, decode_responses=True), prefix=PREFIX)
            results = [_measure(delivery, n, w, prompt_chars, output_chars, seed) for n, w in SIZES]
    except (redis.RedisError, OSError) as error:
        typer.echo(f"bench redis-memory: {_failure(error, redis_url)}", err=True)
        raise typer.Exit(2 if _refused(error) else 1) from None
    report = {
        "prompt_chars": prompt_chars,
        "output_chars": output_chars,
        "samples_per_prompt": SAMPLES,
        "sizes": [asdict(r) for r in results],
    }
    typer.echo(json.dumps(report, indent=2) if as_json else _table(results, prompt_chars, output_chars))


def _check_url(url: str | None) -> None:
    """Refuse a URL redis-py cannot connect by, with the rule ``serve`` and ``sidecar`` use: redis-py
    would raise a bare ValueError traceback (a wrong scheme, a port that is not a number)."""
    from service.redis_conn import check_redis_url_flag

    if url:
        check_redis_url_flag(url)


def _refused(error: Exception) -> bool:
    """Whether Redis refused our credentials: bad input (exit 2, as the sidecar's), where a server that
    cannot be reached is exit 1, since then nothing in the command line is wrong (README)."""
    from service.redis_conn import refused

    return refused(error)


def _failure(error: Exception, url: str | None) -> str:
    """The one line for a Redis error: a refusal names the server (password masked), as the sidecar's
    does; redis-py's own words name neither the server nor what to fix."""
    from service.redis_conn import describe

    if _refused(error):
        return f"Redis at {describe(url or '')} refused our credentials: {error}"
    return str(error)


@contextmanager
def _server(url: str | None) -> Iterator[str]:
    if url:
        yield url
        return
    from service.embedded import EmbeddedServer

    with EmbeddedServer() as server:
        yield server.url


def _measure(
    delivery: Any, n: int, workers: int, prompt_chars: int, output_chars: int, seed: int
) -> MemoryResult:
    from service.delivery import TrajectoryResult

    schedule = _schedule(n, workers, prompt_chars, seed)
    answer, answer_json = _answer(schedule)
    _delete(delivery)  # what an interrupted earlier run left under the prefix is not this schedule's
    delivery.publish(schedule, digest="0" * 64, answer=answer)
    published = _namespace_bytes(delivery)
    index = published - _schedule_bytes(delivery, schedule.schedule_id)
    stored_answer = int(
        delivery.client.memory_usage(delivery.keys(schedule.schedule_id).answer, samples=0) or 0
    )
    output = "y" * output_chars
    for worker in sorted(schedule.queues):
        while leases := delivery.claim(schedule.schedule_id, worker, 256):
            entries = [
                (
                    lease.key,
                    lease.token,
                    TrajectoryResult(output_tokens=max(1, output_chars // 4), output=output),
                )
                for lease in leases
            ]
            delivery.complete_many(schedule.schedule_id, entries)
    finished = _namespace_bytes(delivery)
    results = int(delivery.client.memory_usage(delivery.keys(schedule.schedule_id).results, samples=0) or 0)
    _delete(delivery)
    return MemoryResult(
        n,
        workers,
        published,
        finished,
        published / n,
        finished / n,
        results,
        stored_answer,
        answer_json,
        index,
    )


def _answer(schedule: Any) -> tuple[str, int]:
    """The stored form of the service's answer that published ``schedule`` (every queue, in order),
    and the size of its JSON: what a retry under a caller-chosen id is answered."""
    from service.api.schemas import AssignedItem, ScheduleResponse, Timings
    from service.pipeline.republish import UNSTORED, encode_answer

    workers = sorted(schedule.queues)
    response = ScheduleResponse.model_construct(
        schedule_id=schedule.schedule_id,
        step=0,
        policy="lpt",
        status="HEURISTIC",
        published=True,
        model_version="v1",
        prediction_sources={"lightgbm": sum(len(q) for q in schedule.queues.values())},
        quantile=0.5,
        assignments={
            w: [
                AssignedItem(
                    prompt_id=i.prompt_id, sample_idx=i.sample_idx, predicted_tokens=i.predicted_tokens
                )
                for i in schedule.queues[w]
            ]
            for w in workers
        },
        dispatch_order=[],
        predicted_makespan_s=412.8,
        lower_bound_s=398.1,
        round_robin_makespan_s=903.5,
        speedup_vs_round_robin=2.19,
        time_scales=dict.fromkeys(workers, 1.0),
        time_scale_sources=dict.fromkeys(workers, "profile"),
        timings=Timings(
            queue_ms=0, validate_ms=0, predict_ms=0, plan_ms=0, baseline_ms=0, publish_ms=0, total_ms=0
        ),
    )
    return encode_answer(response), len(response.model_dump_json(exclude=UNSTORED))


def _schedule(n: int, workers: int, prompt_chars: int, seed: int) -> Any:
    """``n`` trajectories (``SAMPLES`` per prompt) planned by ``lpt`` on a half H100 / half Ascend 910B
    pool of ``workers`` (Qwen2.5-7B) and built as the service builds what it publishes
    (``schedule_from_plan`` with the plan's inventory): each item with its planned run (``P:due``),
    each worker with its pace and KV capacity (``P:pace``, ``P:cap``). Queues dealt round-robin with
    none of those measured a schedule the service never publishes, ~20% lighter per trajectory."""
    from scheduler.benchgen import mixed_inventory
    from scheduler.planner import plan
    from scheduler.types import PlanRequest, Trajectory
    from service.delivery.publisher import schedule_from_plan
    from service.engines import SERVICE_ENGINE

    rng = random.Random(seed)
    trajectories = [
        Trajectory(
            prompt_id=f"prompt-{i // SAMPLES}",
            sample_idx=i % SAMPLES,
            prompt_tokens=max(1, prompt_chars // 4),
            max_new_tokens=16_384,
            predicted_tokens=round(min(16_384.0, rng.lognormvariate(7.5, 0.8)), 1),
        )
        for i in range(n)
    ]
    inventory = mixed_inventory(workers)
    # the engine a request naming none is planned for, ROLLOUT_DEFAULT_ENGINE unset
    planned = plan(PlanRequest(tuple(trajectories), inventory, seed=seed, engine=SERVICE_ENGINE), "lpt")
    payloads = {t.prompt_id: {"prompt": _text(t.prompt_id, prompt_chars)} for t in trajectories}
    sid = uuid.uuid4().hex
    return schedule_from_plan(
        sid, planned, trajectories, payloads, inventory=inventory, engine=SERVICE_ENGINE
    )


def _text(prompt: str, chars: int) -> str:
    """``chars`` characters of text of its own for ``prompt``: the publisher stores each distinct text
    once, so one text shared by every prompt would be counted once for the whole batch."""
    return (f"{prompt} " + "x" * chars)[:chars]


def _keys_bytes(delivery: Any, pattern: str) -> int:
    """Exact memory of every key ``pattern`` matches (``SAMPLES 0`` walks every nested element)."""
    keys = delivery.client.scan_iter(match=pattern, count=1000)
    return sum(int(delivery.client.memory_usage(k, samples=0) or 0) for k in keys)


def _schedule_bytes(delivery: Any, schedule_id: str) -> int:
    """The keys in the schedule's own slot (``P:*``)."""
    return _keys_bytes(delivery, delivery.keys(schedule_id).pattern)


def _namespace_bytes(delivery: Any) -> int:
    """Every key under the benchmark's own prefix (``PREFIX``), which holds this one schedule: its ``P:*``
    keys and the index keys its publish made outside its slot (each worker's inbox, the active index),
    which a sum over ``P:*`` alone left out. ``_delete`` empties the prefix after each size, so a
    size's inboxes are not counted again in the next."""
    from service.delivery.keys import all_keys_pattern

    return _keys_bytes(delivery, all_keys_pattern(delivery.prefix))


def _delete(delivery: Any) -> None:
    """Every key under the benchmark's prefix: the schedule's and the indexes' (inboxes included)."""
    from service.delivery.keys import all_keys_pattern

    keys = list(delivery.client.scan_iter(match=all_keys_pattern(delivery.prefix), count=1000))
    for start in range(0, len(keys), 500):
        delivery.client.delete(*keys[start : start + 500])


def _table(results: list[MemoryResult], prompt_chars: int, output_chars: int) -> str:
    lines = [
        f"Redis memory per schedule (prompt {prompt_chars} chars x {SAMPLES} samples, "
        f"output {output_chars} chars)",
        f"{'trajectories':>12} {'workers':>7} {'published':>12} {'B/traj':>8} {'finished':>12} {'B/traj':>8} "
        f"{'answer':>10} {'B/traj':>8}",
    ]
    for r in results:
        lines.append(
            f"{r.trajectories:>12} {r.workers:>7} {_mib(r.published_bytes):>12} "
            f"{r.published_per_trajectory:>8.0f} {_mib(r.finished_bytes):>12} "
            f"{r.finished_per_trajectory:>8.0f} {r.answer_bytes / 1024:>7.1f} KiB "
            f"{r.answer_bytes / r.trajectories:>8.1f}"
        )
    return "\n".join(lines)


def _mib(n: int) -> str:
    return f"{n / 2**20:.2f} MiB"
