"""An engine's 400 for prompt + ``max_tokens`` past the model's context, read for the room left.

The sidecar caps ``max_tokens`` at the context minus the item's ``prompt_tokens`` (``EngineClient.cap``),
but that count is the trainer's: one that left out the chat template, or counted with another
tokenizer, still passes the context, and the engine refuses the request. Its message names the
input count it made, so the request can be sent once more with the room that really is left
instead of charging the item. Each engine words the refusal its own way, and vLLM has changed its
wording over releases; the forms below are read from their sources (docs/experiments.md, "Engine
interface review").
"""

from __future__ import annotations

import re

# ``limit``: the context, ``tokens``: the request's input as the engine counted it; the int is how many
# tokens fewer than limit - tokens the engine accepts.
_LIMIT, _TOKENS = r"(?P<limit>\d+)", r"(?P<tokens>\d+)"
_PAST_CONTEXT: tuple[tuple[re.Pattern[str], int], ...] = (
    # vLLM (mid versions): "'max_tokens' ... is too large: 1048. This model's maximum context length is
    # 2048 tokens and your request has 1100 input tokens (1048 > 2048 - 1100)."
    (re.compile(rf"maximum context length is {_LIMIT} tokens and your request has {_TOKENS} input"), 0),
    # older vLLM (its flat error body): "This model's maximum context length is 2048 tokens.
    # However, you requested 2148 tokens (1100 in the messages, 1048 in the completion). ..."
    (re.compile(rf"maximum context length is {_LIMIT} tokens\. However, .*?\({_TOKENS} in the messages"), 0),
    # later vLLM: "This model's maximum context length is 2048 tokens. However, you requested 1048
    # output tokens and your prompt contains at least 1100 input tokens, ..."
    (
        re.compile(
            rf"maximum context length is {_LIMIT} tokens\..*?prompt contains (?:at least )?{_TOKENS} input"
        ),
        0,
    ),
    # SGLang (TokenizerManager._validate_one_request): "Requested token count exceeds the model's
    # maximum context length of 2048 tokens. You requested a total of 2148 tokens: 1100 tokens from
    # the input messages and 1048 tokens for the completion. ..." Older releases refused input +
    # max_new_tokens equal to the context too (``>=``), its main branch only past it (``>``): one
    # token less fits both, at the cost of one token on the newer ones.
    (
        re.compile(
            rf"maximum context length of {_LIMIT} tokens\..*?: {_TOKENS} tokens from the input messages"
        ),
        1,
    ),
)


def room_left(status: int, message: str, asked: int) -> int | None:
    """The ``max_tokens`` that fits where the engine refused ``asked`` for the context (``message``
    names the input count, in one of vLLM's wordings or SGLang's), or None when the refusal
    (``status``, ``message``) was something else or leaves no room to ask for less."""
    if status != 400:
        return None
    for pattern, margin in _PAST_CONTEXT:
        found = pattern.search(message)
        if found is not None:
            room = int(found["limit"]) - int(found["tokens"]) - margin
            return room if 1 <= room < asked else None
    return None
