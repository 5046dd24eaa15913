"""A small well-formed plan request and the ways to bend one part of it, shared by the validation
tests (``test_validation``: values out of range; ``test_validation_types``: values of the wrong type
or past what the planner's arithmetic holds), so both start from the same request that passes."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from scheduler.devices import device_profile, model_preset
from scheduler.errors import InvalidInputError
from scheduler.types import Inventory, PlanRequest, Trajectory, Worker
from scheduler.validation import validate_request


def a_trajectory(prompt: str = "p0", sample: int = 0, **changes: Any) -> Trajectory:
    base = Trajectory(prompt_id=prompt, sample_idx=sample, prompt_tokens=100, max_new_tokens=1_000,
                      predicted_tokens=300.0)  # fmt: skip
    return dataclasses.replace(base, **changes)


def a_worker(worker_id: str, **changes: Any) -> Worker:
    base = Worker(
        worker_id=worker_id, device=device_profile("H100"), max_num_seqs=8, kv_capacity_tokens=50_000
    )
    return dataclasses.replace(base, **changes)


def a_request(
    trajectories: tuple[Trajectory, ...] | None = None,
    workers: tuple[Worker, ...] | None = None,
    **changes: object,
) -> PlanRequest:
    request = PlanRequest(
        trajectories=trajectories if trajectories is not None else (a_trajectory(), a_trajectory(sample=1)),
        inventory=Inventory(
            workers if workers is not None else (a_worker("w0"), a_worker("w1")), model_preset("7b")
        ),
    )
    return dataclasses.replace(request, **changes)  # type: ignore[arg-type]


def rejected(request: PlanRequest) -> InvalidInputError:
    with pytest.raises(InvalidInputError) as caught:
        validate_request(request)
    return caught.value
