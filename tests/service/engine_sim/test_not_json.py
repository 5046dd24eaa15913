"""A body that is not JSON, answered as vLLM answers it: a 400 in its error shape with ``param`` null.

vLLM's handler of a ``RequestValidationError`` (``validation_exception_handler``, 0.11.0's in
``vllm/entrypoints/openai/api_server.py``) builds its ``ErrorResponse`` with no ``param`` at all, and
later releases set one only from a ``VLLMValidationError`` in the error's context, which a JSON
decode error never carries. The stand-in said ``"body"`` there (nits67); a field it names still
leads ``param`` (user66), as ``test_app``'s malformed-request test pins.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest

from service.engine_sim.app import build_config, create_app


async def _send(content: bytes) -> httpx.Response:
    app = create_app(build_config("H100", time_scale=0.001, max_model_len=4096))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sim") as client:
        return await client.post(
            "/v1/completions", content=content, headers={"content-type": "application/json"}
        )


@pytest.mark.parametrize("content", [b"{not json", b'{"prompt": "x",}', b"\xff\xfe"])
def test_a_body_that_is_not_json_is_a_400_naming_no_param(content: bytes) -> None:
    response = asyncio.run(_send(content))
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] is None
    assert (error["type"], error["code"]) == ("BadRequestError", 400)
    assert "JSON" in error["message"]
