"""The sidecar's client of the local inference engine's OpenAI-compatible API (vLLM, SGLang, engine-sim).

One trajectory is one non-streaming request with ``max_tokens`` = the item's cap (within the model's
context, when the engine lists it: ``EngineClient.cap``). The item's payload
says what to send: ``messages`` (a chat, to ``/v1/chat/completions``) or ``prompt`` (text or token ids,
to ``/v1/completions``), plus ``params`` (the request's sampling fields: temperature, stop...)
merged into the body under the sidecar's own fields (``sample_params``: a ``seed`` there is the
prompt's base seed, and sample ``k`` is drawn with ``seed + k``). Every request also carries a
``rollout`` object (prompt id, sample index, prompt tokens, and whatever the payload's ``rollout``
adds) that real engines ignore and engine-sim reads.

Cancelling ``generate`` closes the connection, which makes vLLM (and engine-sim) abort the request
and free its slot: that is how a lost lease stops a trajectory.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import httpx

from service.delivery.records import DeliveryItem

ENGINE_DOWN = frozenset({429, 502, 503, 504})  # overloaded, restarting, or a proxy without it


class EngineError(RuntimeError):
    """The engine could not run a request.

    ``retryable``: another try in place may succeed. ``engine_down``: the engine, not the item, is at
    fault (unreachable, overloaded, restarting), so the item goes back without spending an attempt.
    An error that is retryable but not ``engine_down`` (a 500, an answer that does not parse) is
    tried again in place and then charged to the item: if it keeps failing, only for this item, it
    must end in the dead-letter list, not go back to the head of the queue forever.
    """

    def __init__(self, message: str, retryable: bool, engine_down: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.engine_down = engine_down


@dataclass(frozen=True, slots=True)
class EngineReply:
    """What the engine generated for one trajectory."""

    output: str  # generated text
    completion_tokens: int  # usage.completion_tokens: the actual length
    finish_reason: str  # "stop" | "length" | engine-specific
    wall_time_s: float  # request sent -> response received


@dataclass(frozen=True, slots=True)
class EngineOptions:
    """How to talk to the engine."""

    base_url: str  # e.g. http://127.0.0.1:8000 (without /v1)
    model: str | None = None  # model id to request; None: the first one /v1/models lists
    api_key: str | None = None  # sent as a bearer token when set
    connect_timeout_s: float = 5.0  # connecting; a generation itself may take many minutes
    synthetic_prompts: bool = False  # items without prompt text get a placeholder (engine-sim demos)


class EngineClient:
    """Async client of one engine; create with ``open`` and close with ``aclose``."""

    def __init__(self, options: EngineOptions, http: httpx.AsyncClient) -> None:
        self._options = options
        self._http = http
        self._model = options.model
        self._context: int | None = None  # the model's prompt + output limit, when /v1/models says

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
        listing = await self._send("GET", "/v1/models", None)
        if self._model is None:
            try:
                self._model = str(listing["data"][0]["id"])
            except (KeyError, IndexError, TypeError):
                raise EngineError("the engine's /v1/models lists no model", retryable=True) from None
        self._context = _context_length(listing, self._model)
        return self._model

    async def model(self) -> str:
        """The model id to request (asks the engine once when none was configured)."""
        return self._model if self._model is not None else await self.ready()

    async def generate(self, item: DeliveryItem) -> EngineReply:
        """Run one trajectory to completion; raises ``EngineError`` on failure."""
        path, body = self.request_for(item, await self.model())
        started = time.monotonic()
        answer = await self._send("POST", path, body)
        return _parse_reply(answer, time.monotonic() - started)

    def request_for(self, item: DeliveryItem, model: str) -> tuple[str, dict[str, Any]]:
        """The endpoint and JSON body for ``item`` (see the module docstring)."""
        payload = item.payload
        hint = {
            "prompt_id": item.prompt_id,
            "sample_idx": item.sample_idx,
            "prompt_tokens": item.prompt_tokens,
        }
        hint.update(dict(payload.get("rollout") or {}))
        own = {"model": model, "max_tokens": self.cap(item), "n": 1, "stream": False, "rollout": hint}
        body: dict[str, Any] = {**sample_params(item), **own}  # one sample, capped: params cannot change that
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

    async def _send(self, method: str, path: str, body: dict[str, Any] | None) -> dict[str, Any]:
        try:
            response = await self._http.request(method, path, json=body)
        except httpx.TransportError as exc:
            unreachable = f"engine unreachable at {self._options.base_url}: {exc!r}"
            raise EngineError(unreachable, retryable=True, engine_down=True) from None
        status = response.status_code
        if status >= 400:
            down = status in ENGINE_DOWN
            raise EngineError(f"engine answered {status}: {response.text[:300]}", status >= 500 or down, down)
        try:
            data = response.json()
        except ValueError:
            raise EngineError(f"engine answered non-JSON: {response.text[:100]!r}", retryable=True) from None
        if not isinstance(data, dict):
            raise EngineError("engine answered a non-object JSON body", retryable=True)
        return data


def _context_length(listing: dict[str, Any], model: str) -> int | None:
    """The ``max_model_len`` that ``/v1/models`` lists for ``model``, if any (vLLM and engine-sim
    list one; an engine that does not leaves the cap as the item states it)."""
    cards = listing.get("data")
    for card in cards if isinstance(cards, list) else []:
        if isinstance(card, dict) and card.get("id") == model:
            limit = card.get("max_model_len")
            return limit if isinstance(limit, int) and limit > 0 else None
    return None


def sample_params(item: DeliveryItem) -> dict[str, Any]:
    """The sampling fields of ``item``'s request: its payload's ``params``, with a ``seed`` there
    taken as the prompt's base seed and offset by the sample index. The samples of one prompt are
    separate requests (``n=1``), so one seed for all would draw the same response ``n`` times; vLLM
    given ``n`` and a seed in one request draws them differently, and so does this."""
    params = dict(item.payload.get("params") or {})
    if isinstance(params.get("seed"), int):
        params["seed"] += item.sample_idx
    return params


def _parse_reply(answer: dict[str, Any], wall_time_s: float) -> EngineReply:
    try:
        choice = answer["choices"][0]
        text = choice["message"]["content"] if "message" in choice else choice["text"]
        tokens = int(answer["usage"]["completion_tokens"])
        finish = str(choice.get("finish_reason") or "stop")
        if tokens < 0:
            raise ValueError("negative completion_tokens")
    except (KeyError, IndexError, TypeError, ValueError):
        raise EngineError(f"engine answer lacks choices/usage: {str(answer)[:200]}", retryable=True) from None
    return EngineReply(
        output=str(text or ""), completion_tokens=tokens, finish_reason=finish, wall_time_s=wall_time_s
    )
