"""``rollout-scheduler bench service``: end-to-end latency of ``POST /schedule`` on a running service.

It posts batches of 1,024 trajectories x 16 workers and 4,096 x 32 (8/16 H100 + 8/16 Ascend 910B,
64/256 prompts x 16 samples) and reports p50/p95 end-to-end latency, as the client sees it (HTTP,
JSON, validate, predict, plan, baseline, publish), and requests per second. Each prompt carries
``--prompt-chars`` of text (800 by default, a math problem's size), as a trainer's requests do: the
text travels to the sidecars through Redis, so it is part of what publishing costs. Without ``--url`` it
starts ``rollout-scheduler serve`` in a subprocess on an embedded valkey-server and, before measuring,
reports two earlier steps of heavy-tailed actuals for the same prompts and retrains, so predictions
come from the LightGBM model as in production rather than from the no-history fallback. Its workers
are named ``bench-*`` (``WORKER_PREFIX``), which no real sidecar serves, and each schedule it
published is cancelled once measured, so a ``--url`` run leaves no work queued for anyone.

A ``--url`` service is not sent those actuals unless ``--seed-history`` asks: made up, they would
join its history and a retrain would fit the model it serves on them. Asked for (and on the embedded
service), every one is labelled ``source=synthetic`` as ``trace push`` labels a synthetic trace's
rows, so the model fitted on them says ``synthetic`` (its metadata, ``GET /models``).
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Annotated, Any

import typer

from service.auth.tokens import TOKEN_VARIABLE

HELP = (
    "POST /schedule end to end at 1,024 x 16 and 4,096 x 32: p50/p95 latency and requests/s "
    "(targets: p50 <= 150 ms, p95 <= 1 s); starts a service on an embedded Redis without --url."
)
SIZES: tuple[tuple[int, int], ...] = ((1024, 16), (4096, 32))  # (trajectories, workers)
SAMPLES = 16  # per prompt (GRPO group size)
CAP = 16_384  # max_new_tokens
# The benchmark's workers are named apart from any real one: named ``h100-0``, as the docs name
# workers, a --url run's schedules (30,000 trajectories at the defaults) went to the inboxes of the
# real sidecars by those names, which ran them, and its plans overwrote those workers' profiles.
WORKER_PREFIX = "bench-"


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    """Attach ``bench service``."""
    del app
    bench_app.command("service", help=HELP)(bench_service)


@dataclass
class SizeResult:
    """Figures for one batch size."""

    trajectories: int
    workers: int
    requests: int
    p50_ms: float  # end to end, client side
    p95_ms: float
    requests_per_s: float  # sequential closed loop
    server_p50_ms: dict[str, float] = field(default_factory=dict)  # per stage, from the responses
    statuses: dict[str, int] = field(default_factory=dict)  # solver status -> count
    # the at-once hedge's verdict -> count: "kept"/"fastest" judged, "unjudged" out of budget,
    # "none" not asked
    at_once: dict[str, int] = field(default_factory=dict)
    model_versions: list[str] = field(default_factory=list)


def bench_service(
    url: Annotated[
        str | None,
        typer.Option(
            help="A running service; default: start one here. Its history and model are left as they "
            "are unless --seed-history."
        ),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(
            envvar=TOKEN_VARIABLE,
            help="Trainer token of that service (ps shows flags: prefer the variable).",
        ),
    ] = None,
    requests: Annotated[int, typer.Option(min=2, help="Measured requests per size.")] = 30,
    warmup: Annotated[int, typer.Option(min=0, help="Unmeasured requests per size first.")] = 3,
    policy: Annotated[str | None, typer.Option(help="Policy to request; default the service's.")] = None,
    prompt_chars: Annotated[int, typer.Option(min=0, help="Prompt text per prompt, characters.")] = 800,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    seed_history: Annotated[
        bool | None,
        typer.Option(
            "--seed-history/--no-seed-history",
            help="First send two steps of SYNTHETIC actuals (source=synthetic) for the benchmark's prompts "
            "and retrain, so LightGBM predicts as in production; default: yes on the service it starts, "
            "no with --url (the model retrained on them says synthetic in GET /models).",
        ),
    ] = None,
) -> None:
    """Run the benchmark and print a table (or JSON)."""
    from service.auth.tokens import check_token_flag
    from service.client import SchedulerAPIError, SchedulerClient, check_url

    try:
        check_token_flag("--token", token)  # before a service is started for it
        if url is not None:
            check_url(url)
    except ValueError as error:
        typer.echo(f"bench service: {error}", err=True)
        raise typer.Exit(2) from None
    try:
        with (
            _service(url) as base,
            SchedulerClient(base, token=token, timeout_s=120) as client,
            _progress(quiet=as_json) as advance,
        ):
            seeded = url is None if seed_history is None else seed_history
            if seeded:
                _say_seeded(url, _seed_history(client))
            results = [
                _measure(client, batch(n, w, 2, policy, prompt_chars), requests, warmup, advance)
                for n, w in SIZES
            ]
    except (SchedulerAPIError, OSError, RuntimeError) as error:
        typer.echo(f"bench service: {error}", err=True)
        raise typer.Exit(1) from None
    report = {
        "url": url or "embedded",
        "cores": os.cpu_count(),
        "prompt_chars": prompt_chars,
        "seeded_history": seeded,
        "sizes": [asdict(r) for r in results],
    }
    if as_json:
        typer.echo(json.dumps(report, indent=2))
    else:
        _print_table(results)


def batch(
    trajectories: int, workers: int, step: int, policy: str | None, prompt_chars: int = 0
) -> dict[str, Any]:
    """The ``POST /schedule`` body of one benchmark size (deterministic), each prompt with
    ``prompt_chars`` characters of text."""
    import numpy as np

    rng = np.random.default_rng(trajectories)
    prompts = trajectories // SAMPLES
    half = workers // 2
    body: dict[str, Any] = {
        "batch": {
            "items": [
                {
                    "prompt_id": f"bench{trajectories}-{i}",
                    "prompt_tokens": int(rng.integers(64, 1024)),
                    "n": SAMPLES,
                    "max_new_tokens": CAP,
                    **({"prompt": _text(i, prompt_chars)} if prompt_chars else {}),
                }
                for i in range(prompts)
            ]
        },
        "inventory": {
            "workers": [{"worker_id": f"{WORKER_PREFIX}h100-{j}", "device": "H100"} for j in range(half)]
            + [
                {"worker_id": f"{WORKER_PREFIX}910b-{j}", "device": "Ascend910B"}
                for j in range(workers - half)
            ]
        },
        "step": step,
    }
    if policy:
        body["policy"] = policy
    return body


def _text(index: int, chars: int) -> str:
    """``chars`` characters of word-like prompt text, different for every prompt."""
    words = f"problem {index}: let x be the least integer such that the sum of its digits is prime; "
    return (words * (chars // len(words) + 1))[:chars]


def _actuals(trajectories: int, steps: int) -> Iterator[dict[str, Any]]:
    """Heavy-tailed lengths per prompt (lognormal, median ~2k tokens), persistent across steps; each
    report labelled synthetic (``source=synthetic``), as ``trace push`` sends a synthetic trace's rows,
    so the history holds them as made up and a model fitted on them says so."""
    import numpy as np

    from scheduler.synth import SOURCE_COLUMN, SOURCE_VALUE

    rng = np.random.default_rng(trajectories + 1)
    template = batch(trajectories, 2, 0, None)["batch"]["items"]
    medians = np.exp(rng.normal(np.log(2000), 0.9, size=len(template)))
    for step in range(steps):
        for item, median in zip(template, medians, strict=True):
            lengths = np.minimum(CAP, np.maximum(1, median * np.exp(rng.normal(0, 0.35, SAMPLES))))
            for sample, length in enumerate(lengths.astype(int).tolist()):
                yield {
                    "step": step,
                    "prompt_id": item["prompt_id"],
                    "sample_idx": sample,
                    "worker_id": f"{WORKER_PREFIX}h100-0",
                    "prompt_tokens": item["prompt_tokens"],
                    "output_tokens": length,
                    "finish_reason": "length" if length >= CAP else "stop",
                    "wall_time_s": 1.0,
                    "max_new_tokens": CAP,
                    "features": {SOURCE_COLUMN: SOURCE_VALUE},
                }


def _seed_history(client: Any) -> tuple[int, str]:
    """Two earlier steps of synthetic actuals for every benchmark prompt, then a retrain (LightGBM
    serves); how many actuals were sent, and the version retrained."""
    sent = 0
    for trajectories, _ in SIZES:
        reports = list(_actuals(trajectories, steps=2))
        for start in range(0, len(reports), 4096):
            client.report_actuals(reports[start : start + 4096])
        sent += len(reports)
    return sent, client.retrain().version


def _say_seeded(url: str | None, seeded: tuple[int, str]) -> None:
    """On stderr, what a ``--seed-history`` run left in a running service: it outlives the bench."""
    if url is not None:
        sent, version = seeded
        typer.echo(
            f"bench service: sent {sent} SYNTHETIC actuals to {url}; retrained: predictor {version}, "
            "fitted on SYNTHETIC actuals",
            err=True,
        )


Advance = Callable[[str, int, int], None]  # (size label, requests done, requests in all)


@contextmanager
def _progress(quiet: bool) -> Iterator[Advance]:
    """A rich progress bar on stderr, hidden for --json or a non-terminal (a log gets no updates).

    Its own stderr console: rich's default is stdout, so ``bench service > out.txt`` showed no bar."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    console = Console(stderr=True)
    with Progress(*columns, console=console, disable=quiet or not sys.stderr.isatty(), transient=True) as bar:
        tasks: dict[str, TaskID] = {}

        def advance(label: str, done: int, total: int) -> None:
            if label not in tasks:
                tasks[label] = bar.add_task(label, total=total)
            bar.update(tasks[label], completed=done)

        yield advance


def _measure(client: Any, body: dict[str, Any], count: int, warmup: int, advance: Advance) -> SizeResult:
    trajectories = sum(item["n"] for item in body["batch"]["items"])
    workers = len(body["inventory"]["workers"])
    latencies: list[float] = []
    stages: dict[str, list[float]] = {}
    statuses: Counter[str] = Counter()
    at_once: Counter[str] = Counter()
    published: list[str] = []
    versions: set[str] = set()
    started = time.perf_counter()
    for index in range(warmup + count):
        if index == warmup:
            started = time.perf_counter()
        t0 = time.perf_counter()
        answer = client.schedule(body)
        elapsed = (time.perf_counter() - t0) * 1000.0
        if answer.published:
            published.append(answer.schedule_id)
        if index < warmup:
            continue
        latencies.append(elapsed)
        statuses[answer.status] += 1
        at_once[answer.at_once_hedge or "none"] += 1
        versions.add(answer.model_version)
        for name, value in answer.timings.model_dump().items():
            stages.setdefault(name, []).append(value)
        advance(f"{trajectories} x {workers}", index - warmup + 1, count)
    wall = time.perf_counter() - started
    for schedule_id in published:  # after the clock stops: nothing is left queued for retention's 24 h
        client.cancel(schedule_id)
    return SizeResult(
        trajectories=trajectories,
        workers=workers,
        requests=count,
        p50_ms=round(statistics.median(latencies), 1),
        p95_ms=round(_percentile(latencies, 0.95), 1),
        requests_per_s=round(count / wall, 2),
        server_p50_ms={k: round(statistics.median(v), 1) for k, v in stages.items()},
        statuses=dict(statuses),
        at_once=dict(at_once),
        model_versions=sorted(versions),
    )


def _percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile: the smallest value with at least ``q`` of the sample at or below it."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


@contextmanager
def _service(url: str | None) -> Iterator[str]:
    """``url``, or a fresh ``serve`` subprocess (embedded Redis, empty model store) for the duration."""
    if url:
        yield url
        return
    from service.ports import free_port

    port = free_port()
    with tempfile.TemporaryDirectory(prefix="bench-service-") as models:
        env = {k: v for k, v in os.environ.items() if k != "REDIS_URL" and not k.startswith("ROLLOUT_")}
        env["ROLLOUT_MODEL_DIR"] = models
        env["ROLLOUT_LOG_LEVEL"] = "WARNING"
        command = [sys.executable, "-c", "from service.cli import main; main()", "serve", "--port", str(port)]
        proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            base = f"http://127.0.0.1:{port}"
            _wait_ready(base, proc)
            yield base
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()


def _wait_ready(base: str, proc: subprocess.Popen[bytes], timeout_s: float = 60.0) -> None:
    """Return once ``proc``'s ``serve`` answers ``/readyz`` 200; raise if it exits or ``timeout_s`` passes.

    One client for every poll: ``httpx.get`` builds a client a call, whose SSL context loads the CA
    bundle (~34 ms of CPU even for ``http://``: tests.service.polling), ten times a second for the
    seconds ``serve`` takes to start, on the host the benchmark then measures (edges59)."""
    import httpx

    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=1) as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                err = proc.stderr.read().decode()[-2000:] if proc.stderr else ""
                raise RuntimeError(f"serve exited with {proc.returncode}: {err}")
            try:
                if client.get(f"{base}/readyz").status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
    raise RuntimeError(f"serve did not become ready within {timeout_s}s")


def _print_table(results: list[SizeResult]) -> None:
    from rich.console import Console
    from rich.table import Table

    from service.bench.sections import judged_count

    table = Table(title="POST /schedule end to end (client side; sequential requests)")
    columns = ("batch", "p50 ms", "p95 ms", "req/s", "server p50: predict / plan / baseline / publish")
    for column in (*columns, "at-once hedge judged"):
        table.add_column(column)
    for r in results:
        s = r.server_p50_ms
        stages = f"{s['predict_ms']} / {s['plan_ms']} / {s['baseline_ms']} / {s['publish_ms']}"
        row = (f"{r.trajectories} x {r.workers}", str(r.p50_ms), str(r.p95_ms), str(r.requests_per_s), stages)
        table.add_row(*row, judged_count(r.at_once))
    Console().print(table)
