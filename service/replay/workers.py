"""Where a replayed step's time went, worker by worker: the plan's promise against what the step did.

A replay's summary says how far a policy landed from the lower bound; this says why. For each
worker of one policy's plan it puts the finish the planner predicted next to the simulated one, and
beside them the two things that explain the gap on KV-bound long chain-of-thought steps:

- ``area_ratio``: the KV-token-steps (``p*L + L^2/2``) of what the worker ran, true over planned.
  KV-bound workers take time in proportion to this area, so a worker whose trajectories ran longer
  than predicted finishes late by about as much; per-sample length errors do not average out per
  worker because the area weighs long trajectories quadratically.
- ``last_start_s``: when the worker admitted its last trajectory. After that it holds nothing a
  thief could take, so work stealing cannot correct a worker that runs late only after it.

``kv_use`` is the mean share of the worker's KV cache in use until it finished (the KV its running
sequences held, integrated over the play, as ``service.replay.harness.kv_use``): what the bound
assumes is 1.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

from scheduler.costmodel import worker_cost
from scheduler.errors import InvalidInputError
from scheduler.simulator import ItemRecord
from scheduler.types import Inventory, Trajectory
from service.replay.harness import ORACLE, StepReplay


@dataclass(frozen=True, slots=True)
class WorkerRow:
    """One worker of one policy's plan in one replayed step."""

    step: int  # the replayed step
    worker_id: str
    trajectories: int  # how many it ran to completion (stolen ones included)
    planned_finish_s: float  # the planner's predicted finish of its queue
    simulated_finish_s: float  # when its last trajectory ended in the simulator (0: it ran none)
    area_ratio: float  # true over planned KV-token-steps of what it ran (1.0 when it ran none)
    kv_use: float  # mean share of its KV cache in use until its finish
    last_start_s: float  # first admission of the last trajectory it admitted


def worker_rows(step: StepReplay, policy: str, steal: bool, inventory: Inventory) -> list[WorkerRow]:
    """The per-worker breakdown of ``policy``'s run of ``step`` (stealing mode ``steal``).

    Raises ``InvalidInputError`` naming the policy when the step holds no such run.
    """
    run = step.runs.get((policy, steal))
    if run is None:
        known = sorted({name for name, _ in step.runs})
        raise InvalidInputError("per_worker", policy, f"not a replayed policy; replayed: {', '.join(known)}")
    planned = _planned_lengths(step.batch, run.result.items, oracle=policy == ORACLE)
    ran: dict[str, list[ItemRecord]] = defaultdict(list)
    for item in run.result.items:
        ran[item.worker_id].append(item)
    finish = {w.worker_id: w.predicted_finish_s for w in run.plan.workers}
    return [
        _row(step.step, worker.worker_id, ran[worker.worker_id], planned, finish.get(worker.worker_id, 0.0),
             run.result.worker_finish_s.get(worker.worker_id, 0.0),
             run.result.worker_kv_token_s.get(worker.worker_id, 0.0),
             worker_cost(worker, inventory.model).kv_capacity_tokens)
        for worker in inventory.workers
    ]  # fmt: skip


def as_json(rows: Sequence[WorkerRow]) -> list[dict[str, object]]:
    """The rows as plain objects for ``--json``."""
    return [asdict(r) for r in rows]


def _planned_lengths(
    batch: Sequence[Trajectory], items: Sequence[ItemRecord], oracle: bool
) -> Mapping[str, tuple[int, float]]:
    """key -> (prompt tokens, planned length): the predictions, or the true lengths for the oracle."""
    lengths = {t.key: (t.prompt_tokens, t.predicted_tokens) for t in batch}
    if oracle:
        lengths = {i.key: (lengths[i.key][0], float(i.output_tokens)) for i in items}
    return lengths


def _row(
    step: int,
    worker_id: str,
    items: Sequence[ItemRecord],
    planned: Mapping[str, tuple[int, float]],
    planned_finish_s: float,
    simulated_finish_s: float,
    held: float,
    capacity: int,
) -> WorkerRow:
    true_area = sum(_area(planned[i.key][0], i.output_tokens) for i in items)
    plan_area = sum(_area(*planned[i.key]) for i in items)
    return WorkerRow(
        step=step,
        worker_id=worker_id,
        trajectories=len(items),
        planned_finish_s=planned_finish_s,
        simulated_finish_s=simulated_finish_s,
        area_ratio=true_area / plan_area if plan_area > 0 else 1.0,
        kv_use=held / (capacity * simulated_finish_s) if simulated_finish_s > 0 else 0.0,
        last_start_s=max((i.start_s for i in items), default=0.0),
    )


def _area(prompt: float, length: float) -> float:
    """KV-token-steps of one trajectory: it holds ``prompt + k`` tokens at its ``k``-th step."""
    return prompt * length + length * length / 2.0
