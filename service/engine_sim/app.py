"""The OpenAI-compatible HTTP face of the simulated engine (FastAPI).

It SIMULATES an inference engine for demos, tests and benchmarks on machines without GPUs: requests
get the shape of a vLLM/SGLang answer (``/v1/completions``, ``/v1/chat/completions``, ``/v1/models``,
``/health``) after the time the cost model gives, but the text is filler and no model runs. A client
that disconnects withdraws its request from the batch, as vLLM aborts it, so a sidecar that cancels a
trajectory frees the slot. ``GET /sim/stats`` exposes the batch counters for tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from scheduler.costmodel import WorkerCost, worker_cost
from scheduler.devices import DEFAULT_MODEL, device_profile, model_preset
from scheduler.errors import InvalidInputError
from scheduler.sim_rules import engine_rules
from scheduler.types import Worker
from service.engine_sim.answers import chat_logprobs, completion_logprobs, filler, token_ids
from service.engine_sim.batch import Generation, PromptTooLongError, SimulatedEngine
from service.engine_sim.lengths import LengthSource, RolloutHint, estimate_prompt_tokens
from service.engines import SERVICE_ENGINE
from service.problems.details import validation_details

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class SimConfig:
    """Everything the simulated engine needs, built by the CLI (or a test)."""

    cost: WorkerCost  # step-time model: device, model, max_num_seqs, KV capacity, time scale
    lengths: LengthSource  # where response lengths come from
    served_model_name: str = "sim-7b"  # the id ``/v1/models`` reports and requests must name
    max_model_len: int = 32_768  # prompt + output limit, as vLLM's --max-model-len
    engine: str = SERVICE_ENGINE  # the engine whose eviction and admission rules it plays
    # (``scheduler.sim_rules``): by default the one ``POST /schedule`` plans for when a request names none


@dataclass(frozen=True, slots=True)
class _Served:
    prompt_tokens: int  # as the engine counted them (hint, token ids or text estimate)
    tokens: int  # tokens generated
    finish_reason: str  # "stop" or "length"
    generation: Generation  # timing and preemptions


def build_config(
    device: str,
    model: str = DEFAULT_MODEL,
    *,
    num_gpus: int = 1,
    max_num_seqs: int = 256,
    kv_capacity_tokens: int | None = None,
    time_scale: float = 1.0,
    lengths: LengthSource | None = None,
    served_model_name: str | None = None,
    max_model_len: int = 32_768,
    engine: str = SERVICE_ENGINE,
) -> SimConfig:
    """Resolve device, model and engine names into a config; bad values raise ``InvalidInputError``."""
    engine_rules(engine)  # an unknown engine is named here, before anything is served
    for name, value in (
        ("num_gpus", num_gpus),
        ("max_num_seqs", max_num_seqs),
        ("max_model_len", max_model_len),
    ):
        if value < 1:
            raise InvalidInputError(name, value, "must be >= 1")
    if not math.isfinite(time_scale) or time_scale <= 0:
        raise InvalidInputError("time_scale", time_scale, "must be a positive finite number")
    if kv_capacity_tokens is not None and kv_capacity_tokens < 1:
        raise InvalidInputError("kv_capacity_tokens", kv_capacity_tokens, "must be >= 1")
    preset = model_preset(model)
    worker = Worker(
        worker_id="engine-sim",
        device=device_profile(device),
        num_gpus=num_gpus,
        max_num_seqs=max_num_seqs,
        kv_capacity_tokens=kv_capacity_tokens,
        time_scale=time_scale,
    )
    return SimConfig(
        cost=worker_cost(worker, preset),
        lengths=lengths or LengthSource(),
        served_model_name=served_model_name or f"sim-{preset.name}",
        max_model_len=max_model_len,
        engine=engine,
    )


class EngineRequestError(ValueError):
    """A request the engine refuses, with the HTTP status and OpenAI error type to answer with."""

    def __init__(
        self, message: str, status: int = 400, kind: str = "BadRequestError", param: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.param = param  # the request field at fault, as vLLM's error body names it


@dataclass
class _Hangs:
    """``rollout.hang_tries`` at work: requests left unanswered so far per (prompt_id, sample_idx), and
    how many are still open (``/sim/stats`` ``hanging``: a client that closed one is no longer counted)."""

    tries: Counter[tuple[str | None, int]] = field(default_factory=Counter)
    open: int = 0


class RolloutField(BaseModel):
    """The optional ``rollout`` extra body field that tells the simulator what a real model would do."""

    prompt_id: str | None = None
    sample_idx: int = Field(default=0, ge=0)
    output_tokens: int | None = Field(default=None, ge=0)
    prompt_tokens: int | None = Field(default=None, ge=0)
    # a stuck sequence, as real engines have: this engine never answers the first N requests of this
    # (prompt_id, sample_idx) until the client disconnects (tests of the sidecar's hang bound)
    hang_tries: int = Field(default=0, ge=0)


class _Common(BaseModel):
    model_config = ConfigDict(extra="allow")  # OpenAI clients send many fields we do not model

    model: str | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    n: int = 1
    stream: bool = False
    min_tokens: int = Field(default=0, ge=0)  # vLLM: no EOS or stop before this many tokens
    ignore_eos: bool = False  # vLLM: generate to the cap (how benchmarks fix output lengths)
    return_token_ids: bool = False  # vLLM >= 0.10.2 and SGLang: the choice carries its token ids
    rollout: RolloutField | None = None


class CompletionRequest(_Common):
    """``POST /v1/completions``; ``max_tokens`` defaults to 16 as in the OpenAI API."""

    prompt: str | list[int]
    logprobs: int | None = Field(default=None, ge=0, le=20)  # top alternatives per token (vLLM's
    # default --max-logprobs is 20); 0 still returns each sampled token's own log-probability


class ChatRequest(_Common):
    """``POST /v1/chat/completions``; without a cap the response may fill the context."""

    messages: list[dict[str, Any]] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool = False  # each sampled token's log-probability, in ``choice.logprobs.content``
    top_logprobs: int | None = Field(default=None, ge=0, le=20)  # alternatives per token, with logprobs


def create_app(config: SimConfig) -> FastAPI:
    """Build the app around one simulated engine; nothing runs until the server starts."""
    engine = SimulatedEngine(config.cost, rules=engine_rules(config.engine))
    hangs = _Hangs()

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        await engine.close()

    app = FastAPI(title="rollout-scheduler engine-sim (simulated engine)", lifespan=lifespan)
    _install_error_handlers(app)
    _add_info_routes(app, config, engine, hangs)
    _add_generation_routes(app, config, engine, hangs)
    app.state.engine = engine
    return app


def _add_info_routes(app: FastAPI, config: SimConfig, engine: SimulatedEngine, hangs: _Hangs) -> None:
    """What the sidecar and the tests ask of the engine besides generations: liveness, the model
    served, and the simulated batch's counters."""

    @app.get("/health")
    async def health() -> dict[str, str]:
        """vLLM's liveness route, which the sidecar polls before it claims work."""
        return {"status": "ok", "engine": "simulated"}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        """The one model served, as vLLM lists it; ``owned_by`` tells the sidecar it is simulated
        (so it sends the rollout hint) and ``max_model_len`` caps each request's prompt + output."""
        card = {
            "id": config.served_model_name,
            "object": "model",
            "owned_by": "rollout-scheduler-engine-sim",
            "max_model_len": config.max_model_len,
        }
        return {"object": "list", "data": [card]}

    @app.get("/sim/stats")
    async def stats() -> dict[str, Any]:
        """What the simulated batch did so far (not an OpenAI route): tests and benches read it."""
        counters = asdict(engine.stats())
        return {
            **counters,
            "max_num_seqs": config.cost.max_num_seqs,
            "hanging": hangs.open,
            "engine": config.engine,
        }


def _add_generation_routes(app: FastAPI, config: SimConfig, engine: SimulatedEngine, hangs: _Hangs) -> None:
    """The two OpenAI generation routes, each answered after the simulated decode time."""

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request) -> dict[str, Any]:
        """OpenAI completions, answered after the simulated decode time of the chosen length."""
        text = body.prompt if isinstance(body.prompt, str) else ""
        cap = body.max_tokens if body.max_tokens is not None else 16
        await _hang_if_told(request, body.rollout, hangs)
        served = await _serve(config, engine, request, body, body.prompt, text, cap)
        choice = {"index": 0, "text": filler(served.tokens), "finish_reason": served.finish_reason}
        choice["logprobs"] = None if body.logprobs is None else completion_logprobs(served.tokens)
        return _envelope("text_completion", config, _with_ids(body, choice, served), served)

    @app.post("/v1/chat/completions")
    async def chat(body: ChatRequest, request: Request) -> dict[str, Any]:
        """OpenAI chat completions, the same engine behind a chat envelope."""
        text = "\n".join(str(m.get("content", "")) for m in body.messages)
        cap = body.max_completion_tokens or body.max_tokens
        await _hang_if_told(request, body.rollout, hangs)
        served = await _serve(config, engine, request, body, text, text, cap)
        message = {"role": "assistant", "content": filler(served.tokens)}
        choice = {"index": 0, "message": message, "finish_reason": served.finish_reason}
        if body.logprobs:
            choice["logprobs"] = chat_logprobs(served.tokens, body.top_logprobs or 0)
        return _envelope("chat.completion", config, _with_ids(body, choice, served), served)


async def _serve(
    config: SimConfig,
    engine: SimulatedEngine,
    request: Request,
    body: _Common,
    prompt: str | list[int],
    text: str,
    cap: int | None,
) -> _Served:
    """Validate, resolve the length, and run the request in the batch until done or disconnected."""
    if body.model is not None and body.model != config.served_model_name:
        raise EngineRequestError(f"The model `{body.model}` does not exist.", 404, "NotFoundError", "model")
    if body.n != 1 or body.stream:
        raise EngineRequestError("the simulated engine supports n=1 without streaming only")
    hint = RolloutHint(**body.rollout.model_dump(exclude={"hang_tries"})) if body.rollout else RolloutHint()
    prompt_tokens = estimate_prompt_tokens(hint, prompt)
    limit = _checked_cap(config.max_model_len, prompt_tokens, cap)
    if body.min_tokens > limit:  # vLLM's SamplingParams check, worded as vLLM does
        message = f"min_tokens must be less than or equal to max_tokens={limit}, got {body.min_tokens}."
        raise EngineRequestError(message)
    outcome = config.lengths.resolve(hint, text, limit, body.min_tokens, body.ignore_eos)
    try:
        generation = await _unless_disconnected(request, engine.generate(prompt_tokens, outcome.tokens))
    except PromptTooLongError as exc:
        raise EngineRequestError(str(exc)) from None
    return _Served(prompt_tokens, outcome.tokens, outcome.finish_reason, generation)


def _checked_cap(max_model_len: int, prompt_tokens: int, cap: int | None) -> int:
    """The request's cap (the room the context leaves when it set none), refused as vLLM refuses it
    and in vLLM's words (``OpenAIServing._validate_input``): a client such as the sidecar reads the
    input count from the message to retry with the room left, so tests against engine-sim exercise
    that path only if the wording is vLLM's. The prompt alone may be at most ``max_model_len - 1``."""
    if prompt_tokens >= max_model_len:
        raise EngineRequestError(
            f"This model's maximum context length is {max_model_len} tokens. However, your request has "
            f"{prompt_tokens} input tokens. Please reduce the length of the input messages.",
            param="input_tokens",
        )
    if cap is not None and prompt_tokens + cap > max_model_len:
        raise EngineRequestError(
            f"'max_tokens' or 'max_completion_tokens' is too large: {cap}. This model's maximum context "
            f"length is {max_model_len} tokens and your request has {prompt_tokens} input tokens "
            f"({cap} > {max_model_len} - {prompt_tokens}).",
            param="max_tokens",
        )
    return cap if cap is not None else max_model_len - prompt_tokens


async def _hang_if_told(request: Request, rollout: RolloutField | None, hangs: _Hangs) -> None:
    """Never answer (until the client disconnects, answered 499 then) while this sample's first
    ``rollout.hang_tries`` requests are not used up: a stuck sequence that a healthy engine, still
    answering ``/health`` and finishing others, never returns (docs/engine-sim.md)."""
    if rollout is None or rollout.hang_tries == 0:
        return
    sample = (rollout.prompt_id, rollout.sample_idx)
    if hangs.tries[sample] >= rollout.hang_tries:
        return
    hangs.tries[sample] += 1
    hangs.open += 1
    try:
        await _unless_disconnected(request, asyncio.Event().wait())
    finally:
        hangs.open -= 1


async def _unless_disconnected(request: Request, work: Awaitable[T]) -> T:
    """Await ``work``; if the client goes away first, cancel it (the engine frees its slot)."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnected(request))
    try:
        done, _ = await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()
    if task not in done:
        with contextlib.suppress(asyncio.CancelledError):
            await task
        raise EngineRequestError("client disconnected", 499, "ClientClosedRequest")
    return task.result()


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _with_ids(body: _Common, choice: dict[str, Any], served: _Served) -> dict[str, Any]:
    """``choice`` with the generated token ids where the request asked for them (``return_token_ids``,
    answered so by vLLM and SGLang): a client that reads them runs against the stand-in as against
    a real engine, one placeholder id per generated token."""
    return {**choice, "token_ids": token_ids(served.tokens)} if body.return_token_ids else choice


def _envelope(kind: str, config: SimConfig, choice: dict[str, Any], served: _Served) -> dict[str, Any]:
    """The OpenAI response body, plus a ``rollout`` block that marks it simulated and times it."""
    return {
        "id": f"cmpl-{uuid.uuid4().hex}",
        "object": kind,
        "created": int(time.time()),
        "model": config.served_model_name,
        "choices": [choice],
        "usage": {
            "prompt_tokens": served.prompt_tokens,
            "completion_tokens": served.tokens,
            "total_tokens": served.prompt_tokens + served.tokens,
        },
        "rollout": {"simulated": True, **asdict(served.generation)},
    }


def _install_error_handlers(app: FastAPI) -> None:
    """One table from exceptions to OpenAI-shaped error bodies."""

    def error(status: int, message: str, kind: str, param: str | None = None) -> JSONResponse:
        body = {"message": message, "type": kind, "param": param, "code": status}
        return JSONResponse({"error": body}, status)

    @app.exception_handler(EngineRequestError)
    async def refused(_: Request, exc: EngineRequestError) -> JSONResponse:
        return error(exc.status, str(exc), exc.kind, exc.param)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        # in vLLM's shape, which the sidecar reads, with the service's words: the field and the value
        # sent lead (``max_tokens=0: Input should be greater than or equal to 1``), the field in
        # ``param`` as vLLM names it; it read ``max_tokens: ...``, ``param`` null (user66)
        # a body that is not JSON names no field: vLLM's ``param`` is null there (its decode error
        # carries no ``VLLMValidationError``), where this said ``"body"`` (nits67)
        detail, extra = validation_details(exc.errors())
        unread = any(err["type"] == "json_invalid" for err in exc.errors())
        return error(400, detail, "BadRequestError", None if unread else extra.get("field"))
