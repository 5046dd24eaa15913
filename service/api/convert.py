"""Turn validated request bodies into the core's frozen dataclasses, checking the cross-item rules.

pydantic checks each field on its own; what needs the whole body (unique ids, known device kinds and
presets) is checked here, raising ``InvalidInputError`` with the JSON path of the culprit, so the
answer is the same 422 problem shape. The planner's own rules that need no predicted lengths are
checked here too, by its own function (``check_plan_rules``), on a request that may be a retry and on
one refused for the moment (``broken_rule``). (The trajectory count is ``service.limits``': a 413.)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from scheduler import giveup
from scheduler.costmodel import worker_cost
from scheduler.devices import ModelPreset, device_profile, model_preset
from scheduler.errors import DeadlinePassedError, InvalidInputError, UnknownNameError
from scheduler.policies import POLICY_NAMES
from scheduler.sim_rules import engine_rules
from scheduler.types import Inventory, PlanRequest, Trajectory, Worker
from scheduler.validation import validate_request
from service.api.schemas import MAX_TIME_SCALE, MIN_TIME_SCALE, BatchItem, ScheduleRequest, WorkerSpec
from service.limits import check_trajectory_count
from service.settings import Settings

# Context (tokens) at which a measured ``decode_tokens_per_s`` is compared with the cost model.
REFERENCE_CONTEXT_TOKENS = 1024.0


def check_unique_prompts(items: list[BatchItem]) -> None:
    """Every ``prompt_id`` once: samples of one prompt are asked for with ``n``, not by repeating it."""
    first: dict[str, int] = {}
    for index, item in enumerate(items):
        seen = first.setdefault(item.prompt_id, index)
        if seen != index:
            raise InvalidInputError(
                f"batch.items[{index}].prompt_id",
                item.prompt_id,
                f"duplicate prompt_id (first at batch.items[{seen}]); ask for more samples with n",
            )


def named_rules(body: ScheduleRequest, settings: Settings) -> tuple[str, str]:
    """The body's rules that read nothing stored (its size: a 413, unique prompts, a known policy and
    engine), checked first by ``stages.validate``; the policy and the engine it is planned with."""
    check_trajectory_count(sum(item.n for item in body.batch.items), settings.max_trajectories)
    check_unique_prompts(body.batch.items)
    policy = body.policy or settings.default_policy
    if policy not in POLICY_NAMES:
        raise UnknownNameError("policy", policy, list(POLICY_NAMES))
    engine = body.engine or settings.default_engine
    engine_rules(engine)  # an unknown engine is refused naming ``engine`` and the known ones
    return policy, engine


def check_unread(body: ScheduleRequest, settings: Settings) -> None:
    """Refuse ``body`` for what is wrong with it (422, 413), by every rule that reads nothing stored:
    a request refused before its planning thread read it (its deadline passed in line for one) is
    refused for its body first, as one refused on the thread is (``broken_rule``)."""
    named_rules(body, settings)
    broken = broken_rule(body, settings)
    if broken is not None:
        raise broken


def time_budget_s(body: ScheduleRequest, settings: Settings) -> float:
    """The plan's time budget the request asks for, in seconds: its own, else the service's default
    (before the caller's deadline caps it: ``Deadline.budget_s``). One rule for the validate stage, the
    in-flight mark's life and a refusal's rule check, so that each reads the budget the plan gets."""
    return (body.time_budget_ms or settings.default_time_budget_ms) / 1000.0


def resolve_model(name: str | None, default: str) -> ModelPreset:
    """The model preset the request names, or the configured default."""
    try:
        return model_preset(name or default)
    except UnknownNameError as error:
        raise UnknownNameError("model", str(error.value), error.known) from None


def build_inventory(
    body: ScheduleRequest, model: ModelPreset, learned: Mapping[str, tuple[float, str]]
) -> tuple[Inventory, frozenset[str], dict[str, str]]:
    """Workers with overrides applied; returns the inventory, drained ids, and each time scale's source.

    A worker's step-time multiplier comes from, in order: the request's ``time_scale``, its measured
    ``decode_tokens_per_s``, the speed learned from earlier actuals (``learned``: its own, its
    group's, its measured peers' or the fleet's), else 1.0.
    """
    workers: list[Worker] = []
    sources: dict[str, str] = {}
    seen: dict[str, int] = {}
    for index, spec in enumerate(body.inventory.workers):
        path = f"inventory.workers[{index}]"
        first = seen.setdefault(spec.worker_id, index)
        if first != index:
            raise InvalidInputError(
                f"{path}.worker_id",
                spec.worker_id,
                f"duplicate worker_id (first at inventory.workers[{first}])",
            )
        worker, source = _worker(spec, path, model, learned)
        workers.append(worker)
        sources[spec.worker_id] = source
    drained = frozenset(s.worker_id for s in body.inventory.workers if s.drain)
    if len(drained) == len(workers):
        raise InvalidInputError(
            "inventory.workers", len(workers), "every worker is drained (drain: true); one must take the work"
        )
    return Inventory(workers=tuple(workers), model=model), drained, sources


def check_plan_rules(
    body: ScheduleRequest, inventory: Inventory, drained: frozenset[str], time_budget_s: float, engine: str
) -> None:
    """The planner's own rules that need no predicted lengths (a pin to a worker the inventory lacks
    or drains, a cap no allowed cache holds, pins under ``prefix_affinity``), by its own check
    (``validate_request``), so that a retry under a published ``schedule_id`` hears the 422 naming
    the field before the republish check (``republish.replay``) announces the stored step again and
    answers its first plan.

    One trajectory per prompt, at its cap: a prompt's samples share every field these rules read,
    so they hold for all of them, and 4,096 samples cost no more than their prompts."""
    items = body.batch.items
    probes = tuple(
        Trajectory(
            prompt_id=item.prompt_id,
            sample_idx=0,
            prompt_tokens=item.prompt_tokens,
            max_new_tokens=item.max_new_tokens,
            predicted_tokens=float(item.max_new_tokens),  # any length within the cap passes
            pinned_worker=item.pinned_worker,
        )
        for item in items
    )
    plan_request = PlanRequest(
        trajectories=probes,
        inventory=inventory,
        time_budget_s=time_budget_s,
        prefix_affinity=body.prefix_affinity,
        kv_admission=body.kv_admission,
        excluded_workers=drained,
        seed=body.seed,
        engine=engine,  # the request's, else the service's default (``stages.validate``)
    )
    try:
        validate_request(plan_request)
    except InvalidInputError as error:
        raise repoint(error, tuple(range(len(items)))) from None


def broken_rule(body: ScheduleRequest, settings: Settings) -> InvalidInputError | None:
    """The planner's refusal of ``body`` by its rules that need no speed and no lengths (a pin to a
    worker the inventory lacks or drains, a cap no allowed worker's cache holds: ``check_plan_rules``),
    on the inventory as the profiles and the body's stated speeds make it; None when it breaks none.

    Asked only of a request refused for the moment (``stages.REFUSED_FOR_NOW``): a request with no
    chosen id meets those rules only when it plans, after the speed read and the predictions, which read
    Redis, and after the plan queue and the deadline, so with Redis down a body pinned to a missing
    worker was a 503, and a retry after the outage its 422. Checked up front instead, every such request
    would pay ~1.7 ms at 1,024 prompts and ~9.5 ms at 4,096 for rules its plan checks again; here only
    a refusal pays. Every rule ``stages.validate`` checks before the speed read has passed by then.

    None, unchecked, for a plan given up (this context's hard deadline passed: its replica stopped,
    ``stopping.planner_stops``): nobody reads its answer, and ``validate_request`` checks that deadline
    too, so it would raise a give-up of its own, naming its own stage in the stop's log line instead of
    the stage the planner gave up in (docs/experiments.md, stagename48)."""
    if _given_up():
        return None
    model = resolve_model(body.model, settings.default_model)
    inventory, drained, _ = build_inventory(body, model, {})
    budget_s, engine = time_budget_s(body, settings), body.engine or settings.default_engine
    try:
        check_plan_rules(body, inventory, drained, budget_s, engine)
    except InvalidInputError as error:
        return error
    return None


def _given_up() -> bool:
    """Whether this context's hard deadline (``scheduler.giveup``) has passed: the plan is given up."""
    try:
        giveup.check()
    except DeadlinePassedError:
        return True
    return False


def repoint(error: InvalidInputError, item_of: tuple[int, ...]) -> InvalidInputError:
    """``trajectories[7].max_new_tokens`` -> ``batch.items[1].max_new_tokens`` (what the client sent);
    ``item_of`` maps each trajectory's position to its batch item."""
    prefix = "trajectories["
    if not error.field.startswith(prefix):
        return error
    index_text, _, rest = error.field[len(prefix) :].partition("]")
    if not index_text.isdigit() or int(index_text) >= len(item_of):
        return error
    return InvalidInputError(f"batch.items[{item_of[int(index_text)]}]{rest}", error.value, error.reason)


def _worker(
    spec: WorkerSpec, path: str, model: ModelPreset, learned: Mapping[str, tuple[float, str]]
) -> tuple[Worker, str]:
    """One worker of ``build_inventory`` (its device profile with the request's overrides) and where
    its time scale came from: ``request``, ``measured``, a ``learned*`` source, else ``profile``
    (``ScheduleResponse.time_scale_sources``). Errors name the field at ``path``."""
    try:
        profile = device_profile(spec.device)
    except UnknownNameError as error:
        raise UnknownNameError(f"{path}.device", spec.device, error.known) from None
    overrides = {
        name: getattr(spec, name)
        for name in ("hbm_bandwidth_gbs", "peak_tflops", "memory_gib")
        if getattr(spec, name) is not None
    }
    worker = Worker(
        worker_id=spec.worker_id,
        device=dataclasses.replace(profile, **overrides) if overrides else profile,
        num_gpus=spec.num_gpus,
        max_num_seqs=spec.max_num_seqs,
        kv_capacity_tokens=spec.kv_capacity_tokens,
    )
    _check_holds_model(worker, spec, path, model)
    if spec.time_scale is not None:
        return dataclasses.replace(worker, time_scale=spec.time_scale), "request"
    if spec.decode_tokens_per_s is not None:
        scale = _single_sequence_tps(worker, model) / spec.decode_tokens_per_s
        if not MIN_TIME_SCALE <= scale <= MAX_TIME_SCALE:
            raise InvalidInputError(
                f"{path}.decode_tokens_per_s",
                spec.decode_tokens_per_s,
                f"implies a time scale of {scale:.3g} against the {spec.device} profile, outside "
                f"[{MIN_TIME_SCALE:g}, {MAX_TIME_SCALE:g}]: check the unit (tokens per second, one sequence)",
            )
        return dataclasses.replace(worker, time_scale=scale), "measured"
    if spec.worker_id in learned:  # its own (learned), its group's, its measured peers' or the fleet's
        scale, source = learned[spec.worker_id]
        return dataclasses.replace(worker, time_scale=scale), source
    return worker, "profile"


def _check_holds_model(worker: Worker, spec: WorkerSpec, path: str, model: ModelPreset) -> None:
    """A worker whose memory leaves no KV cache after the model's weights is refused naming the
    input at fault: a ``memory_gib`` override when the request gave one (blaming ``device`` told the
    caller an H100 cannot hold a 7b model, when the override of 1 GiB was the mistake), else the
    device. (``worker_cost`` is cached: planning reads this resolution again for free.)"""
    try:
        worker_cost(worker, model)
    except InvalidInputError as error:
        if spec.memory_gib is not None:
            reason = f"{error.reason} with {spec.memory_gib:g} GiB per device"
            raise InvalidInputError(f"{path}.memory_gib", spec.memory_gib, reason) from None
        raise InvalidInputError(f"{path}.device", spec.device, error.reason) from None


def _single_sequence_tps(worker: Worker, model: ModelPreset) -> float:
    """The modelled decode speed a measured one is compared with (the worker holds the model:
    ``_check_holds_model`` ran first)."""
    return worker_cost(worker, model).single_sequence_tps(REFERENCE_CONTEXT_TOKENS)
