"""A push sidecar with more free slots than one claim leases holds what the simulator's engine claims
from its own queue at once, in the same order: the parity ``WorkerEngine.admit_own`` relies on.

Delivery leases at most ``keys.MAX_BATCH`` (1,000: Lua's ``unpack`` limit) a call; ``admit_own`` moves
``min(free slots, queue)`` in one step, with no per-call bound (a steal has one, ``sim_steal.STEAL_MOST``:
each call there chooses its victim anew, so a bound changes which items go). The two agree because the
sidecar's turn (``runner.Sidecar._fill``) claims again at once while a slot is free and nothing waits,
and steals only after a claim of its own queue leased nothing (``claims.Claims._take_once``): the same
head items, in order, before any steal. Checked in round 64 (edges64) rather than assumed: a sidecar that
claimed once a poll would hold 1,000 here where the simulator holds 1,200, so the bound would then have
to be the simulator's too. Real Redis; the engine is left out (the items are marked started where the
sidecar would send them), the one thing not under test."""

from __future__ import annotations

import asyncio

import pytest
import redis

from scheduler.costmodel import WorkerCost
from scheduler.sim_engine import WorkerEngine
from scheduler.sim_ledger import Ledger
from service.delivery.keys import MAX_BATCH
from service.delivery.protocol import Delivery
from tests.service.sidecar.procs import item, publish
from tests.service.sidecar.push_runner import push_sidecar

SLOTS = MAX_BATCH + 200  # a worker of 1,200 sequences: ``--workers 8xH100:1200``
QUEUED = SLOTS + 300  # more than it has room for: its turn ends on its slots, not on the queue


def _simulated(queued: int, slots: int) -> list[int]:
    """The items the simulator's engine takes from its own queue of ``queued`` in one ``admit_own``,
    in order (none waits on KV: the cache holds them all)."""
    ledger = Ledger([f"p{i}" for i in range(queued)], [100] * queued, [10] * queued, [10] * queued)
    cost = WorkerCost("w0", 1e-3, 1e-7, 1e-5, 1e-9, 1e-4, 1.0, 1e-6, 10**9, slots)
    engine = WorkerEngine(0, cost, ledger, watermark=0.01, kv_admission=False)
    engine.enqueue(list(range(queued)))
    engine.admit_own()
    tokens = {i: token for i, (token, _, _) in engine.alive.items()}
    return sorted(tokens, key=tokens.__getitem__) + list(engine.waiting)


def test_a_sidecar_with_more_free_slots_than_one_claim_leases_claims_what_the_simulator_does(
    redis_client: redis.Redis, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    delivery = Delivery.from_url(redis_url)
    publish(delivery, "many", {"w0": [item(f"p{i}", 0, 10) for i in range(QUEUED)]}, lease_ttl_ms=60_000)
    sidecar = push_sidecar(redis_url, "http://127.0.0.1:9", slots=SLOTS)
    session, holdings = sidecar.session, sidecar.session.holdings
    claims: list[int] = []
    claim = session.claim

    async def counted(want: int) -> list[object]:
        got = await claim(want)
        claims.append(len(got))
        return list(got)

    monkeypatch.setattr(session, "claim", counted)
    monkeypatch.setattr(sidecar, "_start_waiting", holdings.start_fitting)  # started: no engine call
    sidecar._engine_down = False  # its probe answered

    async def one_turn() -> None:
        try:
            await sidecar._fill(asyncio.Event())
        finally:
            await sidecar.engine.aclose()

    asyncio.run(one_turn())
    held = [int(lease.item.prompt_id[1:]) for lease in holdings.leases()]
    assert claims == [MAX_BATCH, SLOTS - MAX_BATCH]  # two calls in one turn: none of it a steal
    assert held == _simulated(QUEUED, SLOTS) == list(range(SLOTS))
    assert delivery.progress("many").queued == QUEUED - SLOTS
