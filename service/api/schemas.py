"""Request and response bodies of the HTTP API (pydantic), documented field by field in docs/api.md.

Requests are strict: unknown fields, NaN/Infinity, strings where numbers belong and non-positive token
counts are refused with 422 naming the field, before anything is predicted, planned or written; every
integer field reads ``1.0`` as the integer 1, as a trace reads a count (``Whole``), and refuses ``1.5``.
Cross-item rules (unique ``prompt_id``/``worker_id``, known devices and presets) are checked when the
body is turned into core types (``service.api.convert``), with the same 422 shape. What the API
answers about a published step (progress, results, a cancel) is in ``service.api.progress_schemas``;
what is reported after it, and the predictor those reports train, in ``service.api.learning_schemas``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    field_validator,
    model_validator,
)
from typing_extensions import TypedDict

from scheduler.trace import json_count
from scheduler.validation import MAX_GPUS, MAX_NUM_SEQS, RANGES
from service.api.feature_names import item_feature, report_feature
from service.names import NAME_MAX_LENGTH, NAME_PATTERN, SCHEDULE_ID_PATTERN
from service.workerspec import MAX_WORKERS

# The most planning time a request may ask for, and ROLLOUT_DEFAULT_TIME_BUDGET_MS with it: past a
# minute a trainer's step waits on the planner longer than most rollouts gain from it.
MAX_TIME_BUDGET_MS = 60_000

# a worker id, among others: the rule lives in service/names.py, where a push sidecar reads it too
Name = Annotated[str, Field(min_length=1, max_length=NAME_MAX_LENGTH, pattern=NAME_PATTERN)]
# A schedule id, wherever the API reads one (a /schedule body, a path, an actuals report): one rule, so
# a report cannot name a schedule the schedule endpoint would refuse, nor the reverse. As long as a
# Name (``NAME_MAX_LENGTH``): one bound for every id, which publish holds too.
ScheduleId = Annotated[str, Field(min_length=1, max_length=NAME_MAX_LENGTH, pattern=SCHEDULE_ID_PATTERN)]
FeatureValue = float | Annotated[str, Field(max_length=256)]
# Extra predictor features of one item or report: bounded, or one caller could grow the actuals stream,
# every replica's history and the model (one column each) without limit (20 MB reports did).
MAX_FEATURES = 64  # names per item or report, and distinct names per request (the history holds 64)
FeatureName = Annotated[str, Field(min_length=1, max_length=64)]
# No trace column's name nor another tool's name for one (``service.api.feature_names``: why), each
# refused naming the field to use: the key's own error, so the 422 names ``features.<name>``.
ItemFeatures = Annotated[
    dict[Annotated[FeatureName, AfterValidator(item_feature)], FeatureValue], Field(max_length=MAX_FEATURES)
]
ReportFeatures = Annotated[
    dict[Annotated[FeatureName, AfterValidator(report_feature)], FeatureValue], Field(max_length=MAX_FEATURES)
]
Features = dict[str, FeatureValue]  # either, once validated


def few_feature_names(features: list[Features], where: str) -> None:
    """Refuse a request whose items or reports name more than ``MAX_FEATURES`` features in all: each
    name is a dense column over every query or history row, so 64 fresh names per entry made one
    request cost entries x names (a 2 MB report grew a replica by hundreds of MB)."""
    names = {name for entry in features for name in entry}
    if len(names) > MAX_FEATURES:
        raise ValueError(f"{where} name {len(names)} distinct features; at most {MAX_FEATURES} a request")


# Upper bounds: far past any real model, run or device, and inside the int64 columns the predictor
# keeps counts in, so an absurd number is a 422 naming its field, never an overflow deeper in (where
# an already-stored report would fail every later read of the history).
MAX_COUNT = 2**31 - 1  # steps, token counts, sample indices
MAX_SEED = 2**63 - 1
MIN_INT64, MAX_INT64 = -(2**63), 2**63 - 1  # integers inside ``sampling.extra``
MIN_TIME_SCALE, MAX_TIME_SCALE = RANGES["time_scale"]  # the core's envelope (scheduler.validation)
# Every integer field of a request body (a count, a seed, a budget, a device's figures, a token id):
# a JSON number with no fraction (``1.0``) is that integer, as a trace reads a count
# (``scheduler.trace.json_count``: why), and ``1.5`` is a 422 naming the field and the number. One rule
# for all: in round 66 ``n`` took ``2.0`` where ``max_num_seqs``, ``seed`` or ``top_k`` beside it
# refused it, so a body written from Python floats was refused field by field (user67). A field's own
# bounds go in its ``Field``, or before the validator in an alias (after it, pydantic checks them but
# leaves them out of the JSON schema, and OpenAPI showed ``ge``/``le`` where ``minimum``/``maximum`` belong)
Whole = Annotated[int, BeforeValidator(json_count)]
Count = Annotated[int, Field(ge=0, le=MAX_COUNT), BeforeValidator(json_count)]
Tokens = Annotated[int, Field(gt=0, le=MAX_COUNT), BeforeValidator(json_count)]
# the optional ones (``X | None`` puts a ``Field`` default's bounds after the validator)
TopK = Annotated[int, Field(ge=-1, le=MAX_COUNT), BeforeValidator(json_count)]
SampleSeed = Annotated[int, Field(ge=0, le=2**62), BeforeValidator(json_count)]
BudgetMs = Annotated[int, Field(gt=0, le=MAX_TIME_BUDGET_MS), BeforeValidator(json_count)]


def _utf8(text: str) -> str:
    """Refuse a lone UTF-16 surrogate (JSON's ``"\\ud800"``): Python's ``json`` accepts it, but no
    engine request can carry it (UTF-8 cannot encode it), so it must fail here, not on a sidecar."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(f"a lone UTF-16 surrogate at character {error.start} is not text") from None
    return text


def _engine_json(value: Any) -> None:
    """``_utf8`` on every key and string inside a JSON value, and every integer within int64.

    An integer past 64 bits is no engine field's value (an engine's numbers end in int64 or narrower
    tensors): sent on, every sample's request would fail on the engine and the whole batch be
    dead-lettered after its attempts, where a 422 names ``sampling.extra`` at once."""
    if isinstance(value, str):
        _utf8(value)
    elif isinstance(value, int) and not isinstance(value, bool) and not MIN_INT64 <= value <= MAX_INT64:
        raise ValueError("an integer outside int64 is no engine field's value")
    elif isinstance(value, list):
        for member in value:
            _engine_json(member)
    elif isinstance(value, dict):
        for key, member in value.items():
            _utf8(key)
            _engine_json(member)


Text = Annotated[str, AfterValidator(_utf8)]  # free text sent on to the engines


class Strict(BaseModel):
    """Base of every request body: no unknown fields, no NaN/Infinity, no type coercion."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True, frozen=True)


class ChatMessage(Strict):
    """One chat turn, forwarded to the engine's ``/v1/chat/completions``."""

    role: Literal["system", "user", "assistant", "tool"]
    content: Text


StopText = Annotated[str, Field(min_length=1, max_length=256)]
# A vocabulary holds ~10^5 tokens; engines keep token ids and ``top_k`` in int32 tensors (vLLM's
# sampler), so MAX_COUNT (2^31-1) is past any vocabulary yet inside what the engine stores: a larger
# number is a typo that would fail every sample's request on the engine instead of this one.
TokenId = Annotated[int, Field(ge=0, le=MAX_COUNT), BeforeValidator(json_count)]
_ExactTokenId = Annotated[int, Field(ge=0, le=MAX_COUNT)]  # an int as it came: ``PromptTokenIds``' fast path
# Token ids of one prompt: 2^20, past the longest context served (1M-token models), so a longer list is
# a mistake (a whole dataset in one item), refused before anything is planned or stored.
MAX_PROMPT_TOKEN_IDS = 2**20
_PROMPT_IDS_BOUND = Field(min_length=1, max_length=MAX_PROMPT_TOKEN_IDS)
_PROMPT_IDS_READ: TypeAdapter[list[int]] = TypeAdapter(
    Annotated[list[TokenId], _PROMPT_IDS_BOUND], config=ConfigDict(strict=True, allow_inf_nan=False)
)


def _ints_then_read(ids: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """A prompt's token ids as ``TokenId``s, each ``2.0`` read as 2: first as they came, where every id
    is an ``int`` (pydantic's own loop), then, only where that failed, id by id through ``json_count``
    (a ``ValidationError`` locating the id at fault). ``json_count`` on each of a million ids cost
    ~250 ms a million on this machine (docs/experiments.md, user67), where ids almost always come as ints."""
    try:
        return handler(ids)
    except ValidationError:
        return _PROMPT_IDS_READ.validate_python(ids)


# A prompt as token ids: ``TokenId``s as every integer field reads them, at strict ints' cost
PromptTokenIds = Annotated[list[_ExactTokenId], _PROMPT_IDS_BOUND, WrapValidator(_ints_then_read)]
# Token ids of a whole batch. Ids cost 2 to 11 bytes of JSON each ("0," to "2147483647,"), 6.3 over a
# 152k-token vocabulary: the default body limit (ROLLOUT_MAX_BODY_BYTES, 32 MiB) holds some 5M such ids,
# so this bound acts only where an operator raised that limit, and it keeps one schedule's prompts in
# Redis (stored once per prompt, as JSON ints: docs/experiments.md) within ~55 MB.
MAX_BATCH_TOKEN_IDS = 8 * 2**20
ENGINE_OWNED = frozenset(
    {"model", "prompt", "messages", "n", "best_of", "stream", "stream_options", "max_tokens"}
    | {"max_completion_tokens", "rollout"}
)  # request fields the sidecar sets itself: one sample per request, capped at ``max_new_tokens``


class Sampling(Strict):
    """How the engine samples, sent with every sample's request (OpenAI / vLLM field names).

    Unset fields are not sent, so the engine's own defaults apply to them; an RL objective usually
    wants ``temperature`` and ``top_p`` stated, since vLLM started with ``--generation-config auto``
    takes the model's ``generation_config.json`` instead.
    """

    temperature: float | None = Field(default=None, ge=0, le=100)
    top_p: float | None = Field(default=None, gt=0, le=1)
    top_k: TopK | None = None  # -1: no limit (vLLM); bound: TokenId
    min_p: float | None = Field(default=None, ge=0, le=1)
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    repetition_penalty: float | None = Field(default=None, gt=0, le=100)
    stop: list[StopText] | None = Field(default=None, max_length=32)
    stop_token_ids: list[TokenId] | None = Field(default=None, max_length=256)
    seed: SampleSeed | None = None  # base seed: sample k is drawn with seed + k,
    # so a prompt's n samples differ (as vLLM's one request with n and a seed) and a rerun repeats them
    extra: dict[str, JsonValue] = Field(default_factory=dict)  # other engine fields (e.g. vLLM's
    # skip_special_tokens, or a response_format object), sent as they are

    @field_validator("extra")
    @classmethod
    def _not_owned(cls, extra: dict[str, Any]) -> dict[str, Any]:
        for name in extra:
            if name in ENGINE_OWNED:
                raise ValueError(f"'{name}' is set by the sidecar for every request and cannot be sent")
            if name in cls.model_fields:
                raise ValueError(f"'{name}' has its own field in sampling; set it there")
        _engine_json(extra)
        return extra

    def params(self) -> dict[str, Any]:
        """The request fields this sets: the typed ones given, then ``extra``."""
        given = self.model_dump(exclude_none=True, exclude={"extra"})
        return {**given, **self.extra}


class BatchItem(Strict):
    """One prompt of the rollout batch; it yields ``n`` trajectories (GRPO group of ``n`` samples)."""

    prompt_id: Name  # stable across epochs: the predictor's key into history
    prompt_tokens: Tokens  # prompt length in tokens
    n: Whole = Field(default=1, ge=1, le=4096)  # samples to draw from this prompt (``2.0`` is 2)
    max_new_tokens: Tokens  # generation cap per sample
    features: ItemFeatures = Field(default_factory=dict)  # extra predictor features
    prompt: Text | None = None  # text the sidecar sends to /v1/completions
    messages: list[ChatMessage] | None = Field(default=None, min_length=1)  # or chat turns for
    # /v1/chat/completions (not both: the sidecar sends one request, to one of the two endpoints)
    pinned_worker: Name | None = None  # only this worker may run the samples
    sampling: Sampling | None = None  # this prompt's sampling, field by field over the request's
    # or the prompt as token ids (veRL's ``input_ids``), sent as /v1/completions' ``prompt`` as they are
    prompt_token_ids: PromptTokenIds | None = None

    @model_validator(mode="after")
    def _one_payload(self) -> BatchItem:
        if self.prompt is not None and self.messages is not None:
            raise ValueError("give prompt or messages, not both: the sidecar would send only one")
        return self

    @field_validator("prompt_token_ids")
    @classmethod
    def _ids_alone_and_counted(cls, ids: list[int] | None, info: ValidationInfo) -> list[int] | None:
        """Token ids are the whole prompt, so no text or chat may come with them (the engine gets one
        ``prompt``), and ``prompt_tokens`` must be their count: it sizes the plan's prefill and every KV
        reservation, and a count that disagrees with the ids would plan another prompt than the one run.
        A field validator (declared after both), so the 422 names this field and the two numbers."""
        if ids is None:
            return ids
        for other in ("prompt", "messages"):
            if info.data.get(other) is not None:
                raise ValueError(f"give prompt_token_ids or {other}, not both: the engine gets one prompt")
        stated = info.data.get("prompt_tokens")
        if stated is not None and stated != len(ids):
            raise ValueError(f"{len(ids)} token ids where prompt_tokens says {stated}: they must be equal")
        return ids


class Batch(Strict):
    """The step's prompts."""

    items: list[BatchItem] = Field(min_length=1)

    @field_validator("items")
    @classmethod
    def _few_features(cls, items: list[BatchItem]) -> list[BatchItem]:
        few_feature_names([item.features for item in items], "the items")
        return items

    @field_validator("items")
    @classmethod
    def _few_token_ids(cls, items: list[BatchItem]) -> list[BatchItem]:
        """Refuse a batch carrying more than ``MAX_BATCH_TOKEN_IDS`` prompt token ids in all."""
        total = sum(len(item.prompt_token_ids or ()) for item in items)
        if total > MAX_BATCH_TOKEN_IDS:
            raise ValueError(
                f"the items carry {total} prompt token ids; at most {MAX_BATCH_TOKEN_IDS} a request"
            )
        return items


def _envelope(figure: str) -> Any:
    """An optional field bounded by the core's physical envelope of ``figure``."""
    low, high = RANGES[figure]
    return Field(default=None, ge=low, le=high)


class WorkerSpec(Strict):
    """One inference engine; every speed field is an optional measured override of the device profile."""

    worker_id: Name
    device: str = Field(min_length=1, max_length=64)  # H100, H200, A100-80GB, Ascend910B (aliases ok)
    num_gpus: Whole = Field(default=1, ge=1, le=MAX_GPUS)  # tensor-parallel degree
    max_num_seqs: Whole = Field(default=256, ge=1, le=MAX_NUM_SEQS)  # engine's concurrent-sequence limit
    kv_capacity_tokens: Tokens | None = None  # KV cache in tokens;
    # derived when absent
    # Measured overrides, each within the core's envelope of every device there is with room to spare
    # (``scheduler.validation.RANGES``, one table for both): a value past it is a unit mistake, and
    # would overflow or divide by zero in the cost model.
    hbm_bandwidth_gbs: float | None = _envelope("hbm_bandwidth_gbs")  # HBM bandwidth per device, GB/s
    peak_tflops: float | None = _envelope("peak_tflops")  # dense throughput per device
    memory_gib: float | None = _envelope("memory_gib")  # HBM per device
    time_scale: float | None = Field(default=None, ge=MIN_TIME_SCALE, le=MAX_TIME_SCALE)  # step-time
    # multiplier (2.0 = half speed)
    decode_tokens_per_s: float | None = Field(default=None, gt=0, le=1e6)  # measured single-sequence
    # decode speed; the time scale it implies must lie in the same range as ``time_scale``
    drain: bool = False  # receives nothing in this plan (being drained)


class InventorySpec(Strict):
    """The worker pool."""

    workers: list[WorkerSpec] = Field(min_length=1, max_length=MAX_WORKERS)  # the replay's bound too


class ScheduleRequest(Strict):
    """``POST /schedule``: plan (and by default publish) one rollout step."""

    batch: Batch
    inventory: InventorySpec
    model: str | None = Field(default=None, min_length=1, max_length=64)  # model preset: 1.5b, 7b, 14b, 32b
    step: Count = 0  # training step; the predictor uses history before it
    policy: str | None = Field(default=None, min_length=1, max_length=64)  # cpsat (default), lpt,
    # least_loaded, round_robin
    quantile: float | None = Field(default=None, gt=0, lt=1)  # predicted-length quantile to plan on
    time_budget_ms: BudgetMs | None = None  # solver wall-clock budget
    prefix_affinity: bool = False  # keep each prompt's samples on one worker
    kv_admission: bool = False  # sidecars admit by projected KV peak at predicted lengths
    # what the workers run, by its eviction rules (``scheduler.sim_rules``): vllm-v1 (vLLM, SGLang) or
    # vllm-v0; none: the service's ``ROLLOUT_DEFAULT_ENGINE`` (``SERVICE_ENGINE`` unless set)
    engine: str | None = Field(default=None, min_length=1, max_length=64)
    publish: bool = True  # write the plan to Redis for the sidecars; false = dry run
    seed: Whole = Field(default=0, ge=0, le=MAX_SEED)  # fixes any randomised search
    sampling: Sampling | None = None  # how every sample is drawn (a prompt's own ``sampling`` overrides)
    # caller-chosen id: a retry of a published one is answered its first plan, ``replayed`` (other work
    # under it 422, a cancelled one 409: service/pipeline/republish.py)
    schedule_id: ScheduleId | None = None


class AssignedItem(TypedDict):
    """One trajectory in a worker's ordered queue (a plain dict: responses carry thousands of them)."""

    prompt_id: str
    sample_idx: int
    predicted_tokens: float


class Timings(BaseModel):
    """Wall time of each stage of the request, milliseconds."""

    queue_ms: float  # waiting for a planning slot (``ROLLOUT_MAX_CONCURRENT_PLANS``)
    validate_ms: float
    predict_ms: float
    plan_ms: float
    baseline_ms: float
    publish_ms: float
    total_ms: float


class ScheduleResponse(BaseModel):
    """The plan, its quality against the physical bound and the length-blind baseline, and timings."""

    # pydantic before 2.10 reserves "model_" and warned on model_version at every start (stderr).
    model_config = ConfigDict(protected_namespaces=())

    schedule_id: str
    step: int
    policy: str
    status: str  # solver status: OPTIMAL, FEASIBLE, HEURISTIC, FALLBACK_LPT, ROBUST_LPT, BASELINE
    published: bool
    model_version: str  # predictor that produced the lengths ("fallback" when none is trained)
    prediction_sources: dict[str, int]  # lightgbm / prompt_history_mean / global_prior -> trajectories
    quantile: float
    assignments: dict[str, list[AssignedItem]]  # worker id -> ordered queue
    dispatch_order: list[str]  # shared-queue policies: the one FIFO (trajectory keys); else empty
    predicted_makespan_s: float
    lower_bound_s: float
    round_robin_makespan_s: float  # the equal split RL trainers use today, on the same predictions
    speedup_vs_round_robin: float
    time_scales: dict[str, float]  # the step-time multiplier used per worker
    # each worker's: request, measured, learned, learned_group, learned_peers, learned_fleet or profile
    time_scale_sources: dict[str, str]
    # the plan's time budget: the request's (or the default), capped by the caller's deadline
    # (``X-Envoy-Expected-Rq-Timeout-Ms``); None in an answer stored by a release before it
    time_budget_ms: float | None = None
    timings: Timings  # this request's: a replay's spent nothing predicting or planning
    # true: the answer a retry under a published ``schedule_id`` gets, the first attempt's plan
    # (service/pipeline/republish.py; also the ``Idempotent-Replayed: true`` header)
    replayed: bool = False
    # the at-once hedge (docs/solver.md, step 10): "kept"/"fastest" where it judged the plan, "unjudged"
    # where the budget ran out first, None where not asked (no quantiles, one kind, queues in waves)
    at_once_hedge: str | None = None
