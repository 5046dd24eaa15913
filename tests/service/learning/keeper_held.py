"""The step keeper's cluster tests' shared setup: entries and marks written short and held, and how long
one has left on Redis's clock."""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

from service.context import Context
from service.delivery import Delivery, keys
from service.pipeline.step_keeper import Entry, InFlight, Kept, StepKeeper
from service.redis_conn import RedisClient

SHORT_MS = 10_000  # entries and marks written for this long; the keeper pushes them to 60 s


def held_short(delivery: Delivery, keeper: StepKeeper, steps: list[int], marks: list[str]) -> list[Kept]:
    """Each of ``steps`` with an entry and each of ``marks`` marked for request ``r``, written for
    ``SHORT_MS`` and held: all due at the next tick."""
    ctx = cast(Context, SimpleNamespace(delivery=delivery))
    kept: list[Kept] = []
    for step in steps:
        delivery.enter_planning(step, "r", SHORT_MS)
        kept.append(Entry(step, "r"))
    for schedule_id in marks:
        delivery.mark_planning(schedule_id, "r", SHORT_MS)
        kept.append(InFlight(schedule_id, "r"))
    for each in kept:
        keeper.hold(ctx, each, life_s=0.0)
    return kept


def left_ms(client: RedisClient, kept: Kept) -> float:
    """How long ``kept`` has left on Redis's clock."""
    seconds, micros = client.time()
    if isinstance(kept, Entry):
        deadline = float(client.zscore(keys.step_planning(kept.step), kept.member) or 0)
    else:
        entry = client.hget(keys.schedule_keys(kept.schedule_id).planning, kept.request_id)
        deadline = 0.0 if entry is None else float(str(entry).split(":")[1])
    return deadline - (seconds * 1000 + micros // 1000)
