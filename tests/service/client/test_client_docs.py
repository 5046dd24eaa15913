"""docs/client.md's veRL-style loop runs as written: its code block is executed against a real
service and Redis, the sidecars played by the delivery protocol, for two steps of a training run,
one sample of the first dead-lettered. Nothing else ran it: a renamed field or method left in the
doc made a reader's copy fail, and the loop handed a dead-lettered sample's None to the actor."""

from __future__ import annotations

import asyncio
import re
import threading
from pathlib import Path
from typing import Any

import pytest
import redis

from service.client import SchedulerClient, StepResults
from service.delivery import Delivery, TrajectoryResult
from service.settings import Settings
from tests.service.api_helpers import TRAINER, WORKER, LiveServer, batch_body, with_settings

CLIENT_DOC = Path(__file__).resolve().parents[3] / "docs" / "client.md"
DOC_URL = "http://scheduler:8000"
STEPS, PROMPTS = 2, 3
DEAD = "s0-p1#3"  # the engine fails it; one attempt allowed, so it is dead-lettered
BLOCKED_AFTER_S = 30.0  # a liveness cap, no speed claim: only a loop blocked by a wait reaches it


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", CLIENT_DOC.read_text(), re.DOTALL)


def _play_sidecars(
    delivery: Delivery,
    schedule_ids: list[str],
    workers: list[str],
    stop: threading.Event,
    handed: dict[str, Any] | None = None,
) -> None:
    """Claims and completes every item of each step as it is published, whichever worker holds it;
    ``handed`` gets each item's engine prompt by key."""
    pending = list(schedule_ids)
    while pending and not stop.is_set():
        sid = pending[0]
        if not delivery.client.exists(delivery.keys(sid).meta):
            stop.wait(0.05)
            continue
        claimed = False
        for worker in workers:
            for lease in delivery.claim(sid, worker, max_items=64):
                claimed = True
                if handed is not None:
                    handed[lease.item.key] = lease.item.payload.get("prompt")
                if lease.item.key == DEAD:
                    delivery.fail(lease, "engine error: CUDA out of memory")
                    continue
                result = TrajectoryResult(
                    output_tokens=50 + lease.item.sample_idx, output="résumé ✓", wall_time_s=0.1
                )
                delivery.complete(lease, result)
        if not claimed and delivery.progress(sid).finished:
            pending.pop(0)
        elif not claimed:
            stop.wait(0.02)


def _prompt_ids(p: int) -> list[int]:
    """Prompt ``p``'s ids as a veRL dataset row holds them: a chat template around a question."""
    return [151644, 872, 198, *range(1000 + p, 1020 + 2 * p), 151645, 198, 151644, 77091, 198]


class _Actor:
    def __init__(self) -> None:
        self.updates: list[list[list[Any]]] = []

    def update(
        self, prompts: list[dict[str, Any]], groups: list[list[Any]], rewards: dict[str, float]
    ) -> None:
        self.updates.append(groups)


def test_the_verl_loop_of_the_client_doc_trains_two_steps_as_written(
    live_settings: Settings, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop = _python_blocks()[0]
    settings = with_settings(live_settings, trainer_tokens=TRAINER, worker_tokens=WORKER, max_attempts=1)
    monkeypatch.setenv("SCHEDULER_TOKEN", TRAINER)
    monkeypatch.setenv("RUN_ID", "docs-run")
    with LiveServer(settings) as server:
        assert DOC_URL in loop
        namespace: dict[str, Any] = {"__name__": "client_doc"}
        exec(compile(loop.replace(DOC_URL, server.url), str(CLIENT_DOC), "exec"), namespace)
        workers = [w["worker_id"] for w in namespace["INVENTORY"]["workers"]]
        group = namespace["GROUP"]
        dataloader = [
            [{"uid": f"s{s}-p{p}", "raw_prompt_ids": _prompt_ids(p)} for p in range(PROMPTS)]
            for s in range(STEPS)
        ]
        stop = threading.Event()
        ids = [f"docs-run-step-{s}" for s in range(STEPS)]
        handed: dict[str, Any] = {}
        play = (Delivery(redis_client), ids, workers, stop, handed)
        sidecars = threading.Thread(target=_play_sidecars, args=play)
        sidecars.start()
        actor = _Actor()
        try:
            namespace["train"](dataloader, lambda prompt, output: float(len(output)), actor)
        finally:
            stop.set()
            sidecars.join()
    assert [len(groups) for groups in actor.updates] == [PROMPTS - 1, PROMPTS]  # p1's group left out
    assert all(len(samples) == group for groups in actor.updates for samples in groups)
    assert all(
        r is not None and r.output == "résumé ✓" for groups in actor.updates for s in groups for r in s
    )
    assert redis_client.xlen("rs:actuals") == STEPS * PROMPTS * group - 1  # every result reported, DEAD none
    assert {key: ids for key, ids in handed.items() if key.endswith("#0")} == {  # the rows' own ids
        f"s{s}-p{p}#0": _prompt_ids(p) for s in range(STEPS) for p in range(PROMPTS)
    }


class _NotingWaits(SchedulerClient):
    """The client, noting each step a ``wait`` has begun on, from whichever thread calls it."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.waiting: set[str] = set()

    def wait(
        self, schedule_id: str, timeout_s: float | None = None, poll_ms: int = 1000, outage_s: float = 60.0
    ) -> StepResults:
        self.waiting.add(schedule_id)
        return super().wait(schedule_id, timeout_s, poll_ms, outage_s)


def _once_free(free: threading.Event, seen: list[bool], *play: Any) -> None:
    """The sidecars, holding every item back until the loop has run with both waits begun (or
    BLOCKED_AFTER_S has passed: a blocked loop never gets there, its wait needing these items)."""
    seen.append(free.wait(BLOCKED_AFTER_S))
    _play_sidecars(*play)


def test_the_asyncio_example_follows_two_steps_at_once_on_one_client_without_blocking_the_loop(
    live_settings: Settings, redis_client: redis.Redis
) -> None:
    """The doc's answer to an asyncio trainer: the sync client on worker threads, one shared. The
    loop must run on while both steps are waited on: a coroutine sees both waits begun, and only then
    are the steps' items run. A ``wait`` on the loop's own thread blocks it at the first, whose items
    are held back until then, so the coroutine never sees the second (no count of ticks against the
    clock, which a starved CPU failed: 22 loop ticks in half a second, where 25 were asked)."""
    (block,) = [b for b in _python_blocks() if "asyncio.to_thread" in b]
    namespace: dict[str, Any] = {"__name__": "client_doc_async"}
    exec(compile(block, str(CLIENT_DOC), "exec"), namespace)
    bodies = [batch_body(prompts=2, n=3, workers=2, schedule_id=f"async-step-{s}") for s in range(2)]
    ids = [body["schedule_id"] for body in bodies]
    free = threading.Event()  # set from the loop, once it ran with both waits begun

    async def watching(client: _NotingWaits) -> None:
        while client.waiting != set(ids):
            await asyncio.sleep(0.01)
        free.set()

    async def two_steps(client: _NotingWaits) -> list[Any]:
        watcher = asyncio.create_task(watching(client))
        steps = await asyncio.gather(*(namespace["rollout_async"](client, body) for body in bodies))
        watcher.cancel()
        return list(steps)

    stop, seen = threading.Event(), list[bool]()
    with LiveServer(live_settings) as server:
        client = _NotingWaits(server.url)
        play = (Delivery(redis_client), ids, ["w0", "w1"], stop)
        sidecars = threading.Thread(target=_once_free, args=(free, seen, *play))
        sidecars.start()
        try:
            with client:
                steps = asyncio.run(two_steps(client))
        finally:
            stop.set()
            sidecars.join()
    assert seen == [True], "the loop did not run while both steps were waited on: it was blocked"
    assert [step.progress.schedule_id for step in steps] == ids
    assert [sorted(r.key for r in step.results) for step in steps] == [
        [f"p{p}#{s}" for p in range(2) for s in range(3)]
    ] * 2
