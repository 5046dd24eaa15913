"""A bad plan request is refused with a typed error naming the offending field and value."""

from __future__ import annotations

import dataclasses
import math
import pickle
from typing import Any, cast

import pytest

from scheduler.devices import device_profile, model_preset
from scheduler.errors import InvalidInputError, UnknownNameError
from scheduler.planner import plan
from scheduler.types import Inventory, PlanRequest, Trajectory, Worker
from scheduler.validation import validate_request


def _trajectory(prompt: str = "p0", sample: int = 0, **changes: Any) -> Trajectory:
    base = Trajectory(prompt_id=prompt, sample_idx=sample, prompt_tokens=100, max_new_tokens=1_000,
                      predicted_tokens=300.0)  # fmt: skip
    return dataclasses.replace(base, **changes)


def _worker(worker_id: str, **changes: Any) -> Worker:
    base = Worker(
        worker_id=worker_id, device=device_profile("H100"), max_num_seqs=8, kv_capacity_tokens=50_000
    )
    return dataclasses.replace(base, **changes)


def _request(
    trajectories: tuple[Trajectory, ...] | None = None,
    workers: tuple[Worker, ...] | None = None,
    **changes: object,
) -> PlanRequest:
    request = PlanRequest(
        trajectories=trajectories if trajectories is not None else (_trajectory(), _trajectory(sample=1)),
        inventory=Inventory(
            workers if workers is not None else (_worker("w0"), _worker("w1")), model_preset("7b")
        ),
    )
    return dataclasses.replace(request, **changes)  # type: ignore[arg-type]


def _rejected(request: PlanRequest) -> InvalidInputError:
    with pytest.raises(InvalidInputError) as caught:
        validate_request(request)
    return caught.value


def test_a_well_formed_request_passes() -> None:
    validate_request(_request())


def test_an_empty_batch_is_refused() -> None:
    assert _rejected(_request(trajectories=())).field == "trajectories"


def test_an_empty_inventory_is_refused() -> None:
    assert _rejected(_request(workers=())).field == "inventory.workers"


@pytest.mark.parametrize("value", [0.0, -5.0, math.nan, math.inf])
def test_a_non_positive_or_non_finite_prediction_names_its_trajectory(value: float) -> None:
    error = _rejected(_request(trajectories=(_trajectory(), _trajectory(sample=1, predicted_tokens=value))))
    assert error.field == "trajectories[1].predicted_tokens"
    assert error.value is value or (math.isnan(value) and math.isnan(float(error.value)))  # type: ignore[arg-type]


@pytest.mark.parametrize("field", ["prompt_tokens", "max_new_tokens"])
def test_a_zero_length_is_refused(field: str) -> None:
    changes: dict[str, Any] = {field: 0}
    error = _rejected(_request(trajectories=(_trajectory(**changes),)))
    assert error.field == f"trajectories[0].{field}"
    assert error.value == 0


def test_a_prediction_above_the_generation_cap_is_refused() -> None:
    error = _rejected(_request(trajectories=(_trajectory(predicted_tokens=1_001.0),)))
    assert error.field == "trajectories[0].predicted_tokens"


def test_well_formed_quantiles_pass() -> None:
    quantiles = {0.5: 300.0, 0.9: 700.0}
    validate_request(_request(trajectories=(_trajectory(quantiles=quantiles), _trajectory(sample=1))))


@pytest.mark.parametrize(
    ("quantiles", "field"),
    [
        ({1.5: 300.0}, "trajectories[0].quantiles"),
        ({0.0: 300.0}, "trajectories[0].quantiles"),
        ({0.9: math.nan}, "trajectories[0].quantiles[0.9]"),
        ({0.9: -1.0}, "trajectories[0].quantiles[0.9]"),
        ({0.5: 300.0, 0.9: math.inf}, "trajectories[0].quantiles[0.9]"),
    ],
)
def test_a_bad_quantile_names_its_trajectory_and_level(quantiles: dict[float, float], field: str) -> None:
    request = _request(trajectories=(_trajectory(quantiles=quantiles), _trajectory(sample=1)))
    assert _rejected(request).field == field


def test_a_duplicate_trajectory_key_is_refused() -> None:
    error = _rejected(_request(trajectories=(_trajectory(), _trajectory(prompt="p1"), _trajectory())))
    assert error.field == "trajectories[2]"
    assert error.value == "p0#0"


@pytest.mark.parametrize(
    ("field", "value"), [("max_num_seqs", 0), ("kv_capacity_tokens", -1), ("num_gpus", 0)]
)
def test_a_non_positive_worker_capacity_names_the_worker(field: str, value: int) -> None:
    error = _rejected(_request(workers=(_worker("w0"), _worker("w1", **{field: value}))))
    assert error.field == f"inventory.workers[1].{field}"
    assert error.value == value


def test_a_max_num_seqs_past_the_api_s_bound_is_refused_in_the_core_too() -> None:
    """The API capped it at 65,536 while a replay's ``8xH100:99999999999999999999`` planned away."""
    error = _rejected(_request(workers=(_worker("w0", max_num_seqs=65_537),)))
    assert error.field == "inventory.workers[0].max_num_seqs"
    assert error.value == 65_537


def test_a_non_finite_device_override_is_refused() -> None:
    device = dataclasses.replace(device_profile("H100"), hbm_bandwidth_gbs=math.inf)
    error = _rejected(_request(workers=(_worker("w0", device=device),)))
    assert error.field == "inventory.workers[0].device.hbm_bandwidth_gbs"


def test_a_duplicate_worker_id_is_refused() -> None:
    error = _rejected(_request(workers=(_worker("w0"), _worker("w0"))))
    assert (error.field, error.value) == ("inventory.workers[1].worker_id", "w0")


def test_a_trajectory_no_worker_can_hold_is_refused() -> None:
    too_long = _trajectory(prompt="p1", max_new_tokens=60_000, predicted_tokens=100.0)
    error = _rejected(_request(trajectories=(_trajectory(), too_long)))
    assert error.field == "trajectories[1].max_new_tokens"
    assert "KV capacity" in error.reason


def test_a_trajectory_only_an_excluded_worker_could_hold_is_refused() -> None:
    workers = (_worker("small", kv_capacity_tokens=2_000), _worker("big"))
    error = _rejected(_request(trajectories=(_trajectory(max_new_tokens=5_000),), workers=workers,
                               excluded_workers=frozenset({"big"})))  # fmt: skip
    assert error.field == "trajectories[0].max_new_tokens"


def test_a_pin_to_an_unknown_worker_is_refused() -> None:
    error = _rejected(_request(trajectories=(_trajectory(pinned_worker="nowhere"),)))
    assert (error.field, error.value) == ("trajectories[0].pinned_worker", "nowhere")


def test_a_pin_to_an_excluded_worker_is_refused() -> None:
    request = _request(trajectories=(_trajectory(pinned_worker="w1"),), excluded_workers=frozenset({"w1"}))
    assert _rejected(request).field == "trajectories[0].pinned_worker"


def test_excluding_every_worker_is_refused() -> None:
    assert _rejected(_request(excluded_workers=frozenset({"w0", "w1"}))).field == "excluded_workers"


def test_a_group_pinned_to_two_workers_is_refused_under_prefix_affinity() -> None:
    split = (_trajectory(pinned_worker="w0"), _trajectory(sample=1, pinned_worker="w1"))
    validate_request(_request(trajectories=split))  # without affinity the samples may part
    error = _rejected(_request(trajectories=split, prefix_affinity=True))
    assert (error.field, error.value) == ("trajectories[1].pinned_worker", "w1")


def test_a_pin_binds_its_whole_group_under_prefix_affinity_so_every_sample_must_fit_there() -> None:
    group = (_trajectory(pinned_worker="small"), _trajectory(sample=1, max_new_tokens=5_000))
    workers = (_worker("small", kv_capacity_tokens=1_000 + 100), _worker("big"))
    validate_request(_request(trajectories=group, workers=workers))  # without affinity it may go to big
    error = _rejected(_request(trajectories=group, workers=workers, prefix_affinity=True))
    assert (error.field, error.value) == ("trajectories[1].max_new_tokens", 5_000)


@pytest.mark.parametrize("budget", [0.0, "1", None, math.nan])
def test_a_time_budget_that_is_no_positive_number_is_refused(budget: object) -> None:
    assert _rejected(_request(time_budget_s=budget)).field == "time_budget_s"


def test_the_planner_refuses_what_validation_refuses() -> None:
    with pytest.raises(InvalidInputError) as caught:
        plan(_request(trajectories=()), "lpt")
    assert caught.value.field == "trajectories"


def test_an_unknown_policy_is_named_with_the_known_ones() -> None:
    with pytest.raises(UnknownNameError) as caught:
        plan(_request(), "fastest")
    assert caught.value.field == "policy"
    assert "cpsat" in caught.value.known


def test_errors_keep_their_field_and_message_across_processes() -> None:
    """The replay plays policies in worker processes, which send errors back pickled."""
    sent = (
        InvalidInputError("trajectories[3].predicted_tokens", -1.0, "must be a positive finite number"),
        UnknownNameError("inventory.workers[0].device", "TPU", ["H100", "A100"]),
    )
    for error in sent:
        received = pickle.loads(pickle.dumps(error))
        assert type(received) is type(error)
        assert (received.field, received.value, str(received)) == (error.field, error.value, str(error))


def test_quantiles_that_are_no_mapping_are_refused_by_name() -> None:
    error = _rejected(_request(trajectories=(_trajectory(quantiles=None),)))
    assert error.field == "trajectories[0].quantiles"


def test_a_step_overhead_given_as_text_is_refused_by_name() -> None:
    device = dataclasses.replace(device_profile("H100"), step_overhead_s="0")  # type: ignore[arg-type]
    error = _rejected(_request(workers=(_worker("w0", device=device),)))
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
    error = _rejected(_request(workers=(_worker("w0"), _worker("w1", device=device))))
    assert error.field == f"inventory.workers[1].device.{field}"
    assert error.value == value


@pytest.mark.parametrize(
    ("field", "value"),
    [("time_scale", 1e18), ("time_scale", 1e-300), ("num_gpus", 2**70), ("kv_capacity_tokens", 2**70)],
)
def test_a_worker_figure_past_the_physical_envelope_is_refused_by_name(field: str, value: float) -> None:
    error = _rejected(_request(workers=(_worker("w0"), _worker("w1", **{field: value}))))
    assert error.field == f"inventory.workers[1].{field}"
    assert error.value == value


@pytest.mark.parametrize("excluded", [None, "w0", ["w0", 7]])
def test_excluded_workers_that_are_no_set_of_ids_are_refused_by_name(excluded: object) -> None:
    """None raised TypeError from the planner; a bare string was read as its substrings, so
    ``excluded_workers="w0"`` drained every worker whose id is part of it (``w`` and ``0`` too)."""
    assert _rejected(_request(excluded_workers=excluded)).field == "excluded_workers"


def test_excluding_a_worker_the_inventory_lacks_is_refused_by_name() -> None:
    """A mistyped id drained nothing, so the worker meant to be drained silently got work."""
    error = _rejected(_request(excluded_workers=frozenset({"w1", "w01"})))
    assert (error.field, error.value) == ("excluded_workers", "w01")


@pytest.mark.parametrize("flag", ["prefix_affinity", "kv_admission"])
@pytest.mark.parametrize("value", [None, "no", 1])
def test_a_switch_that_is_no_bool_is_refused_by_name(flag: str, value: object) -> None:
    """Read by truthiness, ``kv_admission="no"`` switched admission on and the plan reported "no"."""
    changes: dict[str, Any] = {flag: value}
    assert _rejected(_request(**changes)).field == flag


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
    ],
)
def test_a_model_figure_that_is_no_model_s_is_refused_by_name(field: str, value: object) -> None:
    """A custom ``ModelPreset`` reached the cost model unchecked (the service only looks presets up)."""
    changes: dict[str, Any] = {field: value}
    model = dataclasses.replace(model_preset("7b"), **changes)
    request = _request(workers=(_worker("w0"),))
    error = _rejected(dataclasses.replace(request, inventory=Inventory(request.inventory.workers, model)))
    assert error.field == f"inventory.model.{field}"


def _retyped(part: str) -> PlanRequest:
    """The well-formed request with one part replaced by something that is not the core's type."""
    good, nothing, lazily = _request(), cast(Any, None), cast(Any, (t for t in _request().trajectories))
    odd: dict[str, Any] = {
        "trajectories[1]": lambda: _request(trajectories=(_trajectory(), nothing)),
        "trajectories": lambda: _request(trajectories=lazily),
        "inventory.workers[1]": lambda: _request(workers=(_worker("w0"), nothing)),
        "inventory.workers[0].device": lambda: _request(workers=(_worker("w0", device=None),)),
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
    assert _rejected(_retyped(part)).field == part


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
    error = _rejected(_request(trajectories=(_trajectory(), _trajectory(sample=1, **changes))))
    assert (error.field, error.value) == (f"trajectories[1].{field}", value)


@pytest.mark.parametrize("value", [7, {"w": 0}, None])
def test_a_worker_id_that_is_no_string_is_refused_by_name(value: object) -> None:
    error = _rejected(
        _request(workers=(_worker("w0"), dataclasses.replace(_worker("w1"), worker_id=cast(Any, value))))
    )
    assert (error.field, error.value) == ("inventory.workers[1].worker_id", value)


@pytest.mark.parametrize("name", [["lpt"], None, 3])
def test_a_policy_name_that_is_no_string_is_refused_by_name(name: object) -> None:
    """A list raised TypeError (unhashable) looking it up in the registry."""
    with pytest.raises(UnknownNameError) as caught:
        plan(_request(), cast(Any, name))
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
    request = _request()
    trajectory, worker, model = _trajectory(sample=1), _worker("w1"), model_preset("7b")
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
        inventory=Inventory((_worker("w0"), worker), model),
    )
    where = {"request": "", "trajectory": "trajectories[1].", "quantile": "trajectories[1].",
             "worker": "inventory.workers[1].", "device": "inventory.workers[1].device.",
             "model": "inventory.model."}[part]  # fmt: skip
    assert _rejected(request).field == where + field


@pytest.mark.parametrize("pinned_at", [0, 1, 2])
def test_the_checks_resume_after_a_valid_trajectory_the_fast_test_passes_over(pinned_at: int) -> None:
    """A pinned trajectory is valid but not plainly so: it gets the detailed checks, and those of
    every trajectory after it still run, so the first invalid one is named wherever it lies."""
    batch = [_trajectory(sample=i) for i in range(6)]
    batch[pinned_at] = _trajectory(sample=pinned_at, pinned_worker="w1")
    validate_request(_request(trajectories=tuple(batch)))  # valid: nothing raised
    for bad in range(pinned_at + 1, 6):
        broken = list(batch)
        broken[bad] = _trajectory(sample=bad, predicted_tokens=math.nan)
        broken[-1] = dataclasses.replace(broken[-1], prompt_tokens=0) if bad < 5 else broken[-1]
        error = _rejected(_request(trajectories=tuple(broken)))
        assert error.field == f"trajectories[{bad}].predicted_tokens"
