"""``rollout-scheduler bench delivery``: claim+complete throughput and steal latency on Redis.

Uses the server at ``--redis-url``/``REDIS_URL``, else starts an embedded valkey-server on loopback.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from service.delivery.bench import DeliveryBench


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    """Attach ``bench delivery``."""
    del app
    bench_app.command("delivery")(bench_delivery)


def bench_delivery(
    redis_url: Annotated[
        str | None, typer.Option(envvar="REDIS_URL", help="Redis to use; default: an embedded valkey-server.")
    ] = None,
    workers: Annotated[int, typer.Option(min=1, help="Concurrent simulated workers.")] = 64,
    items_per_worker: Annotated[int, typer.Option(min=1, help="Items queued per worker.")] = 400,
    batch: Annotated[int, typer.Option(min=1, help="Items per claim and per complete call.")] = 8,
    processes: Annotated[int, typer.Option(min=1, help="Client processes the workers are spread over.")] = 2,
    queues: Annotated[int, typer.Option(min=1, help="Loaded queues in the steal-latency phase.")] = 1024,
    steals: Annotated[int, typer.Option(min=1, help="Timed steals.")] = 2000,
    pipeline: Annotated[
        bool,
        typer.Option(
            "--pipeline/--no-pipeline",
            help="Complete a batch and claim the next in one round trip; --no-pipeline (with --batch 1): "
            "as a sidecar calls, each finished item in its own call and claims apart.",
        ),
    ] = True,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Measure claims+completions per second and steal latency p50/p99 (targets: 10,000/s, 5 ms)."""
    result = _measure(redis_url, pipeline, workers, items_per_worker, batch, queues, steals, processes)
    if as_json:
        print(json.dumps(result.to_json()))
    else:
        _print(result)


def _measure(redis_url: str | None, pipelined: bool, *sizes: int) -> DeliveryBench:
    """``run_bench`` on ``redis_url``, or on an embedded server started (and stopped) for it, with
    ``sizes`` in its order (workers, per worker, batch, queues, steals, processes); what fails is
    one line on stderr and exit code 2, but 1 for a Redis that cannot be reached (130 when
    interrupted): the README's rule for clients of a running server, since then nothing in the
    command line is wrong (credentials Redis refuses are, as for ``bench redis-memory``)."""
    import redis

    from service.delivery.bench import run_bench
    from service.embedded import EmbeddedServer, EmbeddedServerError
    from service.redis_conn import check_redis_url_flag, refused

    server = None
    try:
        if redis_url is not None:  # redis-py's own message names no flag, and can quote the password
            check_redis_url_flag(redis_url)
        else:
            server = EmbeddedServer().start()
            redis_url = server.url
        return run_bench(redis_url, *sizes, pipelined=pipelined)
    except redis.RedisError as err:
        print(f"bench delivery: {err}", file=sys.stderr)
        raise typer.Exit(2 if refused(err) else 1) from None
    except (EmbeddedServerError, RuntimeError, ValueError) as err:
        print(f"bench delivery: {err}", file=sys.stderr)
        raise typer.Exit(2) from None
    except KeyboardInterrupt:  # its client processes are already ended, its keys removed
        print("bench delivery: interrupted", file=sys.stderr)
        raise typer.Exit(130) from None
    finally:
        if server is not None:
            server.stop()


def _print(result: DeliveryBench) -> None:
    """The figures, with the targets they met or missed, as lines for a reader."""
    from service.delivery.bench import STEAL_P99_TARGET_MS, THROUGHPUT_TARGET

    print(
        f"workers {result.workers} over {result.processes} processes, items {result.items}, "
        f"batch {result.batch}{'' if result.pipelined else ' (as a sidecar calls)'}, wall {result.wall_s} s"
    )
    print(
        f"claims+completions/s  {result.claims_completions_per_s:>10,.0f}  "
        f"(target >= {THROUGHPUT_TARGET:,.0f}: {'met' if result.throughput_met else 'MISSED'}); "
        f"round trips/s {result.round_trips_per_s:,.0f}"
    )
    print(f"lost {result.lost}, accepted twice {result.accepted_twice}")
    print(
        f"steal latency, {result.queues} queues, {result.steals} steals: p50 {result.steal_p50_ms} ms, "
        f"p99 {result.steal_p99_ms} ms (target <= {STEAL_P99_TARGET_MS} ms: "
        f"{'met' if result.steal_met else 'MISSED'}); server time per steal {result.steal_server_us} us"
    )
    print(f"PING round trip on this machine: p50 {result.ping_p50_ms} ms, p99 {result.ping_p99_ms} ms")
