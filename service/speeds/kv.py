"""How much longer a worker's own KV cache made a batch of its reports take (``kv_slowdown``).

Why. A speed sample is a report's measured seconds over ``modelled_seconds``, which prices the
report as if every sequence the sidecar kept in flight ran in the batch. On a cache too small for
them (engine-sim ``--kv-capacity-tokens 12000`` at 16 slots with some 6,000-token prompts) most
wait inside the engine, inside their reports' wall time, and the engine preempts and recomputes
(648 recomputes in 254 requests in a live walk, 2026-12-04): the learner read that as slowness
(1.3-1.5x live, 2-3x in-process), and the planner, whose simulator plays the same cache, charged
it again, so the worker got less work than it should. The sample must be measured over what the
planner's own worker model says the batch takes on that cache, not on an unbounded one.

How. The planner's simulator (``scheduler.simulator.simulate_worker``) plays the batch's reported
lengths as one queue twice at ``time_scale = 1``: on the worker's cache and on one they never fill,
with as many slots as the batch kept in flight (the most any report saw: a step's tail sees fewer).
The reports' wall times sum the seconds each item was in flight; in a play, with the queue full, that
is ``min(slots, items left)`` in flight between completions (Little's law), so each play's sum follows
from its completion times. Their ratio is the slowdown; 1.0, without a play, when the batch cannot
fill the cache (every plan then reads as before). Not for a step whose sidecars admitted by projected
KV peak (``kv_admission``): nothing of it waited in the engine (``speed_model.batch_log_ratio``).

By which rules. The engine the step's plan was made for (``P:meta`` ``engine``, ``keys.ENGINE``;
``scheduler.sim_rules``): under V0's an evicted sequence restarts from nothing, under V1's (vLLM
0.11+, SGLang) it keeps its output and re-prefills prompt plus output, which costs a starved cache
far less. Played by V0's rules, a V1 step's cost was overstated and the worker learned faster than
it is (docs/experiments.md, "Learned speeds", helper engineleft).

Which items ran side by side decides the preemptions, and a report does not say when it was sent: the
queue is played in the order reported, the order a step's results were accepted in, i.e. they ended
(``report_results`` sends them so). On twelve 40-item steps (in-process, 2026-12-04) the true send
order, which the service cannot know, read 0.99-1.08x the true scale, report order 1.00-1.30x, and an
order estimated from the wall times (each report's end about its predecessors' walls over the slots)
0.61-1.01x: it put long prompts together that had not run together.

Why not the reports. Neither vLLM nor SGLang answers how often a request was preempted (vLLM counts
it per request only in a Prometheus histogram, ``vllm:request_num_preemptions``), and preemption is
half of it: a starved engine runs fewer sequences than are in flight, a throughput the reports'
concurrency does not show.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence

from scheduler.costmodel import worker_cost
from scheduler.devices import ModelPreset
from scheduler.errors import InvalidInputError
from scheduler.sim_rules import EngineRules
from scheduler.simulator import simulate_worker
from scheduler.types import Trajectory, Worker
from service.api.learning_schemas import ActualReport

_log = logging.getLogger("service.speeds")


def kv_slowdown(
    worker: Worker, model: ModelPreset, batch: Sequence[ActualReport], rules: EngineRules
) -> float:
    """In-flight seconds of ``batch`` (its reports' own wall times, concurrency and lengths) on
    ``worker``'s KV cache over those on an unbounded one, both as the planner's simulator plays
    them by ``rules`` (the engine's that ran the batch); at least 1.0 (a cache cannot speed a batch
    up: less in a play is the order's noise). No default ``rules``: the library's default engine is
    V0, the service's V1 (``SERVICE_ENGINE``), and V0's rules taken for V1's were the 0.78x misread."""
    slots = max(1, min(round(max(_concurrency(r) for r in batch)), worker.max_num_seqs))
    capacity = worker_cost(worker, model).kv_capacity_tokens
    longest = max(r.prompt_tokens + r.output_tokens for r in batch)
    if slots * (longest + 1) <= capacity * (1.0 - rules.watermark):
        return 1.0  # the cache holds the batch's largest items in every slot: never starved
    if longest >= capacity:
        return _unmodelled(batch, f"a report of {longest} tokens exceeds its KV capacity {capacity}")
    played = dataclasses.replace(worker, time_scale=1.0, max_num_seqs=slots)
    unbounded = 2 * sum(r.prompt_tokens + r.output_tokens + 1 for r in batch)  # more than all at once
    try:
        starved_s = _in_flight_seconds(played, model, batch, rules)
        free_s = _in_flight_seconds(
            dataclasses.replace(played, kv_capacity_tokens=unbounded), model, batch, rules
        )
    except InvalidInputError as error:  # the reports are stored already: never fail their request
        return _unmodelled(batch, str(error))
    return max(1.0, starved_s / free_s) if free_s > 0 else 1.0


def _unmodelled(batch: Sequence[ActualReport], why: str) -> float:
    """1.0, with a warning: a batch the simulator cannot play on the worker's profile says the profile
    is wrong (``kv_capacity_tokens`` below the engine's), and its speed is learned as if never starved."""
    _log.warning("worker %s: %s; its speed is learned without the cache's cost", batch[0].worker_id, why)
    return 1.0


def _in_flight_seconds(
    worker: Worker, model: ModelPreset, order: Sequence[ActualReport], rules: EngineRules
) -> float:
    """Sum over ``order``'s items of their seconds in flight as the planner's simulator plays them,
    one queue on ``worker`` (its slots: those the batch kept in flight), from the completion times
    alone: with the queue full the sidecar keeps every slot in flight, then the items left (Little's
    law), as the reports' wall times sum them."""
    items = [
        Trajectory(f"r{i}", 0, r.prompt_tokens, max(1, r.output_tokens), r.output_tokens)
        for i, r in enumerate(order)
    ]
    lengths = [r.output_tokens for r in order]
    run = simulate_worker(
        worker,
        model,
        items,
        actual_tokens=lengths,
        watermark=rules.watermark,
        resume_preempted=rules.resume_preempted,
    )
    ends = sorted(run.ends_s)
    total, previous, left = 0.0, 0.0, len(ends)
    for end in ends:
        total += (end - previous) * min(worker.max_num_seqs, left)
        previous, left = end, left - 1
    return total


def _concurrency(report: ActualReport) -> float:
    assert report.concurrency is not None  # SpeedLearner.observe keeps only reports that measured it
    return report.concurrency
