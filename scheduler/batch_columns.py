"""The batch's per-trajectory columns that the lower bound reads, computed once a plan.

``planner.prepare`` builds the problem (``scheduler.policies.problem``) and then the bound, and both
read every trajectory's prompt, planned decode steps and KV need. Read from the trajectories, the
bound's three columns cost ~1.5 ms at 4,096 trajectories (a Python pass over the batch each, a tenth
of the bound's time: docs/experiments.md, bound52), where the problem already holds them as integer
arrays. ``from_trajectories`` is how the bound reads them without a problem; ``from_arrays`` is the
problem's, the same floats: a Python int and an int64 of the same value both become the nearest
float, and the need is the same sum of those two floats.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from scheduler import giveup
from scheduler.stepsum import FloatArray, planned_steps_array
from scheduler.types import Trajectory


class BatchColumns(NamedTuple):
    """Per trajectory, in input order."""

    prompts: FloatArray  # prompt tokens
    steps: npt.NDArray[np.int64]  # planned decode steps (``stepsum.planned_steps_array``)
    need: FloatArray  # prompt plus generation cap: the KV cache that holds it to its cap


def from_trajectories(trajectories: Sequence[Trajectory]) -> BatchColumns:
    """The columns read from the trajectories themselves, the caller's hard deadline checked between
    the passes over the batch as the bound checked it (``scheduler.giveup``: ~1.6 ms a pass at 32,768)."""
    prompts = np.array([t.prompt_tokens for t in trajectories], dtype=np.float64)
    steps = planned_steps_array([t.predicted_tokens for t in trajectories])
    giveup.check()
    need = prompts + np.array([t.max_new_tokens for t in trajectories], dtype=np.float64)
    return BatchColumns(prompts, steps, need)


def from_arrays(
    prompts: npt.NDArray[np.int64], steps: npt.NDArray[np.int64], caps: npt.NDArray[np.int64]
) -> BatchColumns:
    """The columns from integer arrays a caller holds already (the problem's), without a pass over the
    trajectories: ``from_trajectories``'s floats (module doc)."""
    floats = prompts.astype(np.float64)
    return BatchColumns(floats, steps, floats + caps.astype(np.float64))
