"""A plan request value of the wrong type, or past the range the planner's arithmetic holds, is refused
with an error naming its field: each of these once crashed the planner (TypeError, OverflowError,
ZeroDivisionError) or was silently read as something else. Values of the right type but out of range
are ``test_validation``'s."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, cast

import pytest

from scheduler.devices import device_profile, model_preset
from scheduler.errors import UnknownNameError
from scheduler.planner import plan
from scheduler.types import Inventory, PlanRequest
from scheduler.validation import validate_request
from tests.scheduler.validation_requests import a_request, a_trajectory, a_worker, rejected


def test_quantiles_that_are_no_mapping_are_refused_by_name() -> None:
    error = rejected(a_request(trajectories=(a_trajectory(quantiles=None),)))
    assert error.field == "trajectories[0].quantiles"


def test_a_step_overhead_given_as_text_is_refused_by_name() -> None:
    device = dataclasses.replace(device_profile("H100"), step_overhead_s="0")  # type: ignore[arg-type]
    error = rejected(a_request(workers=(a_worker("w0", device=device),)))
    assert error.field == "inventory.workers[0].device.step_overhead_s"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("hbm_bandwidth_gbs", 1e300),  # every coefficient 0: ZeroDivisionError in the bound
        ("hbm_bandwidth_gbs", 1e-12),  # cpsat's repair coefficients past 64 bits
        ("peak_tflops", 1e-18),
        ("memory_gib", 1e18),
        ("step_overhead_s", 2.0**70),
        ("bandwidth_efficiency", 5e-324),
    ],
)
def test_a_device_figure_past_the_physical_envelope_is_refused_by_name(field: str, value: float) -> None:
    """Finite and positive is not enough: past the ranges every device fits the model's numbers
    overflow or vanish, and the planner crashed instead of naming the figure."""
    changes: dict[str, Any] = {field: value}
    device = dataclasses.replace(device_profile("H100"), **changes)
    error = rejected(a_request(workers=(a_worker("w0"), a_worker("w1", device=device))))
    assert error.field == f"inventory.workers[1].device.{field}"
    assert error.value == value


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("time_scale", 1e18),
        ("time_scale", 1e-300),
        ("num_gpus", 2**70),
        ("kv_capacity_tokens", 2**70),
        ("kv_capacity_tokens", 2**31),  # one past what a signed 32-bit token count holds
    ],
)
def test_a_worker_figure_past_the_physical_envelope_is_refused_by_name(field: str, value: float) -> None:
    error = rejected(a_request(workers=(a_worker("w0"), a_worker("w1", **{field: value}))))
    assert error.field == f"inventory.workers[1].{field}"
    assert error.value == value


@pytest.mark.parametrize("excluded", [None, "w0", ["w0", 7]])
def test_excluded_workers_that_are_no_set_of_ids_are_refused_by_name(excluded: object) -> None:
    """None raised TypeError from the planner; a bare string was read as its substrings, so
    ``excluded_workers="w0"`` drained every worker whose id is part of it (``w`` and ``0`` too)."""
    assert rejected(a_request(excluded_workers=excluded)).field == "excluded_workers"


@pytest.mark.parametrize("flag", ["prefix_affinity", "kv_admission"])
@pytest.mark.parametrize("value", [None, "no", 1])
def test_a_switch_that_is_no_bool_is_refused_by_name(flag: str, value: object) -> None:
    """Read by truthiness, ``kv_admission="no"`` switched admission on and the plan reported "no"."""
    changes: dict[str, Any] = {flag: value}
    assert rejected(a_request(**changes)).field == flag


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("kv_bytes_per_token", 0),  # ZeroDivisionError deriving the KV capacity
        ("params", math.nan),  # ValueError converting NaN to an integer, with no field
        ("params", -7.62e9),  # a negative weight read: planned on negative step times
        ("layers", 2.5),
        ("hidden", True),
        ("weight_bytes_per_param", math.inf),
        ("params", 1e300),  # past any model: step times past what the planner's integers hold
        ("kv_bytes_per_token", 10**9 + 1),  # past a gigabyte of cache a token
    ],
)
def test_a_model_figure_that_is_no_model_s_is_refused_by_name(field: str, value: object) -> None:
    """A custom ``ModelPreset`` reached the cost model unchecked (the service only looks presets up)."""
    changes: dict[str, Any] = {field: value}
    model = dataclasses.replace(model_preset("7b"), **changes)
    request = a_request(workers=(a_worker("w0"),))
    error = rejected(dataclasses.replace(request, inventory=Inventory(request.inventory.workers, model)))
    assert error.field == f"inventory.model.{field}"


def test_figures_at_the_envelope_s_edges_pass() -> None:
    """The envelope's limits are inclusive: a 2**31 - 1 token cache, a gigabyte of KV a token."""
    model = dataclasses.replace(model_preset("7b"), kv_bytes_per_token=10**9)
    workers = (a_worker("w0"), a_worker("w1", kv_capacity_tokens=2**31 - 1))
    validate_request(dataclasses.replace(a_request(workers=workers), inventory=Inventory(workers, model)))


def _retyped(part: str) -> PlanRequest:
    """The well-formed request with one part replaced by something that is not the core's type."""
    good, nothing, lazily = a_request(), cast(Any, None), cast(Any, (t for t in a_request().trajectories))
    odd: dict[str, Any] = {
        "trajectories[1]": lambda: a_request(trajectories=(a_trajectory(), nothing)),
        "trajectories": lambda: a_request(trajectories=lazily),
        "inventory.workers[1]": lambda: a_request(workers=(a_worker("w0"), nothing)),
        "inventory.workers[0].device": lambda: a_request(workers=(a_worker("w0", device=None),)),
        "inventory": lambda: dataclasses.replace(good, inventory=nothing),
        "inventory.model": lambda: dataclasses.replace(
            good, inventory=Inventory(good.inventory.workers, nothing)
        ),
    }
    request: PlanRequest = odd[part]()
    return request


@pytest.mark.parametrize(
    "part",
    ["trajectories[1]", "trajectories", "inventory.workers[1]", "inventory.workers[0].device", "inventory",
     "inventory.model"],
)  # fmt: skip
def test_a_request_whose_parts_are_not_the_core_s_types_is_refused_by_name(part: str) -> None:
    """A None where a trajectory, worker, device, inventory or model belongs raised AttributeError,
    and a generator of trajectories TypeError, instead of naming the part."""
    assert rejected(_retyped(part)).field == part


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("prompt_id", {"p": 0}),
        ("prompt_id", 7),
        ("group_id", {"g": 0}),
        ("group_id", None),
        ("pinned_worker", {"w0"}),
    ],
)
def test_an_id_that_is_no_string_is_refused_by_name(field: str, value: object) -> None:
    """A dict where a prompt, group or worker id belongs raised TypeError (unhashable) from the key
    check or round_robin's grouping; a number passed as an id, to collide with its string later."""
    changes: dict[str, Any] = {field: value}
    error = rejected(a_request(trajectories=(a_trajectory(), a_trajectory(sample=1, **changes))))
    assert (error.field, error.value) == (f"trajectories[1].{field}", value)


@pytest.mark.parametrize("value", [7, {"w": 0}, None])
def test_a_worker_id_that_is_no_string_is_refused_by_name(value: object) -> None:
    error = rejected(
        a_request(workers=(a_worker("w0"), dataclasses.replace(a_worker("w1"), worker_id=cast(Any, value))))
    )
    assert (error.field, error.value) == ("inventory.workers[1].worker_id", value)


@pytest.mark.parametrize("name", [["lpt"], None, 3])
def test_a_policy_name_that_is_no_string_is_refused_by_name(name: object) -> None:
    """A list raised TypeError (unhashable) looking it up in the registry."""
    with pytest.raises(UnknownNameError) as caught:
        plan(a_request(), cast(Any, name))
    assert (caught.value.field, caught.value.value) == ("policy", name)


PAST_FLOATS = 10**400  # an int no float holds


@pytest.mark.parametrize(
    ("part", "field"),
    [
        ("request", "time_budget_s"),
        ("trajectory", "predicted_tokens"),
        ("quantile", "quantiles[0.9]"),
        ("worker", "time_scale"),
        ("device", "hbm_bandwidth_gbs"),
        ("device", "step_overhead_s"),
        ("model", "params"),
    ],
)
def test_an_integer_past_every_float_is_refused_by_name(part: str, field: str) -> None:
    """``math.isfinite`` raised OverflowError converting it, instead of a refusal naming the field."""
    big: Any = PAST_FLOATS
    request = a_request()
    trajectory, worker, model = a_trajectory(sample=1), a_worker("w1"), model_preset("7b")
    if part == "request":
        request = dataclasses.replace(request, time_budget_s=big)
    elif part in ("trajectory", "quantile"):
        changes: dict[str, Any] = {field: big} if part == "trajectory" else {"quantiles": {0.9: big}}
        trajectory = dataclasses.replace(trajectory, **changes)
    elif part == "worker":
        worker = dataclasses.replace(worker, time_scale=big)
    elif part == "device":
        worker = dataclasses.replace(worker, device=dataclasses.replace(worker.device, **{field: big}))
    else:
        model = dataclasses.replace(model, params=big)
    request = dataclasses.replace(
        request,
        trajectories=(request.trajectories[0], trajectory),
        inventory=Inventory((a_worker("w0"), worker), model),
    )
    where = {"request": "", "trajectory": "trajectories[1].", "quantile": "trajectories[1].",
             "worker": "inventory.workers[1].", "device": "inventory.workers[1].device.",
             "model": "inventory.model."}[part]  # fmt: skip
    assert rejected(request).field == where + field


@pytest.mark.parametrize("engine", ["vllm-v2", "", None, 1])
def test_an_engine_that_is_no_known_engine_s_name_is_refused_by_name(engine: object) -> None:
    """The hedges play their draws by the request's engine (``robust_order.draw_rules``)."""
    error = rejected(a_request(engine=engine))
    assert error.field == "engine"
    if isinstance(engine, str):
        assert isinstance(error, UnknownNameError)
        assert error.known == ["vllm-v0", "vllm-v1"]
