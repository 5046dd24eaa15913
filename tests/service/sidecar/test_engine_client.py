"""The sidecar's engine client against the simulated engine's real HTTP app."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from service.delivery.records import DeliveryItem
from service.engine_sim.app import build_config, create_app
from service.sidecar.engine_client import EngineClient, EngineError, EngineOptions, EngineReply


def _item(payload: dict[str, Any], cap: int = 512) -> DeliveryItem:
    return DeliveryItem("p#1", "p", 1, 40, cap, 300.0, payload)


def _generate(item: DeliveryItem, synthetic: bool = False) -> EngineReply:
    async def run() -> EngineReply:
        app = create_app(build_config("H100", time_scale=0.001, max_model_len=8192))
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://engine")
        client = EngineClient(EngineOptions("http://engine", synthetic_prompts=synthetic), http)
        try:
            return await client.generate(item)
        finally:
            await client.aclose()

    return asyncio.run(run())


def test_a_prompt_goes_to_completions_and_the_reply_carries_the_actual_length() -> None:
    reply = _generate(_item({"prompt": "2+2?", "rollout": {"output_tokens": 77}}))
    assert (reply.completion_tokens, reply.finish_reason) == (77, "stop")
    assert reply.output.count("sim") == 77


def test_messages_go_to_chat_completions_and_the_cap_is_max_new_tokens() -> None:
    item = _item({"messages": [{"role": "user", "content": "hi"}], "rollout": {"output_tokens": 900}})
    reply = _generate(item)
    assert (reply.completion_tokens, reply.finish_reason) == (512, "length")


def test_the_request_merges_sampling_params_and_names_the_trajectory_to_engine_sim_only() -> None:
    client = EngineClient(EngineOptions("http://x"), httpx.AsyncClient())
    path, body = client.request_for(_item({"prompt": "q", "params": {"temperature": 0.7}}), "m")
    assert path == "/v1/completions"
    assert (body["model"], body["max_tokens"], body["temperature"]) == ("m", 512, 0.7)
    assert "rollout" not in body  # vLLM warns on every request with a field it does not know

    async def to_engine_sim() -> dict[str, Any]:
        app = create_app(build_config("H100", time_scale=0.001))
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://engine")
        sim = EngineClient(EngineOptions("http://engine"), http)
        await sim.ready()  # its /v1/models card says it is engine-sim
        await sim.aclose()
        return sim.request_for(_item({"prompt": "q"}), "m")[1]

    assert asyncio.run(to_engine_sim())["rollout"] == {"prompt_id": "p", "sample_idx": 1, "prompt_tokens": 40}


def test_a_seed_is_the_prompts_base_and_each_sample_is_drawn_with_its_own() -> None:
    client = EngineClient(EngineOptions("http://x"), httpx.AsyncClient())
    payload = {"prompt": "q", "params": {"seed": 100, "temperature": 1.0}}
    seeds = [
        client.request_for(DeliveryItem(f"p#{k}", "p", k, 40, 512, 300.0, payload), "m")[1]["seed"]
        for k in range(4)
    ]
    assert seeds == [100, 101, 102, 103]
    assert payload["params"] == {"seed": 100, "temperature": 1.0}  # the shared payload is left as it was


def test_params_from_a_publisher_other_than_the_service_cannot_change_the_sidecars_own_fields() -> None:
    # the service refuses these in sampling.extra; anything publishing through the delivery API
    # directly could still send them, and one lease must stay one capped sample
    client = EngineClient(EngineOptions("http://x"), httpx.AsyncClient())
    params = {"n": 16, "stream": True, "max_tokens": 5, "model": "other", "temperature": 0.7}
    params["max_completion_tokens"] = 100_000  # vLLM would prefer it to max_tokens
    _, body = client.request_for(_item({"prompt": "q", "params": params}), "m")
    assert (body["n"], body["stream"], body["max_tokens"], body["model"]) == (1, False, 512, "m")
    assert "max_completion_tokens" not in body
    assert body["temperature"] == 0.7


def test_a_cap_past_the_models_context_is_cut_to_what_the_prompt_leaves() -> None:
    # engine-sim here, like vLLM, lists max_model_len 8,192 and refuses prompt + max_tokens above it
    item = _item({"prompt": "q", "rollout": {"output_tokens": 9_000}}, cap=8_192)
    reply = _generate(item)
    assert (reply.completion_tokens, reply.finish_reason) == (8_192 - 40, "length")
    unlisted = EngineClient(EngineOptions("http://x"), httpx.AsyncClient())  # no listing read yet
    assert unlisted.cap(item) == 8_192


def test_an_item_without_a_prompt_is_refused_unless_synthetic_prompts_are_allowed() -> None:
    with pytest.raises(EngineError, match="no prompt or messages") as refused:
        _generate(_item({}))
    assert not refused.value.retryable
    assert _generate(_item({"rollout": {"output_tokens": 5}}), synthetic=True).completion_tokens == 5


def test_an_engine_refusal_is_not_retryable_and_an_unreachable_engine_is() -> None:
    too_long = DeliveryItem("p#1", "p", 1, 9_000, 512, 300.0, {"prompt": "q"})  # a prompt past the context
    with pytest.raises(EngineError, match="maximum context length") as refused:
        _generate(too_long)
    assert not refused.value.retryable

    with pytest.raises(EngineError, match="unreachable") as down:
        _ready(EngineClient.open(EngineOptions("http://127.0.0.1:9", connect_timeout_s=0.5)))
    assert down.value.retryable


def test_an_engine_url_s_password_never_shows_in_what_its_errors_say() -> None:
    """An engine behind a basic-auth proxy is reached as ``http://user:password@host``; its errors
    are logged, and kept as dead-letter reasons that ``GET /schedule/{id}`` shows."""
    url = "http://rollout:s3cret@127.0.0.1:9"
    with pytest.raises(EngineError, match="unreachable") as down:
        _ready(EngineClient.open(EngineOptions(url, connect_timeout_s=0.5)))
    assert "s3cret" not in str(down.value)
    assert "rollout:***@127.0.0.1:9" in str(down.value)


def _ready(client: EngineClient) -> str:
    """``client.ready()``, run to the end and the client closed."""

    async def run() -> str:
        try:
            return await client.ready()
        finally:
            await client.aclose()

    return asyncio.run(run())


def _answered(status: int, body: bytes, headers: dict[str, str] | None = None) -> EngineError:
    """The error the client raises when the engine answers ``status`` with ``body``."""

    async def run() -> None:
        def answer(request: httpx.Request) -> httpx.Response:  # a stream: decoded by the client
            return httpx.Response(status, headers=headers, stream=httpx.ByteStream(body))

        transport = httpx.MockTransport(answer)
        http = httpx.AsyncClient(transport=transport, base_url="http://engine")
        client = EngineClient(EngineOptions("http://engine", model="m"), http)  # no /v1/models read
        try:
            await client.generate(_item({"prompt": "q"}))
        finally:
            await client.aclose()

    with pytest.raises(EngineError) as raised:
        asyncio.run(run())
    return raised.value


@pytest.mark.parametrize("status", [429, 502, 503, 504])
def test_an_engine_that_is_down_or_overloaded_gets_the_item_back_without_charge(status: int) -> None:
    error = _answered(status, b"busy")
    assert (error.retryable, error.engine_down) == (True, True)


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (500, b"internal error"),
        (200, b"<html>oops</html>"),
        (200, b'{"choices": [{"text": "x"}]}'),  # no usage
        (200, b'{"choices": [{"text": "x"}], "usage": {"completion_tokens": -5}}'),
    ],
)
def test_an_engine_failing_on_the_item_is_retried_in_place_then_charged_to_it(
    status: int, body: bytes
) -> None:
    error = _answered(status, body)
    assert (error.retryable, error.engine_down) == (True, False)


def test_an_answer_that_does_not_even_decode_is_retried_in_place_then_charged_to_the_item() -> None:
    # httpx raises DecodingError, not a TransportError: it escaped as an unexpected error, charged to
    # the item at once without the in-place retries a garbled answer gets
    error = _answered(200, b"not gzip at all", headers={"Content-Encoding": "gzip"})
    assert (error.retryable, error.engine_down) == (True, False)


def _vllm(
    handler: Callable[[httpx.Request], httpx.Response], item: DeliveryItem | None = None
) -> EngineReply:
    """Generate ``item`` against a server answering like vLLM's (``handler``), after ``ready``."""

    async def run() -> EngineReply:
        http = httpx.AsyncClient(transport=httpx.MockTransport(handler), base_url="http://engine")
        client = EngineClient(EngineOptions("http://engine", model="qwen"), http)
        try:
            await client.ready()
            return await client.generate(item or _item({"messages": [{"role": "user", "content": "q"}]}))
        finally:
            await client.aclose()

    return asyncio.run(run())


def _models(request: httpx.Request, context: int = 4096) -> httpx.Response | None:
    """vLLM's /v1/models and /health, or None for a generation request."""
    if request.url.path == "/v1/models":
        card = {"id": "qwen", "object": "model", "owned_by": "vllm", "max_model_len": context}
        return httpx.Response(200, json={"object": "list", "data": [card]})
    if request.url.path == "/health":
        return httpx.Response(200)
    return None


def _chat(message: dict[str, Any], finish: str, tokens: int) -> httpx.Response:
    choice = {"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}
    return httpx.Response(200, json={"choices": [choice], "usage": {"completion_tokens": tokens}})


def test_reasoning_and_tool_calls_come_back_beside_the_content() -> None:
    def vllm(request: httpx.Request) -> httpx.Response:
        calls = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
        message = {"content": None, "reasoning": "think", "tool_calls": calls}
        return _models(request) or _chat(message, "tool_calls", 300)

    reply = _vllm(vllm)
    assert (reply.output, reply.completion_tokens, reply.finish_reason) == ("", 300, "stop")
    assert reply.extra["reasoning"] == "think"
    assert reply.extra["tool_calls"][0]["function"]["name"] == "f"
    assert reply.extra["engine_finish_reason"] == "tool_calls"


def test_a_request_the_engine_aborted_goes_back_without_charge() -> None:
    """vLLM's /pause (weight sync in RL frameworks) aborts in-flight requests with finish 'abort'."""
    with pytest.raises(EngineError) as aborted:
        _vllm(lambda request: _models(request) or _chat({"content": "partial"}, "abort", 7))
    assert (aborted.value.retryable, aborted.value.engine_down) == (False, True)


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (401, b'{"error": "Unauthorized"}'),  # the sidecar's engine key, not the item
        (404, b'{"error": {"message": "The model `qwen` does not exist.", "param": "model"}}'),
        (500, b""),  # vLLM's dead engine core: a bare 500
    ],
)
def test_an_engine_side_refusal_gets_the_item_back_without_charge(status: int, body: bytes) -> None:
    error = _answered(status, body)
    assert error.engine_down


def test_a_configured_model_the_engine_does_not_serve_is_not_ready() -> None:
    transport = httpx.MockTransport(lambda request: _models(request) or httpx.Response(500))
    http = httpx.AsyncClient(transport=transport, base_url="http://engine")
    with pytest.raises(EngineError, match="does not serve 'qwen-typo'") as refused:
        _ready(EngineClient(EngineOptions("http://engine", model="qwen-typo"), http))
    assert refused.value.engine_down


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
        listed = _models(request, context=2048)
        if listed is not None:
            return listed
        max_tokens = json.loads(request.content)["max_tokens"]
        asked.append(max_tokens)
        if 1100 + max_tokens >= 2048 + (wording != "sglang"):
            return httpx.Response(400, json=_too_long(wording, 2048, 1100, max_tokens))
        return _chat({"content": "ok"}, "length", max_tokens)

    item = DeliveryItem("p#1", "p", 1, 1000, 4096, 300.0, {"messages": [{"role": "user", "content": "q"}]})
    reply = _vllm(engine, item)
    assert asked == [1048, room]
    assert (reply.completion_tokens, reply.finish_reason) == (room, "length")


def test_a_prompt_alone_past_the_context_is_not_retried() -> None:
    asked: list[int] = []

    def engine(request: httpx.Request) -> httpx.Response:
        listed = _models(request, context=2048)
        if listed is not None:
            return listed
        asked.append(json.loads(request.content)["max_tokens"])
        return httpx.Response(400, json=_too_long("vllm-0.9", 2048, 2100, asked[-1]))

    item = DeliveryItem("p#1", "p", 1, 1000, 4096, 300.0, {"messages": [{"role": "user", "content": "q"}]})
    with pytest.raises(EngineError, match="maximum context length") as refused:
        _vllm(engine, item)
    assert asked == [1048]
    assert not refused.value.retryable


def test_a_connection_dropped_mid_response_is_not_called_unreachable_and_may_be_the_items() -> None:
    async def run() -> tuple[EngineError, EngineError]:
        async def half_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b'HTTP/1.1 200 OK\r\ncontent-length: 500\r\n\r\n{"choices": [')
            await writer.drain()
            writer.close()  # the engine's worker died on this request, mid-answer

        server = await asyncio.start_server(half_answer, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        errors = []
        for url in (f"http://127.0.0.1:{port}", "http://127.0.0.1:9"):
            client = EngineClient.open(EngineOptions(url, model="m"))
            with pytest.raises(EngineError) as caught:
                await client.generate(_item({"prompt": "q"}))
            errors.append(caught.value)
            await client.aclose()
        server.close()
        return errors[0], errors[1]

    dropped, refused = asyncio.run(run())
    assert "dropped the connection" in str(dropped)
    assert "unreachable" not in str(dropped)
    assert (dropped.engine_down, dropped.suspect) == (True, True)
    assert "unreachable" in str(refused)
    assert (refused.engine_down, refused.suspect) == (True, False)  # never charged to the item


def test_a_frozen_engine_fails_the_readiness_and_health_probes_within_the_probe_timeout() -> None:
    async def run() -> list[str]:
        async def frozen(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await asyncio.sleep(30)  # the kernel accepted the connection; the process never reads it

        server = await asyncio.start_server(frozen, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = EngineClient.open(EngineOptions(f"http://127.0.0.1:{port}", probe_timeout_s=0.2))
        messages = []
        for probe in (client.ready, client.probe):
            started = asyncio.get_running_loop().time()
            with pytest.raises(EngineError) as caught:
                await probe()
            assert asyncio.get_running_loop().time() - started < 1.0
            assert caught.value.engine_down
            messages.append(str(caught.value))
        await client.aclose()
        server.close()
        return messages

    assert all("did not answer within 0.2s" in m for m in asyncio.run(run()))


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
    _, body = client.request_for(_item({"prompt": "q", "params": {"min_tokens": 100}}), "m")
    assert body["min_tokens"] == 100  # within the cap: as the payload says


def test_a_generation_the_engine_ended_in_error_is_not_a_result() -> None:
    """vLLM's finish_reason 'error' (a request-level failure such as a KV load failure) carries no
    trajectory; vLLM turns it into a 500, and a 200 carrying it must be treated the same."""
    with pytest.raises(EngineError, match="error") as failed:
        _vllm(lambda request: _models(request) or _chat({"content": ""}, "error", 3))
    assert (failed.value.retryable, failed.value.engine_down) == (True, False)
