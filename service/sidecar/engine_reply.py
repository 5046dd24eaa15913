"""What the engine answered for one trajectory (``EngineReply``), and a failure sorted by whose fault it
is (``EngineError``); ``service.sidecar.engine_client`` sends the requests and reads them back through
``parse_reply`` and ``with_engine_prompt``; ``result_of`` makes the reply the result a push sidecar
completes its lease with.

What comes back: ``usage.completion_tokens`` (the engine's own tokenizer's count) is the length; the
text, and in ``extra`` what the params asked for beside it (``token_ids`` for ``return_token_ids``,
``logprobs``), a chat's reasoning and tool calls, and the engine's ``usage.prompt_tokens`` where it
differs from the item's (``engine_prompt_tokens``: the chat template the trainer's count left out).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field, replace
from typing import Any

from scheduler.trace import MINIMUM
from service.delivery.records import TrajectoryResult, bounded_extra
from service.sidecar.finish_reasons import FAILED, UNREAD, ended_by_itself, meaning
from service.sidecar.holdings import Held

log = logging.getLogger("service.sidecar")  # the session's logger: operators grep its lines there


class EngineError(RuntimeError):
    """The engine could not run a request.

    ``retryable``: another try in place may succeed. ``engine_down``: the engine, not the item, is at
    fault (unreachable, overloaded, restarting), so the item goes back without spending an attempt.
    An error that is retryable but not ``engine_down`` (a 500, an answer that does not parse) is
    tried again in place and then charged to the item: if it keeps failing, only for this item, it
    must end in the dead-letter list, not go back to the head of the queue forever.
    ``suspect``: an ``engine_down`` failure that a healthy engine may also give one item only (the
    connection dropped mid-request, a bare 500, 502-504); the runner charges the item once the
    engine, healthy meanwhile, has failed it so several times (``service.sidecar.watchdog``).
    """

    def __init__(
        self,
        message: str,
        retryable: bool,
        engine_down: bool = False,
        status: int = 0,
        suspect: bool = False,
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.engine_down = engine_down
        self.status = status  # the HTTP status, 0 when there was none
        self.suspect = suspect
        # set by the runner: a try of this item lost its request mid-way (dropped connection, vLLM's
        # dead core's bare 500), so the engine may have died running it (``Delivery.release`` died)
        self.crashed = False

    @property
    def dropped(self) -> bool:
        """The request was lost mid-way as an engine that died loses it (not a refusal, not a 502-504
        from a gateway or an engine pausing): the item may have killed it."""
        return self.suspect and self.status in (0, 500)


@dataclass(frozen=True, slots=True)
class EngineReply:
    """What the engine generated for one trajectory."""

    output: str  # generated text (a chat's ``content``; empty when it only reasoned or called tools)
    completion_tokens: int  # usage.completion_tokens: the actual length
    finish_reason: str  # "stop" | "length" | "abort" (no certain meaning: ``finish_reasons.UNREAD``)
    wall_time_s: float  # request sent -> response received
    extra: dict[str, Any] = field(default_factory=dict)  # reasoning text, tool calls, the engine's reason


def parse_reply(answer: dict[str, Any], wall_time_s: float, max_tokens: int) -> EngineReply:
    """The reply in ``answer``; a garbled one (no choices or usage, a token count that is no count)
    is an ``EngineError`` retried in place, then charged to the item. A count above the
    ``max_tokens`` sent is an engine's over-count (a speculative chunk accepted past the cap): the
    length is ``max_tokens``, the count kept in ``extra``. Stored as counted, it failed the
    trainer's report of the whole step (``ActualReport`` refuses output above ``max_new_tokens``,
    as the pull API's ``/done`` does). A count of 0 is an under-count: a generation is at least the
    token it ended on (``scheduler.trace.output_length``, which ``/done`` and ``POST /actuals``
    refuse a 0 by), so the length is 1, the count kept in ``extra`` likewise; stored as 0, no
    client reported it, so the predictor never learned that length (learn54).

    The finish reason is read by the rule the pull API reads a worker's by (``finish_reasons``):
    ``abort`` gives the item back, ``error`` is a failure; a reason of no certain meaning
    (``content_filter``, a word no engine here says) is ``abort``, the engine's word in
    ``extra.engine_finish_reason``: no one here can be asked, as a pull worker is (422), and taken as
    ``stop`` (as it was) it taught a filter's cut, or a newer engine's ``timeout``, as a length."""
    try:
        choice = answer["choices"][0]
        message = choice.get("message")
        text = message.get("content") if isinstance(message, dict) else choice["text"]
        tokens = int(answer["usage"]["completion_tokens"])
        said = choice.get("finish_reason")
        if tokens < 0:
            raise ValueError("negative completion_tokens")
    except (KeyError, IndexError, TypeError, ValueError, AttributeError, OverflowError):
        raise EngineError(f"engine answer lacks choices/usage: {str(answer)[:200]}", retryable=True) from None
    finish = "stop" if said is None else meaning(said)  # an answer that names none ended by itself
    if finish == "abort":  # stopped from outside (a pause for a weight update): run it again later
        raise EngineError("the engine aborted the request", retryable=False, engine_down=True)
    if finish == FAILED:  # vLLM's request-level failure (a KV load failed): no trajectory, and
        # vLLM itself answers it with a 500, so it is retried in place and then charged like one
        raise EngineError("the engine ended the generation in error (finish_reason 'error')", retryable=True)
    extra = _message_extras(message) if isinstance(message, dict) else {}
    extra.update(_token_extras(choice))
    if finish is None or ended_by_itself(said):  # tool_calls...: ended by itself; else no certain meaning
        extra["engine_finish_reason"] = said
    if tokens > max_tokens:
        extra["engine_completion_tokens"], tokens = tokens, max_tokens
    elif tokens < MINIMUM["output_tokens"] and finish is not None:  # an empty generation's count without
        # the token it ended on (one of no certain finish says no length, and 0 is one: ``output_length``)
        extra["engine_completion_tokens"], tokens = tokens, MINIMUM["output_tokens"]
    return EngineReply(
        output=str(text or ""),
        completion_tokens=tokens,
        finish_reason=UNREAD if finish is None else finish,
        wall_time_s=wall_time_s,
        extra=extra,
    )


def _token_extras(choice: dict[str, Any]) -> dict[str, Any]:
    """The generated token ids and logprobs, when the params asked for them (``return_token_ids``,
    ``logprobs``, ``top_logprobs``: vLLM's and SGLang's fields, sent as given): an RL trainer
    needs the tokens the engine sampled, and re-tokenizing the text does not give them back."""
    extras: dict[str, Any] = {}
    if isinstance(choice.get("token_ids"), list):  # vLLM >= 0.10.2 and SGLang, return_token_ids
        extras["token_ids"] = choice["token_ids"]
    if choice.get("logprobs") is not None:
        extras["logprobs"] = choice["logprobs"]
    return extras


def with_engine_prompt(
    reply: EngineReply, answer: dict[str, Any], prompt_tokens: int, sent_ids: bool
) -> EngineReply:
    """``reply`` with the engine's ``usage.prompt_tokens`` in ``extra`` where it differs from the
    item's: the engine counts the chat template and its own tokenizer's tokens, the trainer may
    not, and a difference is what leaves ``max_tokens`` past the context (see ``cap``).

    And the prompt's token ids the engine answered (``return_token_ids``: vLLM puts
    ``prompt_token_ids`` on a completion's choice, at the top of a chat's answer), unless the prompt
    was sent as ids (``sent_ids``: the same list, which the trainer holds). For a text or a chat they
    are what the engine generated after, chat template included: the trainer's loss needs exactly
    those, and tokenizing the messages again may not give them back."""
    extra = dict(reply.extra)
    counted = answer.get("usage", {}).get("prompt_tokens")
    if isinstance(counted, int) and not isinstance(counted, bool) and counted != prompt_tokens:
        extra["engine_prompt_tokens"] = counted
    choices = answer.get("choices") or [{}]
    ids = choices[0].get("prompt_token_ids") or answer.get("prompt_token_ids")
    if isinstance(ids, list) and not sent_ids:
        extra["prompt_token_ids"] = ids
    return reply if extra == reply.extra else replace(reply, extra=extra)


def _message_extras(message: dict[str, Any]) -> dict[str, Any]:
    """What a chat answer holds beside ``content``: reasoning (vLLM ``reasoning``, formerly and in
    SGLang ``reasoning_content``) and tool calls, which count in ``completion_tokens`` too."""
    extras: dict[str, Any] = {}
    reasoning = message.get("reasoning") or message.get("reasoning_content")
    if reasoning:
        extras["reasoning"] = str(reasoning)
    if message.get("tool_calls"):
        extras["tool_calls"] = message["tool_calls"]
    return extras


def result_of(held: Held, reply: EngineReply, concurrency: float) -> TrajectoryResult:
    """The result to complete with; ``concurrency`` (mean sequences in flight while it ran) lets the
    service learn this worker's speed from the actual (``service/speeds/learner.py``). A finish of no
    certain meaning (``parse_reply``) is said in a warning naming the item: delivered, the trainer gets
    the output, but no actual is made of it, and an operator must learn why an engine's results
    teach the predictor nothing (a gateway's content filter, a newer engine's word)."""
    item = held.lease.item
    if reply.finish_reason == UNREAD:
        log.warning(
            "%s: the engine's finish_reason %s has no certain meaning: stored as 'abort' (no length "
            "learned from it), the engine's word in extra.engine_finish_reason",
            held.lease.key,
            _shown(reply.extra.get("engine_finish_reason")),
        )
    return TrajectoryResult(
        output_tokens=reply.completion_tokens,
        finish_reason=reply.finish_reason,
        wall_time_s=reply.wall_time_s,
        output=reply.output,
        extra={
            **bounded_extra(reply.extra),  # an engine's answer nested past what the service serves
            "prompt_id": item.prompt_id,
            "sample_idx": item.sample_idx,
            "prompt_tokens": item.prompt_tokens,
            "predicted_tokens": item.predicted_tokens,
            "max_new_tokens": item.max_new_tokens,  # a cut output is a lower bound below this cap
            "attempt": held.lease.attempt,
            "concurrency": round(concurrency, 3),
        },
    )


def _shown(word: Any) -> str:
    """An engine's finish reason as a log line quotes it: JSON, at most 80 characters."""
    text = json.dumps(word, ensure_ascii=True, default=str)
    return text if len(text) <= 80 else text[:77] + "..."
