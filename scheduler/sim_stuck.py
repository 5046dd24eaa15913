"""The two ways a simulated worker cannot go on, as errors: shared by both plays of the engine.

Why a module. The engine stepped method by method (``scheduler.sim_engine``) and its play written out
on locals (``scheduler.sim_alone``) must fail alike where a play cannot make progress, or a fault
shows in one and hangs the other: an item the worker cannot hold even alone (bad input: evicting it
frees nothing) and a completion event that completes nothing (a broken rule: the event would be timed
again at the same step for ever). Each is built here once and raised by both.
"""

from __future__ import annotations

from scheduler.errors import InvalidInputError


def too_long(key: str, prompt: int, steps: int, worker_id: str, capacity: int) -> InvalidInputError:
    """A running sequence alone on its worker whose next token does not fit: it can never finish."""
    return InvalidInputError(
        f"actual_tokens[{key}]",
        steps,
        f"prompt+output={prompt + steps} tokens exceed worker {worker_id}'s KV capacity {capacity}",
    )


def no_completion(worker_id: str, step: int, batch: int, first_end: int | None) -> RuntimeError:
    """A completion event that ended none of the ``batch`` running sequences (a broken rule, never
    input): it would be timed again at the same step for ever, a play that hangs instead of failing."""
    return RuntimeError(
        f"worker {worker_id}: completion event at step {step} "
        f"ended none of {batch} running sequences (first end {first_end})"
    )
