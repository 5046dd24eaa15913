"""The ``finish_reason`` a pull worker's ``/done`` may send (``pull_bodies.DoneBody``), and how an
engine's own words for it are read.

A ``/done`` took any text here, and every reason but ``stop`` and ``length`` says no length
(``scheduler.trace.says_length``): a worker that passed its engine's ``tool_calls`` (a chat that
called a tool), or an ``eos`` or ``STOP`` of its own, had every result stored as no actual, silently,
so the predictor never learned from it (trace55). Now a reason is one the service knows, an engine's
word whose meaning is certain (read as the push mode reads it, ``engine_reply.parse_reply``), or a
422 naming the field and what it takes, with the lease kept for the corrected report. The engines'
words, from their sources: vLLM's ``FINISH_REASON_STRINGS`` (``stop``, ``length``, ``abort``,
``error``, ``repetition``), its and SGLang's OpenAI servers' ``tool_calls``, OpenAI's older
``function_call``, and SGLang's ``meta_info["finish_reason"]`` object, ``{"type": "stop" | "length"
| "abort", ...}``. Not read: OpenAI's ``content_filter`` (output cut by a filter: neither a length
nor surely no length), and anything else, in any case (``STOP`` is no engine's word here).
"""

from __future__ import annotations

from typing import Any

# What the service itself stores: a generation that ended by itself, one cut at its item's
# ``max_new_tokens``, and one cut from outside (a pause for a weight sync: no length, no actual).
FINISHES = ("stop", "length", "abort")
# An engine's words for a generation that ended by itself, not at the cap: taken as ``stop``, the
# word kept in ``extra.engine_finish_reason`` (where the worker did not set it), as the push mode does.
ENDED_BY_ITSELF = ("tool_calls", "function_call", "repetition")
FAILED = "error"  # vLLM's request-level failure (a KV load failed): no trajectory to report
_SHOWN = 40  # the longest reason quoted back (printable ASCII only: the answer must render)

ACCEPTED = (
    "send 'stop' (it ended by itself), 'length' (cut at max_new_tokens) or 'abort' (cut from outside: "
    "no length to learn from); an engine's 'tool_calls', 'function_call' and 'repetition' are read as "
    "'stop', and SGLang's {'type': 'stop' | 'length' | 'abort', ...} as its type"
)


def reported_finish(value: Any) -> Any:
    """``value`` as the finish the service stores, or a ``ValueError`` naming what it takes: an
    unknown reason stored was no actual, and nobody was told. A non-text value other than SGLang's
    object goes on to the field's own type error; text goes on to its UTF-8 check first."""
    if isinstance(value, dict):
        kind = value.get("type")
        if isinstance(kind, str) and kind in FINISHES:
            return kind
        raise ValueError(f"an object here is SGLang's finish_reason, whose 'type' is one of {FINISHES}")
    if not isinstance(value, str) or value in FINISHES or not _utf8(value):
        return value  # text UTF-8 cannot carry is refused by the field's own check, in its words
    if value in ENDED_BY_ITSELF:
        return "stop"
    if value == FAILED:
        raise ValueError(
            "'error' is a generation that failed, not one that finished: report it with POST /fail"
        )
    raise ValueError(_unknown(value))


def engine_word(value: Any) -> str | None:
    """The engine's word that ``reported_finish`` reads as ``stop``, kept in the result's ``extra``."""
    return value if isinstance(value, str) and value in ENDED_BY_ITSELF else None


def _utf8(text: str) -> bool:
    """Whether UTF-8 can carry ``text`` (no lone UTF-16 surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _unknown(value: str) -> str:
    """Why a reason no engine here says is refused: quoted where it is short printable text."""
    shown = repr(value) if len(value) <= _SHOWN and value.isascii() and value.isprintable() else "this reason"
    return f"{shown} is not a finish reason the service knows: {ACCEPTED}"
