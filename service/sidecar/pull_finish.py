"""The ``finish_reason`` a pull worker's ``/done`` may send (``pull_bodies.DoneBody``): what an engine's
word means is ``finish_reasons``' rule, shared with the push mode; this is the pull API's answer to it.

A ``/done`` took any text here, and every reason but ``stop`` and ``length`` says no length
(``scheduler.trace.says_length``): a worker that passed its engine's ``tool_calls`` (a chat that
called a tool), or an ``eos`` or ``STOP`` of its own, had every result stored as no actual, silently,
so the predictor never learned from it (trace55). Now a reason is one the service knows, an engine's
word whose meaning is certain (``finish_reasons.meaning``), or a 422 naming the field and what it
takes, with the lease kept for the corrected report: the worker, unlike the push sidecar, can be
asked (``content_filter`` included: a filter cut the output, and the worker knows whether it keeps it).
"""

from __future__ import annotations

from typing import Any

from service.sidecar.finish_reasons import FAILED, FINISHES, meaning

ACCEPTED = (
    "send 'stop' (it ended by itself), 'length' (cut at max_new_tokens) or 'abort' (cut from outside: "
    "no length to learn from); an engine's 'tool_calls', 'function_call' and 'repetition' are read as "
    "'stop', and SGLang's {'type': 'stop' | 'length' | 'abort', ...} as its type"
)
# Why a reason no engine here says is refused, without the reason itself: the 422 leads with it
# (``finish_reason='eos': not a finish reason ...``, ``pull_problems``), a long one cut short; the
# words quoted it too (``finish_reason: 'eos' is not ...``, user66)
UNKNOWN = f"not a finish reason the service knows: {ACCEPTED}"


def reported_finish(value: Any) -> Any:
    """``value`` as the finish the service stores, or a ``ValueError`` naming what it takes: an
    unknown reason stored was no actual, and nobody was told. A non-text value other than SGLang's
    object goes on to the field's own type error; text goes on to its UTF-8 check first."""
    read = meaning(value)
    if isinstance(value, dict):
        if read in FINISHES:
            return read
        raise ValueError(f"an object here is SGLang's finish_reason, whose 'type' is one of {FINISHES}")
    if not isinstance(value, str) or value in FINISHES or not _utf8(value):
        return value  # text UTF-8 cannot carry is refused by the field's own check, in its words
    if read == FAILED:
        raise ValueError("a generation that failed, not one that finished: report it with POST /fail")
    if read is None:
        raise ValueError(UNKNOWN)
    return read


def _utf8(text: str) -> bool:
    """Whether UTF-8 can carry ``text`` (no lone UTF-16 surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
