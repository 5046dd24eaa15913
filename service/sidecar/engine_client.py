"""The sidecar's client of the local inference engine's OpenAI-compatible API (vLLM, SGLang, engine-sim).

One trajectory is one non-streaming request with ``max_tokens`` = the item's cap (within the model's
context, when the engine lists it: ``EngineClient.cap``). The item's payload
says what to send: ``messages`` (a chat, to ``/v1/chat/completions``) or ``prompt`` (text or token ids,
to ``/v1/completions``), plus ``params`` (the request's sampling fields: temperature, stop...)
merged into the body under the sidecar's own fields (``service.sidecar.sampling``: a ``seed`` there is the
prompt's base seed, and sample ``k`` is drawn with ``seed + k``; a ``min_tokens`` is lowered to the
``max_tokens`` sent). A request to engine-sim (its
``/v1/models`` card says so) also carries a ``rollout`` object (prompt id, sample index, prompt
tokens, and whatever the payload's ``rollout`` adds) that it reads; real engines are not sent it
(vLLM logs a warning for every request with a field it does not know).

Who is at fault decides what happens to the item (``EngineError``, in ``engine_reply``). The engine is
(the item goes back without spending an attempt): unreachable, 429/502/503/504, a bare 500 (vLLM's dead
engine core), a 401/403 (its API key), a 404 naming the model (not served: also refused by ``ready``),
and a request it aborted (``finish_reason`` ``abort``: an RL framework pausing generation to sync
weights). The item is: any other 4xx, and (after the retries in place) a 500 with an error body or a
generation that ended in ``finish_reason`` ``error`` (vLLM's request-level failure, which vLLM answers
as a 500). A dropped connection, a bare 500 or a 502-504 is ``suspect`` too: the runner charges the item
once a healthy engine keeps failing it (``service.sidecar.watchdog``). Generations have no read timeout;
readiness (``ready``) and health (``probe``) checks answer within ``probe_timeout_s``, so a frozen
engine cannot hang the sidecar's main loop. A 400 for prompt + ``max_tokens`` past the context (the
trainer's ``prompt_tokens`` left out the chat template) is retried once with the cap the engine's
message leaves room for (SGLang's: one token less, as it also refuses prompt + ``max_tokens`` equal to
the context).

Cancelling ``generate`` closes the connection, which makes vLLM (at once: its routes wait on the
disconnect), SGLang (at the request's next output, every 50 tokens unstreamed, or its
``SGLANG_REQUEST_STATE_WAIT_TIMEOUT`` poll, 4 s, whichever is first) and engine-sim abort the
request and free its slot: that is how a lost lease stops a trajectory. What comes back, and how it
is read, is ``service.sidecar.engine_reply``.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from service.delivery.records import DeliveryItem
from service.redis_conn import describe, masked_repr
from service.sidecar.context_refusal import room_left
from service.sidecar.engine_reply import EngineError, EngineReply, parse_reply, with_engine_prompt
from service.sidecar.sampling import sample_params

ENGINE_DOWN = frozenset({429, 502, 503, 504})  # overloaded, restarting, or a proxy without it
ENGINE_CONFIG = frozenset({401, 403})  # the sidecar's key for the engine: not the item's fault
SUSPECT = frozenset({500, 502, 503, 504})  # engine-down answers a healthy engine may give one item
OWNED = frozenset(  # ours: one capped, unstreamed sample per request (``stream_options`` without
    # ``stream`` is a 400 on vLLM; ``best_of`` draws several); the service's ENGINE_OWNED
    {"model", "n", "best_of", "stream", "stream_options", "max_tokens", "max_completion_tokens", "rollout"}
)
SIMULATED = "rollout-scheduler-engine-sim"  # engine-sim's owned_by: it reads the rollout hint


JSON_HEADERS = {"content-type": "application/json"}  # what httpx set for json=, the bodies being ours


@dataclass(frozen=True, slots=True)
class EngineOptions:
    """How to talk to the engine."""

    base_url: str  # e.g. http://127.0.0.1:8000 (without /v1)
    model: str | None = None  # model id to request; None: the first one /v1/models lists
    api_key: str | None = field(default=None, repr=False)  # a bearer token when set; a secret, not in repr
    connect_timeout_s: float = 5.0  # connecting; a generation itself may take many minutes
    probe_timeout_s: float = 5.0  # readiness and health probes: an engine silent this long is not up
    synthetic_prompts: bool = False  # items without prompt text get a placeholder (engine-sim demos)

    def __repr__(self) -> str:
        """Without the key, or a password in the URL (a basic-auth proxy's)."""
        return masked_repr(self, "base_url")


class EngineClient:
    """Async client of one engine; create with ``open`` and close with ``aclose``."""

    def __init__(self, options: EngineOptions, http: httpx.AsyncClient) -> None:
        self._options = options
        self._http = http
        self._model = options.model
        self._context: int | None = None  # the model's prompt + output limit, when /v1/models says
        self._simulated = False  # engine-sim: send it the rollout hint

    @classmethod
    def open(cls, options: EngineOptions) -> EngineClient:
        """Build the client; no request is sent until ``discover`` or ``generate``."""
        headers = {"Authorization": f"Bearer {options.api_key}"} if options.api_key else {}
        timeout = httpx.Timeout(None, connect=options.connect_timeout_s)
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
        http = httpx.AsyncClient(base_url=options.base_url, headers=headers, timeout=timeout, limits=limits)
        return cls(options, http)

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def ready(self) -> str:
        """Ask the engine for its models (a liveness check); return the model id to request.

        The id is the configured one, else the first that ``/v1/models`` lists.
        """
        listing = await self._send("GET", "/v1/models", None, probe=True)
        cards = _cards(listing)
        if self._model is None:
            if not cards:
                raise EngineError("the engine's /v1/models lists no model", retryable=True)
            self._model = str(cards[0]["id"])
        card = next((c for c in cards if c.get("id") == self._model), None)
        if card is None:  # a typo, or a LoRA adapter not loaded: every request would be refused
            served = ", ".join(str(c.get("id")) for c in cards)
            raise EngineError(f"the engine does not serve {self._model!r} (it lists {served})", True, True)
        limit = card.get("max_model_len")
        self._context = limit if isinstance(limit, int) and limit > 0 else None
        self._simulated = card.get("owned_by") == SIMULATED
        await self._healthy()
        return self._model

    async def _healthy(self) -> None:
        """vLLM keeps answering /v1/models after its engine core died; its /health says 503 then (from
        0.11.0, vllm-project/vllm#24897, as pinned)."""
        try:
            response = await self._request("GET", "/health", None, probe=True)
        except httpx.TimeoutException as exc:  # answered /v1/models, then froze: not up
            raise self._transport_error(exc) from None
        except httpx.TransportError:
            return  # /v1/models just answered: the next request will tell
        if response.status_code in ENGINE_DOWN or response.status_code >= 500:
            raise EngineError(f"engine /health answered {response.status_code}", True, True)

    async def probe(self) -> None:
        """A liveness check while items run: ``/health`` within the probe timeout; ``EngineError``
        when it does not answer in time or answers a 5xx (any other answer is a sign of life)."""
        try:
            response = await self._request("GET", "/health", None, probe=True)
        except httpx.HTTPError as exc:
            raise self._transport_error(exc) from None
        if response.status_code >= 500:
            raise EngineError(f"engine /health answered {response.status_code}", True, True)

    async def model(self) -> str:
        """The model id to request (asks the engine once when none was configured)."""
        return self._model if self._model is not None else await self.ready()

    async def generate(self, item: DeliveryItem) -> EngineReply:
        """Run one trajectory to completion; raises ``EngineError`` on failure."""
        path, body = self.request_for(item, await self.model())
        started = time.monotonic()
        try:
            answer = await self._send("POST", path, body)
        except EngineError as error:
            room = room_left(error.status, str(error), body["max_tokens"])
            if room is None:
                raise
            body = _capped(body, room)
            answer = await self._send("POST", path, body)  # once, with the room
        reply = parse_reply(answer, time.monotonic() - started, body["max_tokens"])
        return with_engine_prompt(reply, answer, item.prompt_tokens, isinstance(body.get("prompt"), list))

    def request_for(self, item: DeliveryItem, model: str) -> tuple[str, dict[str, Any]]:
        """The endpoint and JSON body for ``item`` (see the module docstring)."""
        payload = item.payload
        hint = {
            "prompt_id": item.prompt_id,
            "sample_idx": item.sample_idx,
            "prompt_tokens": item.prompt_tokens,
        }
        hint.update(dict(payload.get("rollout") or {}))
        own: dict[str, Any] = {"model": model, "n": 1, "stream": False}
        if self._simulated:
            own["rollout"] = hint
        params = {k: v for k, v in sample_params(item).items() if k not in OWNED}
        body = _capped({**params, **own}, self.cap(item))  # one sample, capped: params cannot change that
        if "messages" in payload:
            return "/v1/chat/completions", {**body, "messages": payload["messages"]}
        if "prompt" in payload:
            return "/v1/completions", {**body, "prompt": payload["prompt"]}
        if self._options.synthetic_prompts:
            return "/v1/completions", {**body, "prompt": [0] * max(1, item.prompt_tokens)}
        raise EngineError(f"item {item.key} carries no prompt or messages in its payload", retryable=False)

    def cap(self, item: DeliveryItem) -> int:
        """``max_tokens`` for ``item``: its ``max_new_tokens``, within what the model's context leaves
        after the prompt when the engine states that limit (vLLM lists ``max_model_len`` per model).

        vLLM refuses a request whose prompt plus ``max_tokens`` passes ``max_model_len`` (400), and
        the sidecar reports a refusal as the item's failure, so a batch asking for a 32,768-token cap
        on a 32,768-token model would have every sample dead-lettered, though the engine could
        never generate past the limit anyway. ``prompt_tokens`` is the trainer's count: it should
        include the chat template's tokens, or the engine may still refuse the last few.
        """
        if self._context is None:
            return item.max_new_tokens
        return max(1, min(item.max_new_tokens, self._context - item.prompt_tokens))

    async def _request(
        self, method: str, path: str, body: dict[str, Any] | None, probe: bool
    ) -> httpx.Response:
        """Send one request: a generation without a read timeout, a ``probe`` within the probe
        timeout all told (a frozen engine's kernel still accepts the connection, then nothing comes)."""
        content, headers = (None, None) if body is None else (_json_body(body), JSON_HEADERS)
        if not probe:
            return await self._http.request(method, path, content=content, headers=headers)
        limit = self._options.probe_timeout_s
        timeout = httpx.Timeout(limit)
        sent = self._http.request(method, path, content=content, headers=headers, timeout=timeout)
        try:
            async with asyncio.timeout(limit):  # not wait_for: see service/sidecar/waits.py
                return await sent
        except TimeoutError:
            raise httpx.ReadTimeout(f"{method} {path}") from None

    def _transport_error(self, exc: httpx.HTTPError) -> EngineError:
        """What a request that got no (whole) answer says of the engine: all engine-down; only a
        connection dropped mid-request is also ``suspect`` (a healthy engine may do it to one item)."""
        where, limit = describe(self._options.base_url), self._options.probe_timeout_s  # no password
        if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
            return EngineError(f"engine unreachable at {where}: {exc!r}", True, True)
        if isinstance(exc, httpx.TimeoutException):
            return EngineError(f"engine at {where} did not answer within {limit:g}s: {exc!r}", True, True)
        dropped = f"engine at {where} dropped the connection before answering in full: {exc!r}"
        return EngineError(dropped, retryable=True, engine_down=True, suspect=True)

    async def _send(
        self, method: str, path: str, body: dict[str, Any] | None, probe: bool = False
    ) -> dict[str, Any]:
        try:
            response = await self._request(method, path, body, probe)
        except httpx.TransportError as exc:
            raise self._transport_error(exc) from None
        except httpx.HTTPError as exc:  # an answer that does not decode, redirects without end: a
            # garbled answer, retried in place like a 500 and then charged to the item
            raise EngineError(f"engine answered unreadably: {exc!r}", retryable=True) from None
        status = response.status_code
        if status >= 400:
            down = status in ENGINE_DOWN or status in ENGINE_CONFIG or _engine_died(response)
            down = down or (status == 404 and "model" in response.text)
            message = f"engine answered {status}: {response.text[:300]}"
            raise EngineError(message, status >= 500 or down, down, status, down and status in SUSPECT)
        try:
            data = response.json()
        except ValueError:
            raise EngineError(f"engine answered non-JSON: {response.text[:100]!r}", retryable=True) from None
        if not isinstance(data, dict):
            raise EngineError("engine answered a non-object JSON body", retryable=True)
        return data


def _cards(listing: dict[str, Any]) -> list[dict[str, Any]]:
    """The model cards of a ``/v1/models`` answer (vLLM's and engine-sim's carry ``max_model_len``)."""
    cards = listing.get("data")
    return [c for c in cards if isinstance(c, dict) and "id" in c] if isinstance(cards, list) else []


def _engine_died(response: httpx.Response) -> bool:
    """A 500 without a body: vLLM's answer once its engine core has died (an item's own failure
    comes with an error object)."""
    return response.status_code == 500 and not response.content.strip()


def _json_body(body: dict[str, Any]) -> bytes:
    """``body`` as the engine reads it, encoded here rather than by httpx, whose encoding changed
    under us: 0.27 escaped a lone UTF-16 surrogate (``\\ud800``) and wrote a NaN, and the item went
    to the engine; 0.28 raises. Raising is kept (UTF-8 cannot carry such text, and the runner
    fails the item, naming the error), now whatever httpx is installed."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def _capped(body: dict[str, Any], max_tokens: int) -> dict[str, Any]:
    """``body`` with ``max_tokens``, and a ``min_tokens`` from the params lowered to it: vLLM refuses
    ``min_tokens`` above ``max_tokens`` with a 400 (``SamplingParams``; SGLang likewise), which would
    charge the item for a cap the sidecar itself cut to the context."""
    capped = {**body, "max_tokens": max_tokens}
    floor = capped.get("min_tokens")
    if isinstance(floor, int) and floor > max_tokens:
        capped["min_tokens"] = max_tokens
    return capped
