"""The engine client keeps an item's cap within the model's context: cut to what the prompt leaves, and
retried once with the room an engine names when it counts the prompt longer than the trainer did."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from service.delivery.records import DeliveryItem
from service.engine_sim.app import build_config, create_app
from service.sidecar.engine_client import EngineClient, EngineOptions
from service.sidecar.engine_reply import EngineError, EngineReply
from tests.service.sidecar.engines import chat_answer, generate, make_item, on_vllm, vllm_models


def test_a_cap_past_the_models_context_is_cut_to_what_the_prompt_leaves() -> None:
    # engine-sim here, like vLLM, lists max_model_len 8,192 and refuses prompt + max_tokens above it
    item = make_item({"prompt": "q", "rollout": {"output_tokens": 9_000}}, cap=8_192)
    reply = generate(item)
    assert (reply.completion_tokens, reply.finish_reason) == (8_192 - 40, "length")
    unlisted = EngineClient(EngineOptions("http://x"), httpx.AsyncClient())  # no listing read yet
    assert unlisted.cap(item) == 8_192


def _too_long(wording: str, context: int, tokens: int, asked: int) -> dict[str, Any]:
    """A 400 body for a prompt of ``tokens`` plus ``asked`` past ``context``, as each engine says it."""
    messages = {
        "vllm-0.10": (
            f"'max_tokens' or 'max_completion_tokens' is too large: {asked}. This model's maximum "
            f"context length is {context} tokens and your request has {tokens} input tokens "
            f"({asked} > {context} - {tokens})."
        ),
        "vllm-0.9": (  # older vLLM, with its flat error body
            f"This model's maximum context length is {context} tokens. However, you requested "
            f"{tokens + asked} tokens ({tokens} in the messages, {asked} in the completion). Please reduce "
            f"the length of the messages or completion."
        ),
        "vllm-later": (
            f"This model's maximum context length is {context} tokens. However, you requested {asked} "
            f"output tokens and your prompt contains at least {tokens} input tokens, for a total of at "
            f"least {tokens + asked} tokens. Please reduce the length of the input prompt or the number "
            f"of requested output tokens. (parameter=input_tokens, value={tokens})"
        ),
        "sglang": (
            f"Requested token count exceeds the model's maximum context length of {context} tokens. You "
            f"requested a total of {tokens + asked} tokens: {tokens} tokens from the input messages and "
            f"{asked} tokens for the completion. Please reduce the number of tokens in the input messages "
            f"or the completion to fit within the limit."
        ),
    }
    error = {"message": messages[wording], "type": "BadRequestError", "param": None, "code": 400}
    if wording == "vllm-0.10":
        error["param"] = "max_tokens"
    return {"object": "error", **error} if wording not in ("vllm-later", "vllm-0.10") else {"error": error}


@pytest.mark.parametrize(
    ("wording", "room"), [("vllm-0.10", 948), ("vllm-0.9", 948), ("vllm-later", 948), ("sglang", 947)]
)
def test_a_cap_refused_for_the_context_is_retried_with_the_room_whatever_the_engines_wording(
    wording: str, room: int
) -> None:
    """The trainer's prompt_tokens left out the chat template: the engine counts 1,100 where it said
    1,000, and the cap is retried once with the room the engine names. vLLM 0.10, older vLLM (the
    flat error body), later vLLM and SGLang name the input count in other words; SGLang refuses input
    + max_tokens equal to the context too, so its room is one token less."""
    asked: list[int] = []

    def engine(request: httpx.Request) -> httpx.Response:
        listed = vllm_models(request, context=2048)
        if listed is not None:
            return listed
        max_tokens = json.loads(request.content)["max_tokens"]
        asked.append(max_tokens)
        if 1100 + max_tokens >= 2048 + (wording != "sglang"):
            return httpx.Response(400, json=_too_long(wording, 2048, 1100, max_tokens))
        return chat_answer({"content": "ok"}, "length", max_tokens)

    item = DeliveryItem("p#1", "p", 1, 1000, 4096, 300.0, {"messages": [{"role": "user", "content": "q"}]})
    reply = on_vllm(engine, item)
    assert asked == [1048, room]
    assert (reply.completion_tokens, reply.finish_reason) == (room, "length")


def test_a_prompt_alone_past_the_context_is_not_retried() -> None:
    asked: list[int] = []

    def engine(request: httpx.Request) -> httpx.Response:
        listed = vllm_models(request, context=2048)
        if listed is not None:
            return listed
        asked.append(json.loads(request.content)["max_tokens"])
        return httpx.Response(400, json=_too_long("vllm-0.9", 2048, 2100, asked[-1]))

    item = DeliveryItem("p#1", "p", 1, 1000, 4096, 300.0, {"messages": [{"role": "user", "content": "q"}]})
    with pytest.raises(EngineError, match="maximum context length") as refused:
        on_vllm(engine, item)
    assert asked == [1048]
    assert not refused.value.retryable


def _generate_on_sim(item: DeliveryItem, max_model_len: int = 2048) -> tuple[EngineReply, list[int]]:
    """Generate ``item`` on engine-sim after ``ready`` (so its context is known); also return the
    ``max_tokens`` of every generation request the sidecar sent."""
    asked: list[int] = []

    async def run() -> EngineReply:
        app = create_app(build_config("H100", time_scale=0.001, max_model_len=max_model_len))

        async def note(request: httpx.Request) -> None:
            if request.url.path.endswith("completions"):
                asked.append(json.loads(request.content)["max_tokens"])

        hooks = {"request": [note]}
        http = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://engine", event_hooks=hooks
        )
        client = EngineClient(EngineOptions("http://engine"), http)
        try:
            await client.ready()
            return await client.generate(item)
        finally:
            await client.aclose()

    return asyncio.run(run()), asked


def test_a_cap_engine_sim_refuses_for_the_context_is_retried_with_the_room_it_names() -> None:
    """The trainer counted 1,000 prompt tokens; the engine counts 1,100 (the chat template). Engine-sim
    words its refusal as vLLM does, so the sidecar retries with the room it names, not fail the item."""
    chat = [{"role": "user", "content": "q"}]
    payload = {"messages": chat, "rollout": {"prompt_tokens": 1100, "output_tokens": 5000}}
    reply, asked = _generate_on_sim(DeliveryItem("p#1", "p", 1, 1000, 4096, 300.0, payload))
    assert asked == [2048 - 1000, 2048 - 1100]
    assert (reply.completion_tokens, reply.finish_reason) == (2048 - 1100, "length")


def test_min_tokens_above_the_cap_the_sidecar_sends_is_lowered_to_it() -> None:
    """vLLM refuses min_tokens above max_tokens (400, the item's fault): a cap the sidecar cut to the
    context must not turn a payload's min_tokens into a refusal that dead-letters the item."""
    payload = {"prompt": "q", "params": {"min_tokens": 3000}, "rollout": {"output_tokens": 10}}
    reply, asked = _generate_on_sim(DeliveryItem("p#1", "p", 1, 1000, 4096, 300.0, payload))
    assert asked == [2048 - 1000]
    assert (reply.completion_tokens, reply.finish_reason) == (2048 - 1000, "length")
    client = EngineClient(EngineOptions("http://x"), httpx.AsyncClient())
    _, body = client.request_for(make_item({"prompt": "q", "params": {"min_tokens": 100}}), "m")
    assert body["min_tokens"] == 100  # within the cap: as the payload says
