"""A bad plan request is refused with a typed error naming the offending field and value (a value of
the wrong type, or past what the planner's arithmetic holds: ``test_validation_types``)."""

from __future__ import annotations

import dataclasses
import math
import pickle
from typing import Any

import pytest

from scheduler import clock
from scheduler.devices import device_profile
from scheduler.errors import InvalidInputError, UnknownNameError
from scheduler.planner import plan
from scheduler.validation import validate_request
from tests.scheduler.validation_requests import a_request, a_trajectory, a_worker, rejected


def test_a_well_formed_request_passes() -> None:
    validate_request(a_request())


def test_an_empty_batch_is_refused() -> None:
    assert rejected(a_request(trajectories=())).field == "trajectories"


def test_an_empty_inventory_is_refused() -> None:
    assert rejected(a_request(workers=())).field == "inventory.workers"


@pytest.mark.parametrize("value", [0.0, -5.0, math.nan, math.inf])
def test_a_non_positive_or_non_finite_prediction_names_its_trajectory(value: float) -> None:
    error = rejected(a_request(trajectories=(a_trajectory(), a_trajectory(sample=1, predicted_tokens=value))))
    assert error.field == "trajectories[1].predicted_tokens"
    assert error.value is value or (math.isnan(value) and math.isnan(float(error.value)))  # type: ignore[arg-type]


@pytest.mark.parametrize("field", ["prompt_tokens", "max_new_tokens"])
def test_a_zero_length_is_refused(field: str) -> None:
    changes: dict[str, Any] = {field: 0}
    error = rejected(a_request(trajectories=(a_trajectory(**changes),)))
    assert error.field == f"trajectories[0].{field}"
    assert error.value == 0


def test_a_prediction_above_the_generation_cap_is_refused() -> None:
    error = rejected(a_request(trajectories=(a_trajectory(predicted_tokens=1_001.0),)))
    assert error.field == "trajectories[0].predicted_tokens"


def test_well_formed_quantiles_pass() -> None:
    quantiles = {0.5: 300.0, 0.9: 700.0}
    validate_request(a_request(trajectories=(a_trajectory(quantiles=quantiles), a_trajectory(sample=1))))


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
    request = a_request(trajectories=(a_trajectory(quantiles=quantiles), a_trajectory(sample=1)))
    assert rejected(request).field == field


def test_a_duplicate_trajectory_key_is_refused() -> None:
    error = rejected(a_request(trajectories=(a_trajectory(), a_trajectory(prompt="p1"), a_trajectory())))
    assert error.field == "trajectories[2]"
    assert error.value == "p0#0"


@pytest.mark.parametrize(
    ("field", "value"), [("max_num_seqs", 0), ("kv_capacity_tokens", -1), ("num_gpus", 0)]
)
def test_a_non_positive_worker_capacity_names_the_worker(field: str, value: int) -> None:
    error = rejected(a_request(workers=(a_worker("w0"), a_worker("w1", **{field: value}))))
    assert error.field == f"inventory.workers[1].{field}"
    assert error.value == value


def test_a_max_num_seqs_past_the_api_s_bound_is_refused_in_the_core_too() -> None:
    """The API capped it at 65,536 while a replay's ``8xH100:99999999999999999999`` planned away."""
    error = rejected(a_request(workers=(a_worker("w0", max_num_seqs=65_537),)))
    assert error.field == "inventory.workers[0].max_num_seqs"
    assert error.value == 65_537


def test_a_non_finite_device_override_is_refused() -> None:
    device = dataclasses.replace(device_profile("H100"), hbm_bandwidth_gbs=math.inf)
    error = rejected(a_request(workers=(a_worker("w0", device=device),)))
    assert error.field == "inventory.workers[0].device.hbm_bandwidth_gbs"


def test_a_duplicate_worker_id_is_refused() -> None:
    error = rejected(a_request(workers=(a_worker("w0"), a_worker("w0"))))
    assert (error.field, error.value) == ("inventory.workers[1].worker_id", "w0")


def test_a_trajectory_no_worker_can_hold_is_refused() -> None:
    too_long = a_trajectory(prompt="p1", max_new_tokens=60_000, predicted_tokens=100.0)
    error = rejected(a_request(trajectories=(a_trajectory(), too_long)))
    assert error.field == "trajectories[1].max_new_tokens"
    assert "KV capacity" in error.reason


@pytest.mark.parametrize("prompt_tokens", [50_000, 50_001, 10**6])
def test_a_prompt_that_alone_fills_every_cache_is_blamed_not_the_cap(prompt_tokens: int) -> None:
    """Lowering max_new_tokens cannot help a prompt that leaves no room for one token: name the prompt."""
    error = rejected(
        a_request(
            trajectories=(a_trajectory(prompt_tokens=prompt_tokens, max_new_tokens=1, predicted_tokens=1.0),)
        )
    )
    assert (error.field, error.value) == ("trajectories[0].prompt_tokens", prompt_tokens)
    assert error.reason.startswith("the prompt alone fills every allowed worker's KV capacity (max 50000)")


def test_a_prompt_that_fits_with_a_cap_that_does_not_still_blames_the_cap() -> None:
    error = rejected(
        a_request(trajectories=(a_trajectory(prompt_tokens=49_999, max_new_tokens=2, predicted_tokens=1.0),))
    )
    assert (error.field, error.value) == ("trajectories[0].max_new_tokens", 2)
    assert "prompt+max_new_tokens=50001" in error.reason


def test_a_prompt_that_fills_its_pinned_worker_is_blamed_not_the_cap() -> None:
    workers = (a_worker("small", kv_capacity_tokens=2_000), a_worker("big"))
    pinned = a_trajectory(prompt_tokens=2_000, max_new_tokens=10, predicted_tokens=5.0, pinned_worker="small")
    error = rejected(a_request(trajectories=(pinned,), workers=workers))
    assert (error.field, error.value) == ("trajectories[0].prompt_tokens", 2_000)
    assert "pinned worker small" in error.reason


def test_a_prompt_that_fills_its_groups_pinned_worker_is_blamed_under_prefix_affinity() -> None:
    workers = (a_worker("small", kv_capacity_tokens=2_000), a_worker("big"))
    group = (
        a_trajectory(pinned_worker="small"),
        a_trajectory(sample=1, prompt_tokens=2_500, max_new_tokens=10, predicted_tokens=5.0),
    )
    error = rejected(a_request(trajectories=group, workers=workers, prefix_affinity=True))
    assert (error.field, error.value) == ("trajectories[1].prompt_tokens", 2_500)


def test_a_trajectory_only_an_excluded_worker_could_hold_is_refused() -> None:
    workers = (a_worker("small", kv_capacity_tokens=2_000), a_worker("big"))
    error = rejected(a_request(trajectories=(a_trajectory(max_new_tokens=5_000),), workers=workers,
                               excluded_workers=frozenset({"big"})))  # fmt: skip
    assert error.field == "trajectories[0].max_new_tokens"


def test_a_pin_to_an_unknown_worker_is_refused() -> None:
    error = rejected(a_request(trajectories=(a_trajectory(pinned_worker="nowhere"),)))
    assert (error.field, error.value) == ("trajectories[0].pinned_worker", "nowhere")


def test_a_pin_to_an_excluded_worker_is_refused() -> None:
    request = a_request(trajectories=(a_trajectory(pinned_worker="w1"),), excluded_workers=frozenset({"w1"}))
    assert rejected(request).field == "trajectories[0].pinned_worker"


def test_excluding_every_worker_is_refused() -> None:
    assert rejected(a_request(excluded_workers=frozenset({"w0", "w1"}))).field == "excluded_workers"


def test_excluding_a_worker_the_inventory_lacks_is_refused_by_name() -> None:
    """A mistyped id drained nothing, so the worker meant to be drained silently got work."""
    error = rejected(a_request(excluded_workers=frozenset({"w1", "w01"})))
    assert (error.field, error.value) == ("excluded_workers", "w01")


def test_a_group_pinned_to_two_workers_is_refused_under_prefix_affinity() -> None:
    split = (a_trajectory(pinned_worker="w0"), a_trajectory(sample=1, pinned_worker="w1"))
    validate_request(a_request(trajectories=split))  # without affinity the samples may part
    error = rejected(a_request(trajectories=split, prefix_affinity=True))
    assert (error.field, error.value) == ("trajectories[1].pinned_worker", "w1")


def test_a_pin_binds_its_whole_group_under_prefix_affinity_so_every_sample_must_fit_there() -> None:
    group = (a_trajectory(pinned_worker="small"), a_trajectory(sample=1, max_new_tokens=5_000))
    workers = (a_worker("small", kv_capacity_tokens=1_000 + 100), a_worker("big"))
    validate_request(a_request(trajectories=group, workers=workers))  # without affinity it may go to big
    error = rejected(a_request(trajectories=group, workers=workers, prefix_affinity=True))
    assert (error.field, error.value) == ("trajectories[1].max_new_tokens", 5_000)


@pytest.mark.parametrize("budget", [0.0, "1", None, math.nan])
def test_a_time_budget_that_is_no_positive_number_is_refused(budget: object) -> None:
    assert rejected(a_request(time_budget_s=budget)).field == "time_budget_s"


def test_the_planner_refuses_what_validation_refuses() -> None:
    # Frozen: a refusal is made before any budget is spent (tests/scope_costs.py, OFF_THE_CLOCK).
    with clock.frozen(), pytest.raises(InvalidInputError) as caught:
        plan(a_request(trajectories=()), "lpt")
    assert caught.value.field == "trajectories"


def test_an_unknown_policy_is_named_with_the_known_ones() -> None:
    with pytest.raises(UnknownNameError) as caught:
        plan(a_request(), "fastest")
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


@pytest.mark.parametrize("pinned_at", [0, 1, 2])
def test_the_checks_resume_after_a_valid_trajectory_the_fast_test_passes_over(pinned_at: int) -> None:
    """A pinned trajectory is valid but not plainly so: it gets the detailed checks, and those of
    every trajectory after it still run, so the first invalid one is named wherever it lies."""
    batch = [a_trajectory(sample=i) for i in range(6)]
    batch[pinned_at] = a_trajectory(sample=pinned_at, pinned_worker="w1")
    validate_request(a_request(trajectories=tuple(batch)))  # valid: nothing raised
    for bad in range(pinned_at + 1, 6):
        broken = list(batch)
        broken[bad] = a_trajectory(sample=bad, predicted_tokens=math.nan)
        broken[-1] = dataclasses.replace(broken[-1], prompt_tokens=0) if bad < 5 else broken[-1]
        error = rejected(a_request(trajectories=tuple(broken)))
        assert error.field == f"trajectories[{bad}].predicted_tokens"
