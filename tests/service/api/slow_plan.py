"""``serve`` whose ``lpt`` plans run their whole budget in checked parts (a child process's entry).

A stand-in for a plan that is still running after uvicorn's graceful wait: the floor's long loops on
a starved host, which check the caller's hard deadline between their parts (``scheduler/giveup.py``).
Before the plan, it creates the file ``SLOW_PLAN_STARTED`` names, so the test knows one is running.
Run as ``python -m tests.service.api.slow_plan serve ...`` (``service.cli``'s arguments).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from scheduler import giveup
from scheduler.policies.base import Placement
from scheduler.policies.lpt import LptPolicy
from scheduler.policies.problem import Problem
from scheduler.types import PlanRequest

STARTED = "SLOW_PLAN_STARTED"
PART_S = 0.05  # one checked part of the loop


def install() -> None:
    """Make ``lpt`` spend its budget in parts, checking the hard deadline after each, then plan."""
    plan = LptPolicy.plan

    def slow(self: LptPolicy, request: PlanRequest, problem: Problem | None = None) -> Placement:
        Path(os.environ[STARTED]).touch()
        end = time.perf_counter() + request.time_budget_s
        while time.perf_counter() < end:
            time.sleep(PART_S)
            giveup.check()
        return plan(self, request, problem)

    LptPolicy.plan = slow  # type: ignore[method-assign]


if __name__ == "__main__":
    install()
    from service.cli import main

    sys.argv = ["rollout-scheduler", *sys.argv[1:]]
    main()
