"""What the simulated engine answers in place of a model's output: filler text, and the token ids
and log-probabilities a client may ask for, in vLLM's shapes, one placeholder token per token
generated. ``service.engine_sim.app`` puts them in the OpenAI envelopes it answers.
"""

from __future__ import annotations

from typing import Any

FILLER_TOKEN_ID = 0  # the id each placeholder token answers ``return_token_ids`` with
FILLER_TOKEN = " sim"  # each placeholder token's text (``filler``)
FILLER_LOGPROB = 0.0  # each placeholder token's log-probability: the simulated engine is sure of it


def filler(tokens: int) -> str:
    """Placeholder text of ``tokens`` words; the simulation generates no real output."""
    return FILLER_TOKEN * tokens


def token_ids(tokens: int) -> list[int]:
    """The generated token ids, one placeholder id per token (``return_token_ids``)."""
    return [FILLER_TOKEN_ID] * tokens


def completion_logprobs(tokens: int) -> dict[str, Any]:
    """``choice.logprobs`` of a completion in vLLM's shape (``CompletionLogProbs``), one entry per
    placeholder token: a trainer that keeps the rollout's log-probabilities (PPO/GRPO importance
    ratios) reads them from the stand-in as from vLLM; the only alternative a token has is itself."""
    return {
        "text_offset": [i * len(FILLER_TOKEN) for i in range(tokens)],
        "token_logprobs": [FILLER_LOGPROB] * tokens,
        "tokens": [FILLER_TOKEN] * tokens,
        "top_logprobs": [{FILLER_TOKEN: FILLER_LOGPROB} for _ in range(tokens)],  # the sampled one, as vLLM
    }


def chat_logprobs(tokens: int, top: int) -> dict[str, Any]:
    """``choice.logprobs`` of a chat completion in the OpenAI shape vLLM answers (``content``: per
    token its text, log-probability, UTF-8 bytes and up to ``top`` alternatives)."""
    raw = list(FILLER_TOKEN.encode())
    alternatives = [{"token": FILLER_TOKEN, "logprob": FILLER_LOGPROB, "bytes": raw}][:top]
    entry = {"token": FILLER_TOKEN, "logprob": FILLER_LOGPROB, "bytes": raw, "top_logprobs": alternatives}
    return {"content": [dict(entry) for _ in range(tokens)]}
