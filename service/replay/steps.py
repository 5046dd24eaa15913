"""Which steps of a trace a replay plays: ``--steps`` text (``3-5``, ``3,5``, ``4``, ``2-``) to steps,
and whether the pool can play them.

A part of a selection that names no step present in the trace (``5`` of ``1,5``) is an error naming
it and what the trace has, not a replay of the rest; numbers are ASCII digits only, as in trace
cells. A trajectory no worker of the pool can hold is an error naming its step and prompt before
anything is replayed, not at its step.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NoReturn

import numpy as np

from predictors.tracetable import FloatArray, Trace
from scheduler.costmodel import worker_cost
from scheduler.errors import InvalidInputError
from scheduler.types import Inventory

StepRanges = tuple[tuple[int, int | None], ...]  # (first, last) steps; last None: to the trace's end


def select_steps(trace: Trace, text: str | None) -> tuple[int, ...]:
    """Steps of ``trace`` named by ``text`` (``3-5``, ``3,5``, ``4``, ``2-``); all steps when None.

    A part of ``text`` that selects no step present in the trace is an error, not a replay of the
    other parts, and so is an empty ``text``, not all steps.
    """
    return chosen_steps(trace, text, parse_steps(text))


def parse_steps(text: str | None) -> StepRanges | None:
    """``text`` as ranges of steps (None: every step), checked without the trace: the replay parses
    it before reading a trace that may take seconds to load, so ``--steps 5-3`` fails at once."""
    if text is None:
        return None
    if not text.strip():  # "$STEPS" unset: not every step, which may take minutes
        raise InvalidInputError(
            "steps", text, "empty; expected e.g. 3-5, 3,5, 4 or 2- (leave --steps out for all)"
        )
    return tuple(_step_part(part, text) for part in text.split(","))


def chosen_steps(trace: Trace, text: str | None, ranges: StepRanges | None) -> tuple[int, ...]:
    """The steps of ``trace`` that ``ranges`` (``parse_steps(text)``) name; an error naming each part
    of ``text`` that selects none, and what the trace has: ``--steps 1,5`` on a trace without step 5
    replayed step 1 and said nothing of 5. A range with gaps plays the steps it holds (``3-5`` on a
    trace of steps 3 and 5 plays both). Each present step is tested, never each step of a range:
    ``1-300000000`` is fine."""
    present = [int(s) for s in trace.steps()]
    if ranges is None:
        return tuple(present)
    empty = [_part_text(part) for part in ranges if not any(_within(s, part) for s in present)]
    if empty:
        verb = "selects" if len(empty) == 1 else "select"
        reason = f"{' and '.join(empty)} {verb} no step of the trace (it has {step_span(present)})"
        raise InvalidInputError("steps", text, reason)
    return tuple(s for s in present if any(_within(s, part) for part in ranges))


def _within(step: int, part: tuple[int, int | None]) -> bool:
    lo, hi = part
    return lo <= step and (hi is None or step <= hi)


def _part_text(part: tuple[int, int | None]) -> str:
    """One part of ``--steps`` as the user wrote it, less its spaces: ``5``, ``3-5`` or ``2-``."""
    lo, hi = part
    return str(lo) if hi == lo else f"{lo}-{'' if hi is None else hi}"


def _step_part(part: str, text: str) -> tuple[int, int | None]:
    lo, dash, hi = part.strip().partition("-")
    try:
        if not part.isascii() or "_" in part:  # int() reads "\u0665" as 5, "1_0" as 10
            raise ValueError(part)
        first = int(lo)
        last = (int(hi) if hi.strip() else None) if dash else first
    except ValueError:
        raise InvalidInputError(
            "steps", text, "expected a step, a range like 3-5, or a list like 3,5"
        ) from None
    if first < 0 or (last is not None and last < first):
        raise InvalidInputError("steps", text, "a range must run from a step >= 0 up to a later one")
    return first, last


def step_span(steps: Sequence[int]) -> str:
    """The steps a trace has, as a reader would check them, their word included: ``steps 3-5`` only
    when none is missing, ``step 3`` for one (it read ``steps 3-3``), and ``12 steps in 1..40`` for
    many with gaps (every caller put ``steps`` before it: ``steps 12 steps, 1..40``)."""
    if not steps:
        return "no steps"
    if len(steps) == 1:
        return f"step {steps[0]}"
    if list(steps) == list(range(steps[0], steps[-1] + 1)):
        return f"steps {steps[0]}-{steps[-1]}"
    if len(steps) <= 8:
        return "steps " + ",".join(str(s) for s in steps)
    return f"{len(steps)} steps in {steps[0]}..{steps[-1]}"


def step_caps(trace: Trace, rows: Trace) -> FloatArray:
    """Each of ``rows``' generation cap; where the trace does not know it, the longest output it records."""
    fallback = max(int(trace.output_tokens.max()), 1)
    return np.where(rows.max_new_tokens > 0, rows.max_new_tokens, fallback).astype(np.float64)


def check_fits(trace: Trace, steps: Sequence[int], inventory: Inventory) -> None:
    """Refuse a trajectory of ``steps`` that no worker's KV cache holds at its cap (the planner's
    rule), naming its step, prompt and sample: the planner refused it only when its step came up,
    after minutes of earlier steps, as ``trajectories[i]`` of a batch the user never sees."""
    if not inventory.workers:
        return  # the planner's own validation says so
    largest = max(worker_cost(w, inventory.model).kv_capacity_tokens for w in inventory.workers)
    for step in steps:
        rows = trace.take(trace.step == step)
        over = np.flatnonzero(rows.prompt_tokens + step_caps(trace, rows) > largest)
        if len(over):
            _refuse(trace, rows, int(over[0]), step, largest)


def _refuse(trace: Trace, rows: Trace, i: int, step: int, largest: int) -> NoReturn:
    """The error for row ``i`` of ``rows``, with the cap it was given and where that came from."""
    cap = int(step_caps(trace, rows)[i])
    known = (
        "" if rows.max_new_tokens[i] > 0 else " (the trace's longest output: it records no max_new_tokens)"
    )
    where = f"step {step}, prompt {str(rows.prompt_id[i])!r}, sample {int(rows.sample_idx[i])}"
    reason = (
        f"prompt {int(rows.prompt_tokens[i]):,} + cap {cap:,}{known} tokens exceed the largest KV cache "
        f"in the pool ({largest:,} tokens): no worker can hold it"
    )
    raise InvalidInputError("trace", where, reason)
