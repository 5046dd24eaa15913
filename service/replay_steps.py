"""Which steps of a trace a replay plays: ``--steps`` text (``3-5``, ``3,5``, ``4``, ``2-``) to steps.

A selection that names no step present in the trace is an error naming what the trace has, not an
empty replay; numbers are ASCII digits only, as in trace cells.
"""

from __future__ import annotations

from collections.abc import Sequence

from predictors.tracetable import Trace
from scheduler.errors import InvalidInputError


def select_steps(trace: Trace, text: str | None) -> tuple[int, ...]:
    """Steps of ``trace`` named by ``text`` (``3-5``, ``3,5``, ``4``, ``2-``); all steps when None.

    A range that selects no step present in the trace is an error, not an empty replay.
    """
    present = [int(s) for s in trace.steps()]
    if text is None or not text.strip():
        chosen = present
    else:
        wanted: set[int] = set()
        for part in text.split(","):
            wanted |= _step_part(part, text, present)
        chosen = [s for s in present if s in wanted]
    if not chosen:
        raise InvalidInputError(
            "steps", text, f"selects no step of the trace (it has steps {_span(present)})"
        )
    return tuple(chosen)


def _step_part(part: str, text: str, present: list[int]) -> set[int]:
    lo, dash, hi = part.strip().partition("-")
    try:
        if not part.isascii() or "_" in part:  # int() reads "\u0665" as 5, "1_0" as 10
            raise ValueError(part)
        first = int(lo)
        last = (int(hi) if hi.strip() else max(present, default=first)) if dash else first
    except ValueError:
        raise InvalidInputError(
            "steps", text, "expected a step, a range like 3-5, or a list like 3,5"
        ) from None
    if first < 0 or (hi.strip() and last < first):
        raise InvalidInputError("steps", text, "a range must run from a step >= 0 up to a later one")
    return {s for s in present if first <= s <= last}  # never the whole range: 1-300000000 is fine


def _span(steps: Sequence[int]) -> str:
    """The steps a trace has, as a reader would check them: ``3-5`` only when none is missing."""
    if not steps:
        return "none"
    if list(steps) == list(range(steps[0], steps[-1] + 1)):
        return f"{steps[0]}-{steps[-1]}"
    if len(steps) <= 8:
        return ",".join(str(s) for s in steps)
    return f"{len(steps)} steps, {steps[0]}..{steps[-1]}"
