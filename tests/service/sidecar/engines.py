"""Engines for the engine client's tests: engine-sim's real app in process, and answers shaped like vLLM's.

Shared by the request, context and failure tests of ``EngineClient`` so that each states one
behaviour against the same engines rather than its own copy of them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx

from service.delivery.records import DeliveryItem
from service.engine_sim.app import build_config, create_app
from service.sidecar.engine_client import EngineClient, EngineOptions
from service.sidecar.engine_reply import EngineReply


def make_item(payload: dict[str, Any], cap: int = 512) -> DeliveryItem:
    """Sample 1 of prompt ``p`` (40 prompt tokens) under ``cap``, carrying ``payload``."""
    return DeliveryItem("p#1", "p", 1, 40, cap, 300.0, payload)


def generate(item: DeliveryItem, synthetic: bool = False) -> EngineReply:
    """Generate ``item`` on engine-sim's app (an H100, context 8,192) without ``ready`` first, so the
    client has read no model listing."""

    async def run() -> EngineReply:
        app = create_app(build_config("H100", time_scale=0.001, max_model_len=8192))
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://engine")
        client = EngineClient(EngineOptions("http://engine", synthetic_prompts=synthetic), http)
        try:
            return await client.generate(item)
        finally:
            await client.aclose()

    return asyncio.run(run())


def on_vllm(
    handler: Callable[[httpx.Request], httpx.Response], item: DeliveryItem | None = None
) -> EngineReply:
    """Generate ``item`` against a server answering like vLLM's (``handler``), after ``ready``."""

    async def run() -> EngineReply:
        http = httpx.AsyncClient(transport=httpx.MockTransport(handler), base_url="http://engine")
        client = EngineClient(EngineOptions("http://engine", model="qwen"), http)
        try:
            await client.ready()
            return await client.generate(item or make_item({"messages": [{"role": "user", "content": "q"}]}))
        finally:
            await client.aclose()

    return asyncio.run(run())


def vllm_models(request: httpx.Request, context: int = 4096) -> httpx.Response | None:
    """vLLM's /v1/models and /health, or None for a generation request."""
    if request.url.path == "/v1/models":
        card = {"id": "qwen", "object": "model", "owned_by": "vllm", "max_model_len": context}
        return httpx.Response(200, json={"object": "list", "data": [card]})
    if request.url.path == "/health":
        return httpx.Response(200)
    return None


def chat_answer(message: dict[str, Any], finish: str, tokens: int) -> httpx.Response:
    """A chat-completions answer of ``message`` that ended with ``finish`` after ``tokens`` tokens."""
    choice = {"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}
    return httpx.Response(200, json={"choices": [choice], "usage": {"completion_tokens": tokens}})
