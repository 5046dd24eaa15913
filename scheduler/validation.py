"""Request validation: reject a bad plan request up front, naming the offending field and value.

Every policy assumes what this module checks (positive finite lengths, unique ids, at least one worker
able to hold each trajectory), so none of them needs defensive code. Fields are reported as paths
(``trajectories[3].predicted_tokens``, ``inventory.workers[2].max_num_seqs``) so that the service can
point at the JSON element and the CLI at the trace row. A worker "can hold" a trajectory when its KV
cache fits ``prompt_tokens + max_new_tokens``: an engine must keep a sequence it admits until the cap,
and vLLM likewise refuses requests longer than the context it can hold.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Collection, Mapping, Sequence
from itertools import islice
from typing import TypeGuard

from scheduler import giveup
from scheduler.costmodel import worker_cost
from scheduler.devices import DeviceProfile, ModelPreset
from scheduler.errors import InvalidInputError
from scheduler.gcpause import collector_paused
from scheduler.sim_rules import engine_rules
from scheduler.types import Inventory, PlanRequest, Trajectory, Worker

# The physical envelope of a worker: every device there is, with room to spare (the API's
# WorkerSpec bounds measured overrides the same way). Past it a figure is a unit mistake, and the
# model's numbers leave what floats and CP-SAT's 64-bit coefficients hold: 1e300 GB/s made every
# coefficient 0 (ZeroDivisionError in the bound), time_scale 1e18 overflowed cpsat's repair model.
RANGES: dict[str, tuple[float, float]] = {
    "hbm_bandwidth_gbs": (1.0, 1e6),  # GB/s per device
    "peak_tflops": (0.01, 1e6),  # TFLOP/s per device
    "memory_gib": (0.01, 1e5),  # GiB per device
    "step_overhead_s": (0.0, 1.0),  # seconds per step
    "bandwidth_efficiency": (0.01, 1.0),  # shares: a 1% kernel is a measurement mistake too
    "compute_efficiency": (0.01, 1.0),
    "memory_utilization": (0.01, 1.0),
    "time_scale": (1e-3, 1e3),  # a worker 1,000x off its profile is a mistake, not a measurement
}
# A model's figures, the same way: from a million parameters to ten trillion (five times the largest
# served), 4-bit-and-below to fp64 weights and beyond. A custom ``ModelPreset`` reached the cost model
# unchecked: a zero KV size divided by zero, NaN parameters raised a field-less ValueError.
MODEL_RANGES: dict[str, tuple[float, float]] = {
    "params": (1e6, 1e13),
    "weight_bytes_per_param": (0.01, 16.0),
}
MODEL_INT_MAXIMA = {"layers": 1_000, "hidden": 1_000_000, "kv_bytes_per_token": 10**9}
MAX_GPUS = 64  # tensor-parallel degree
MAX_NUM_SEQS = 65_536  # an engine's concurrent sequences; past it is a typo, not an engine
MAX_TOKENS = 2**31 - 1  # a KV cache stated in tokens
GIVE_UP_EVERY = 2048  # trajectories the plain run reads between the caller's hard deadline's checks:
# the run is one Python loop over the batch, 17 ms quiet at 16,384 and up to 2x that beside 2 CPU
# burners, unchecked until validation's end (docs/experiments.md, deadline48)


def validate_request(request: PlanRequest) -> None:
    """Raise ``InvalidInputError`` for the first rule ``request`` breaks; return quietly otherwise."""
    with collector_paused():  # a tuple per trajectory for the key check: see scheduler.gcpause
        _validate_request(request)


def _validate_request(request: PlanRequest) -> None:
    _require_positive("time_budget_s", request.time_budget_s)
    if request.hard_deadline is not None and not _real(request.hard_deadline):
        raise InvalidInputError("hard_deadline", request.hard_deadline, "must be a finite number or None")
    if not isinstance(request.trajectories, tuple | list):  # a generator has no length, nor a second pass
        raise InvalidInputError("trajectories", request.trajectories, "must be a tuple of trajectories")
    if not request.trajectories:
        raise InvalidInputError("trajectories", [], "the batch is empty")
    _require_int("seed", request.seed, minimum=0)  # seeds numpy's generators, which refuse negatives
    _require_bool("prefix_affinity", request.prefix_affinity)
    _require_bool("kv_admission", request.kv_admission)
    if not isinstance(request.engine, str):
        raise InvalidInputError("engine", request.engine, "must be an engine name")
    engine_rules(request.engine)  # an unknown name fails naming the known ones
    capacities = _validate_inventory(request.inventory)
    _validate_excluded(request.excluded_workers, capacities)
    allowed = {wid: cap for wid, cap in capacities.items() if wid not in request.excluded_workers}
    if not allowed:
        raise InvalidInputError(
            "excluded_workers", sorted(request.excluded_workers), "every worker is excluded"
        )
    largest = max(allowed.values())
    trajectories = request.trajectories
    index = _checked_run(trajectories, largest, 0)
    while index < len(trajectories):  # the detailed checks name what is wrong
        path = f"trajectories[{index}]"
        _validate_trajectory(trajectories[index], path)
        _validate_fit(trajectories[index], path, capacities, allowed, largest)
        index = _checked_run(trajectories, largest, index + 1)
    _validate_unique_keys(request)
    if request.prefix_affinity:
        _validate_group_pins(request, allowed)


def _checked_run(trajectories: Sequence[Trajectory], largest: int, start: int) -> int:
    """``_plain_run`` from ``start`` to the end, ``GIVE_UP_EVERY`` trajectories at a time, checking
    the caller's hard deadline (``scheduler.giveup``) between them: past it, a request not yet
    validated through is given up (``DeadlinePassedError``) rather than read to its end, and a
    bad trajectory after that point is not named (the caller has stopped waiting for either)."""
    end = len(trajectories)
    while start < end:
        stop = min(end, start + GIVE_UP_EVERY)
        index = _plain_run(trajectories, largest, start, stop)
        if index < stop:
            return index
        giveup.check()
        start = stop
    return end


def _plain_run(trajectories: Sequence[Trajectory], largest: int, start: int, stop: int) -> int:
    """The index of the first trajectory in ``[start, stop)`` that does not plainly pass every
    per-trajectory rule (``stop`` if none): one cheap test a trajectory, written out in this loop.
    A call per trajectory to a predicate cost ~30% more (4,096 of them: ~1.1 ms of ~4)."""
    for index in range(start, stop):
        t = trajectories[index]
        if type(t) is not Trajectory:
            return index
        p, m, q, quantiles = t.prompt_tokens, t.max_new_tokens, t.predicted_tokens, t.quantiles
        if not (
            type(p) is int
            and type(m) is int
            and type(q) in (float, int)
            and type(t.sample_idx) is int
            and p >= 1
            and t.sample_idx >= 0
            and 0 < q <= m  # False for NaN and inf
            and p + m <= largest
            and t.pinned_worker is None
            and (type(quantiles) is dict or isinstance(quantiles, Mapping))  # not None
            and (not quantiles or _plain_quantiles(quantiles))
            and type(t.prompt_id) is str
            and bool(t.prompt_id)
            and type(t.group_id) is str
        ):
            return index
    return stop


def _plain_quantiles(quantiles: Mapping[float, float]) -> bool:
    """The fast path's quantile rule: float levels in (0, 1), positive finite float values (the
    service attaches p50 and p90 to every trajectory, so this runs 32k times a request)."""
    for level, value in quantiles.items():
        if type(level) is not float or type(value) is not float:
            return False
        if not (0.0 < level < 1.0 and 0.0 < value < math.inf):  # False for NaN
            return False
    return True


def _validate_excluded(excluded: object, capacities: dict[str, int]) -> None:
    """A set of ids of the inventory's workers. A bare string is a collection too, of its substrings
    (``"w0"`` drained ``w`` and ``0``), and an id that names no worker drains nothing: the worker
    meant to be drained, under a mistyped id, would silently get work."""
    if isinstance(excluded, str | bytes) or not isinstance(excluded, Collection):
        raise InvalidInputError("excluded_workers", excluded, "must be a set of worker ids")
    for worker_id in sorted(excluded, key=repr):
        if not isinstance(worker_id, str) or worker_id not in capacities:
            raise InvalidInputError("excluded_workers", worker_id, "names no worker of the inventory")


def validate_unique_keys(request: PlanRequest) -> None:
    """The rule of one trajectory a key alone, for a policy called directly (``build_problem``)."""
    _validate_unique_keys(request)


def _validate_unique_keys(request: PlanRequest) -> None:
    # With string prompt ids and integer samples, (prompt_id, sample_idx) pairs are unique exactly
    # when keys are (a key ends in '#<integer>'), and cost half as much as 32k key strings.
    # Built from two columns by zip, not a tuple per trajectory in a comprehension (~20% less).
    # The set is built GIVE_UP_EVERY pairs at a time, the caller's hard deadline checked between:
    # one pass took ~7 ms at 32,768, the longest stretch left unchecked there (deadline49).
    prompts = [t.prompt_id for t in request.trajectories]
    column = zip(prompts, [t.sample_idx for t in request.trajectories], strict=True)
    pairs: set[tuple[str, int]] = set()
    for _ in range(0, len(prompts), GIVE_UP_EVERY):
        giveup.check()
        pairs.update(islice(column, GIVE_UP_EVERY))
    if len(pairs) == len(request.trajectories) and set(map(type, prompts)) == {str}:
        return
    keys = [t.key for t in request.trajectories]
    seen: dict[str, int] = {}
    for index, key in enumerate(keys):
        first = seen.setdefault(key, index)
        if first != index:
            raise InvalidInputError(
                f"trajectories[{index}]", key, f"duplicate trajectory key (first at [{first}])"
            )


def _validate_group_pins(request: PlanRequest, allowed: dict[str, int]) -> None:
    """Under prefix affinity a group runs on one worker, so its samples cannot be pinned apart, and a
    pin on one sample binds the whole group: every sample must fit the pinned worker's cache."""
    pins: dict[str, str] = {}
    for index, trajectory in enumerate(request.trajectories):
        pinned = trajectory.pinned_worker
        if pinned is None:
            continue
        first = pins.setdefault(trajectory.group, pinned)
        if first != pinned:
            raise InvalidInputError(
                f"trajectories[{index}].pinned_worker",
                pinned,
                f"group {trajectory.group} is also pinned to {first}; prefix_affinity keeps a group together",
            )
    for index, trajectory in enumerate(request.trajectories):
        pinned = pins.get(trajectory.group)
        need = trajectory.prompt_tokens + trajectory.max_new_tokens
        if pinned is not None:
            where = f"worker {pinned}'s KV capacity {allowed[pinned]} (group {trajectory.group}'s pin)"
            _require_prompt_room(trajectory, f"trajectories[{index}]", allowed[pinned], where)
        if pinned is not None and need > allowed[pinned]:
            raise InvalidInputError(
                f"trajectories[{index}].max_new_tokens",
                trajectory.max_new_tokens,
                f"prompt+max_new_tokens={need} exceeds worker {pinned}'s KV capacity {allowed[pinned]}, "
                f"where prefix_affinity binds group {trajectory.group} by its pin",
            )


def _validate_fit(
    trajectory: Trajectory, path: str, capacities: dict[str, int], allowed: dict[str, int], largest: int
) -> None:
    """The trajectory must have a permitted worker whose KV cache holds it at its generation cap."""
    need = trajectory.prompt_tokens + trajectory.max_new_tokens
    pinned = trajectory.pinned_worker
    if pinned is None:
        _require_prompt_room(trajectory, path, largest, f"every allowed worker's KV capacity (max {largest})")
        if need > largest:
            raise InvalidInputError(
                f"{path}.max_new_tokens",
                trajectory.max_new_tokens,
                f"prompt+max_new_tokens={need} exceeds every allowed worker's KV capacity (max {largest})",
            )
        return
    if pinned not in capacities:
        raise InvalidInputError(f"{path}.pinned_worker", pinned, "names no worker of the inventory")
    if pinned not in allowed:
        raise InvalidInputError(
            f"{path}.pinned_worker",
            pinned,
            "names an excluded worker (the service's drain: true), which takes nothing of this plan: "
            "pin it elsewhere, or leave the worker undrained",
        )
    where = f"pinned worker {pinned}'s KV capacity {allowed[pinned]}"
    _require_prompt_room(trajectory, path, allowed[pinned], where)
    if need > allowed[pinned]:
        raise InvalidInputError(
            f"{path}.max_new_tokens",
            trajectory.max_new_tokens,
            f"prompt+max_new_tokens={need} exceeds pinned worker {pinned}'s KV capacity {allowed[pinned]}",
        )


def _require_prompt_room(trajectory: Trajectory, path: str, capacity: int, where: str) -> None:
    """A prompt that alone fills ``capacity`` leaves no room for even one generated token: the prompt
    is at fault, and no cap would fit, so the error names ``prompt_tokens``, not ``max_new_tokens``
    (which sent the user lowering a cap that was never the problem). ``where`` names the cache."""
    if trajectory.prompt_tokens >= capacity:
        raise InvalidInputError(
            f"{path}.prompt_tokens",
            trajectory.prompt_tokens,
            f"the prompt alone fills {where}, leaving no room to generate a token",
        )


def _validate_trajectory(t: Trajectory, path: str) -> None:
    """Lengths must be positive and finite; a prediction may not exceed the generation cap."""
    if not isinstance(t, Trajectory):
        raise InvalidInputError(path, t, "must be a trajectory")
    if not isinstance(t.prompt_id, str) or not t.prompt_id:  # a dict is unhashable: keys and groups
        raise InvalidInputError(f"{path}.prompt_id", t.prompt_id, "must be a non-empty string")
    if not isinstance(t.group_id, str):
        raise InvalidInputError(f"{path}.group_id", t.group_id, "must be a string (empty: the prompt's)")
    if t.pinned_worker is not None and not isinstance(t.pinned_worker, str):
        raise InvalidInputError(f"{path}.pinned_worker", t.pinned_worker, "must be a worker id or none")
    _require_int(f"{path}.sample_idx", t.sample_idx, minimum=0)
    _require_int(f"{path}.prompt_tokens", t.prompt_tokens, minimum=1)
    _require_int(f"{path}.max_new_tokens", t.max_new_tokens, minimum=1)
    _require_positive(f"{path}.predicted_tokens", t.predicted_tokens)
    if t.predicted_tokens > t.max_new_tokens:
        raise InvalidInputError(
            f"{path}.predicted_tokens",
            t.predicted_tokens,
            f"exceeds max_new_tokens={t.max_new_tokens}; clamp predictions to the cap",
        )
    if not isinstance(t.quantiles, Mapping):
        raise InvalidInputError(f"{path}.quantiles", t.quantiles, "must be a mapping of level to length")
    for level, value in t.quantiles.items():
        if not (isinstance(level, int | float) and 0.0 < level < 1.0):
            raise InvalidInputError(f"{path}.quantiles", level, "quantile levels must lie in (0, 1)")
        _require_positive(f"{path}.quantiles[{level}]", value)


def _validate_inventory(inventory: Inventory) -> dict[str, int]:
    """Check every worker; return each worker's KV capacity in tokens, by id."""
    if not isinstance(inventory, Inventory):
        raise InvalidInputError("inventory", inventory, "must be an inventory of workers and a model")
    if not isinstance(inventory.workers, tuple | list):
        raise InvalidInputError("inventory.workers", inventory.workers, "must be a tuple of workers")
    if not inventory.workers:
        raise InvalidInputError("inventory.workers", [], "the inventory has no workers")
    _validate_model(inventory.model)
    capacities: dict[str, int] = {}
    for index, worker in enumerate(inventory.workers):
        path = f"inventory.workers[{index}]"
        _validate_worker(worker, path)
        if worker.worker_id in capacities:
            raise InvalidInputError(f"{path}.worker_id", worker.worker_id, "duplicate worker id")
        try:
            capacities[worker.worker_id] = worker_cost(worker, inventory.model).kv_capacity_tokens
        except InvalidInputError as error:
            raise InvalidInputError(f"{path}.device", worker.device.name, error.reason) from error
    return capacities


def _validate_model(model: ModelPreset) -> None:
    """Every worker's cost derives from the model's figures, so they are checked like a device's."""
    if not isinstance(model, ModelPreset):
        raise InvalidInputError("inventory.model", model, "must be a model preset")
    for name, (low, high) in MODEL_RANGES.items():
        value = getattr(model, name)
        _require_positive(f"inventory.model.{name}", value)
        if not low <= value <= high:
            raise InvalidInputError(f"inventory.model.{name}", value, f"must lie in [{low:g}, {high:g}]")
    for name, maximum in MODEL_INT_MAXIMA.items():
        _require_int(f"inventory.model.{name}", getattr(model, name), minimum=1, maximum=maximum)


def _validate_worker(worker: Worker, path: str) -> None:
    """Capacities and speeds must be positive and finite, so every cost is a real number of seconds."""
    if not isinstance(worker, Worker):
        raise InvalidInputError(path, worker, "must be a worker")
    if not isinstance(worker.worker_id, str) or not worker.worker_id:
        raise InvalidInputError(f"{path}.worker_id", worker.worker_id, "must be a non-empty string")
    _require_int(f"{path}.num_gpus", worker.num_gpus, minimum=1, maximum=MAX_GPUS)
    _require_int(f"{path}.max_num_seqs", worker.max_num_seqs, minimum=1, maximum=MAX_NUM_SEQS)
    if worker.kv_capacity_tokens is not None:
        _require_int(f"{path}.kv_capacity_tokens", worker.kv_capacity_tokens, minimum=1, maximum=MAX_TOKENS)
    _require_positive(f"{path}.time_scale", worker.time_scale)
    _require_range(f"{path}.time_scale", worker.time_scale)
    _validate_device(worker.device, f"{path}.device")


def _validate_device(device: DeviceProfile, path: str) -> None:
    """Measured overrides arrive through here too, so the profile is checked like any input."""
    if not isinstance(device, DeviceProfile):
        raise InvalidInputError(path, device, "must be a device profile")
    for name in ("hbm_bandwidth_gbs", "peak_tflops", "memory_gib"):
        _require_positive(f"{path}.{name}", getattr(device, name))
        _require_range(f"{path}.{name}", getattr(device, name))
    for name in ("bandwidth_efficiency", "compute_efficiency", "memory_utilization"):
        value = getattr(device, name)
        _require_positive(f"{path}.{name}", value)
        if value > 1.0:
            raise InvalidInputError(f"{path}.{name}", value, "is a share and must not exceed 1")
        _require_range(f"{path}.{name}", value)
    overhead = device.step_overhead_s
    if not _real(overhead) or overhead < 0:
        raise InvalidInputError(f"{path}.step_overhead_s", overhead, "must be a finite number >= 0")
    _require_range(f"{path}.step_overhead_s", overhead)


def _require_int(field: str, value: object, minimum: int, maximum: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidInputError(field, value, f"must be an integer >= {minimum}")
    if maximum is not None and value > maximum:
        raise InvalidInputError(field, value, f"must be an integer <= {maximum}")


def _require_bool(field: str, value: object) -> None:
    """A switch read by truthiness would take ``"no"`` for on, and the plan would report ``"no"``."""
    if not isinstance(value, bool):
        raise InvalidInputError(field, value, "must be true or false")


def _require_range(field: str, value: float) -> None:
    """``value`` (already a finite number) must lie in its figure's physical envelope (``RANGES``)."""
    low, high = RANGES[field.rsplit(".", 1)[-1]]
    if not low <= value <= high:
        raise InvalidInputError(field, value, f"must lie in [{low:g}, {high:g}]: check the unit")


def _require_positive(field: str, value: object) -> None:
    if not _real(value) or value <= 0:
        raise InvalidInputError(field, value, "must be a positive finite number")


def _real(value: object) -> TypeGuard[float]:
    """A finite int or float, not a bool (nor a string that looks like a number). An int is real
    within the float range: past it ``math.isfinite`` raised OverflowError converting it."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return abs(value) <= sys.float_info.max if isinstance(value, int) else math.isfinite(value)
