"""How the engine client words and classes an engine's failures: retryable or not, the engine's fault
(the item back without charge) or the item's, and never a password of the engine's URL."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from service.delivery.records import DeliveryItem
from service.sidecar.engine_client import EngineClient, EngineOptions
from service.sidecar.engine_reply import EngineError, EngineReply
from tests.service.sidecar.engines import chat_answer, generate, make_item, on_vllm, vllm_models


def test_an_item_without_a_prompt_is_refused_unless_synthetic_prompts_are_allowed() -> None:
    with pytest.raises(EngineError, match="no prompt or messages") as refused:
        generate(make_item({}))
    assert not refused.value.retryable
    assert generate(make_item({"rollout": {"output_tokens": 5}}), synthetic=True).completion_tokens == 5


def test_an_engine_refusal_is_not_retryable_and_an_unreachable_engine_is() -> None:
    too_long = DeliveryItem("p#1", "p", 1, 9_000, 512, 300.0, {"prompt": "q"})  # a prompt past the context
    with pytest.raises(EngineError, match="maximum context length") as refused:
        generate(too_long)
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


def _generated(status: int, body: bytes, headers: dict[str, str] | None = None) -> EngineReply:
    """What ``generate`` makes of the engine's answer ``status`` with ``body`` (cap 512)."""

    async def run() -> EngineReply:
        def answer(request: httpx.Request) -> httpx.Response:  # a stream: decoded by the client
            return httpx.Response(status, headers=headers, stream=httpx.ByteStream(body))

        transport = httpx.MockTransport(answer)
        http = httpx.AsyncClient(transport=transport, base_url="http://engine")
        client = EngineClient(EngineOptions("http://engine", model="m"), http)  # no /v1/models read
        try:
            return await client.generate(make_item({"prompt": "q"}))
        finally:
            await client.aclose()

    return asyncio.run(run())


def _answered(status: int, body: bytes, headers: dict[str, str] | None = None) -> EngineError:
    """The error the client raises when the engine answers ``status`` with ``body``."""
    with pytest.raises(EngineError) as raised:
        _generated(status, body, headers)
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
        (200, b'{"choices": [{"text": "x"}], "usage": {"completion_tokens": 1e999}}'),  # inf: no count
    ],
)
def test_an_engine_failing_on_the_item_is_retried_in_place_then_charged_to_it(
    status: int, body: bytes
) -> None:
    error = _answered(status, body)
    assert (error.retryable, error.engine_down) == (True, False)


def test_a_count_above_the_max_tokens_sent_is_taken_as_the_cap() -> None:
    """An engine cannot generate past ``max_tokens`` (here the item's cap, 512), but its count can
    pass it (a speculative chunk accepted past the cap). Stored as counted, the
    result failed the trainer's whole ``report_results`` (``ActualReport`` refuses output above
    ``max_new_tokens``); refused, a good trajectory would be dead-lettered. Its length is the cap,
    and the engine's count is kept in ``extra``."""
    answer = b'{"choices": [{"text": "x", "finish_reason": "length"}], "usage": {"completion_tokens": 515}}'
    reply = _generated(200, answer)
    assert (reply.completion_tokens, reply.finish_reason) == (512, "length")
    assert reply.extra["engine_completion_tokens"] == 515


def test_a_count_of_no_token_is_taken_as_the_token_the_generation_ended_on() -> None:
    """A generation is at least the token it ended on (an empty one is its EOS), as ``/done``,
    ``POST /actuals`` and the trace format hold. Stored as counted, the result was reported by no
    client (``says_length``); refused, a trajectory that ran would be dead-lettered. Its length is
    one token, and the engine's count is kept in ``extra``."""
    answer = b'{"choices": [{"text": "", "finish_reason": "stop"}], "usage": {"completion_tokens": 0}}'
    reply = _generated(200, answer)
    assert (reply.completion_tokens, reply.finish_reason, reply.output) == (1, "stop", "")
    assert reply.extra["engine_completion_tokens"] == 0


def test_an_answer_that_does_not_even_decode_is_retried_in_place_then_charged_to_the_item() -> None:
    # httpx raises DecodingError, not a TransportError: it escaped as an unexpected error, charged to
    # the item at once without the in-place retries a garbled answer gets
    error = _answered(200, b"not gzip at all", headers={"Content-Encoding": "gzip"})
    assert (error.retryable, error.engine_down) == (True, False)


def test_a_request_the_engine_aborted_goes_back_without_charge() -> None:
    """vLLM's /pause (weight sync in RL frameworks) aborts in-flight requests with finish 'abort'."""
    with pytest.raises(EngineError) as aborted:
        on_vllm(lambda request: vllm_models(request) or chat_answer({"content": "partial"}, "abort", 7))
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


@pytest.mark.parametrize(("status", "dropped"), [(500, True), (502, False), (503, False), (504, False)])
def test_a_bare_500_is_a_request_lost_as_a_dying_engine_loses_it_and_a_gateways_502_to_504_not(
    status: int, dropped: bool
) -> None:
    # vLLM's dead engine core answers the requests it held with a bare 500: the runner marks an
    # item whose try was lost so as one its engine may have died running; a gateway's or a pausing
    # engine's 502-504 is no sign of that
    error = _answered(status, b"")
    assert error.suspect
    assert error.dropped is dropped


def test_a_configured_model_the_engine_does_not_serve_is_not_ready() -> None:
    transport = httpx.MockTransport(lambda request: vllm_models(request) or httpx.Response(500))
    http = httpx.AsyncClient(transport=transport, base_url="http://engine")
    with pytest.raises(EngineError, match="does not serve 'qwen-typo'") as refused:
        _ready(EngineClient(EngineOptions("http://engine", model="qwen-typo"), http))
    assert refused.value.engine_down


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
                await client.generate(make_item({"prompt": "q"}))
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


def test_a_generation_the_engine_ended_in_error_is_not_a_result() -> None:
    """vLLM's finish_reason 'error' (a request-level failure such as a KV load failure) carries no
    trajectory; vLLM turns it into a 500, and a 200 carrying it must be treated the same."""
    with pytest.raises(EngineError, match="error") as failed:
        on_vllm(lambda request: vllm_models(request) or chat_answer({"content": ""}, "error", 3))
    assert (failed.value.retryable, failed.value.engine_down) == (True, False)
