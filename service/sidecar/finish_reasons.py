"""What an engine's ``finish_reason`` means to the service: one rule for the push mode's reading of its
engine's answer (``engine_reply.parse_reply``) and the pull API's of a worker's ``/done``
(``pull_finish``).

Why one rule. The two read the same engines' words apart: the push mode took every word but
``abort`` and ``error`` as ``stop`` (OpenAI's ``content_filter``, or any word a newer engine adds,
learned as a length a generation ended at by itself), while ``/done`` refused them (finish55). The
engines' words, from their sources: vLLM's ``FINISH_REASON_STRINGS`` (``stop``, ``length``,
``abort``, ``error``, ``repetition``), its and SGLang's OpenAI servers' ``tool_calls``, OpenAI's
``content_filter`` and older ``function_call``, and SGLang's ``meta_info["finish_reason"]`` object,
``{"type": "stop" | "length" | "abort", ...}``.

What each means (``meaning``): ``stop``, ``length``, ``abort`` as the service stores them (ended by
itself; cut at ``max_new_tokens``; cut from outside, no length to learn from); ``tool_calls``,
``function_call``, ``repetition``: ended by itself below its cap, so ``stop``, the word kept in
``extra.engine_finish_reason`` (``ended_by_itself``); ``error``: a request that failed, no
trajectory (``FAILED``); SGLang's object: its ``type``. Anything else has no certain meaning (None):
``content_filter`` (a filter cut the output: neither surely a length nor surely none), another
object, any other word in any case (``STOP`` is no engine's word here). What each mode does with
no meaning differs only where it must: the pull API refuses it (422, the worker corrects its
report), the push sidecar, which has no one to ask, stores the result as ``abort`` (delivered, no
length learned) and says so (``engine_reply.result_of``).
"""

from __future__ import annotations

from typing import Any

# What the service itself stores: a generation that ended by itself, one cut at its item's
# ``max_new_tokens``, and one cut from outside (a pause for a weight sync: no length, no actual).
FINISHES = ("stop", "length", "abort")
# An engine's words for a generation that ended by itself, not at the cap: taken as ``stop``, the
# word kept in ``extra.engine_finish_reason`` (where a pull worker did not set it).
ENDED_BY_ITSELF = ("tool_calls", "function_call", "repetition")
FAILED = "error"  # vLLM's request-level failure (a KV load failed): no trajectory to report
UNREAD = "abort"  # what the push mode stores a reason of no certain meaning as: no length learned


def meaning(value: Any) -> str | None:
    """``value``, an engine's finish reason, as one of ``FINISHES`` or ``FAILED``; None where its
    meaning is not certain (``content_filter``, an unknown word or object): read as a length, a
    ``timeout`` or a filter's cut would teach the predictor a length no generation ended at."""
    if isinstance(value, dict):
        kind = value.get("type")
        return kind if isinstance(kind, str) and kind in FINISHES else None
    if not isinstance(value, str):
        return None
    if value in FINISHES or value == FAILED:
        return value
    return "stop" if value in ENDED_BY_ITSELF else None


def ended_by_itself(value: Any) -> str | None:
    """The engine's word that ``meaning`` reads as ``stop`` (``tool_calls``...), kept in the result's
    ``extra.engine_finish_reason``: the trainer may want to know the chat called a tool."""
    return value if isinstance(value, str) and value in ENDED_BY_ITSELF else None
