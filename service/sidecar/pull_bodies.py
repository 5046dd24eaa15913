"""What a worker process sends the pull API (``service/sidecar/pull_api.py``): the bodies of
``POST /done`` and ``POST /fail``, and the refusal of a ``/done`` above its item's token cap.

Checked as the service checks the same figures (``docs/api.md``): NaN refused, no string or boolean
read as a number, counts bounded, and an ``extra`` that Redis can store as JSON and the service can
read back, so a bad report is refused to the worker that sent it (422) instead of being stored.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from scheduler.trace import json_count, output_length
from service.delivery.records import MAX_EXTRA_DEPTH, json_depth
from service.sidecar.finish_reasons import ended_by_itself
from service.sidecar.pull_finish import reported_finish

MAX_TOKENS = 2**31 - 1  # the service's bound on a reported count (docs/api.md)
# Counts of ``extra`` a worker may state over the item's (its templated prompt length): the trainer's
# actuals read them (``service.client.actuals.actual_from_result``), so they are held to the service's rule.
TOKEN_COUNTS = ("prompt_tokens", "max_new_tokens")


def _utf8(text: str) -> str:
    """Refuse a lone UTF-16 surrogate (JSON's ``"\\ud800"``): Python's ``json`` accepts it, but UTF-8
    cannot carry it, so stored it failed every results page of the service holding it (500), and sent
    to Redis as a key, id or reason it failed the request (500 here)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(f"a lone UTF-16 surrogate at character {error.start} is not text") from None
    return text


Text = Annotated[str, AfterValidator(_utf8)]
# Every integer a worker sends, as the service's bodies read one (``service.api.schemas.Whole``): ``5.0``
# is 5, ``5.5`` is refused naming the field; a lease token echoed through a float was refused where the
# output length beside it was taken (user67)
Whole = Annotated[int, BeforeValidator(json_count)]


class _LeaseRef(BaseModel):
    # as the service's requests (``service/api/schemas.py``): NaN refused, and strict, so a string or a
    # boolean where a number belongs is refused, not read as one (``"token": true`` was token 1)
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)

    schedule_id: Text
    key: Text
    token: Whole


class DoneBody(_LeaseRef):
    """A finished trajectory, as the worker reports it."""

    # read before output_tokens: whether it says a length (``_a_length``); an engine's word for one
    # the service knows is read as it (``finish_reasons``, ``pull_finish``), any other refused
    finish_reason: Annotated[Text, BeforeValidator(reported_finish)] = "stop"
    # and at most the item's cap (checked on /done); 5.0 is 5, as the service and a trace read it
    output_tokens: Whole = Field(ge=0, le=MAX_TOKENS)
    output: Text = ""
    wall_time_s: float = Field(default=0.0, ge=0)
    reward: float | None = None
    extra: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _engine_word_kept(cls, data: Any) -> Any:
        """The engine's own word for a finish read as ``stop`` (``tool_calls``...), kept in
        ``extra.engine_finish_reason`` as the push mode keeps it, unless the worker set that itself."""
        if not isinstance(data, dict) or (word := ended_by_itself(data.get("finish_reason"))) is None:
            return data
        extra = data.get("extra", {})
        if not isinstance(extra, dict) or "engine_finish_reason" in extra:
            return data  # a bad extra is refused as it is
        return {**data, "extra": {**extra, "engine_finish_reason": word}}

    @field_validator("output_tokens")
    @classmethod
    def _a_length(cls, output_tokens: int, info: ValidationInfo) -> int:
        """At least the token it ended on, where it says a length (``stop``, ``length``), as the
        service's ``POST /actuals`` and the trace format take one (``scheduler.trace.output_length``):
        a 0 (a worker counting decoded text) was stored, and then reported by no client (learn54).
        Not judged where the finish was refused: one error, naming the finish, as ``POST /actuals``."""
        if "finish_reason" not in info.data:
            return output_tokens
        return output_length(output_tokens, info.data["finish_reason"])

    @field_validator("extra")
    @classmethod
    def _storable(cls, extra: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        """What Redis stores as JSON and the service reads back: no NaN inside, nothing UTF-8 cannot
        carry (a lone surrogate, in a name or a text), a numeric concurrency, token counts."""
        try:
            json.dumps(extra, allow_nan=False, ensure_ascii=False).encode("utf-8")
        except (ValueError, TypeError) as error:
            raise ValueError(f"not storable as JSON ({error})") from None
        if json_depth(extra) > MAX_EXTRA_DEPTH:
            raise ValueError(f"nested deeper than {MAX_EXTRA_DEPTH} levels")
        concurrency = extra.get("concurrency")
        if concurrency is not None and not (isinstance(concurrency, (int, float)) and concurrency >= 0):
            raise ValueError("concurrency must be a number >= 0")
        return _token_counts(extra, info.data.get("output_tokens"))  # validated before extra


def _token_counts(extra: dict[str, Any], output_tokens: int | None) -> dict[str, Any]:
    """``extra`` with its ``TOKEN_COUNTS`` as the service's actuals take them: integers within its
    bound (``2048.0`` stored as 2048, as ``output_tokens`` is: the trainer's client reads an int), the
    cap not below the output (stored otherwise, the trainer's report of the whole step failed)."""
    counts = {name: _token_count(name, extra[name]) for name in TOKEN_COUNTS if name in extra}
    cap = counts.get("max_new_tokens")
    if cap is not None and output_tokens is not None and cap < output_tokens:
        raise ValueError(f"max_new_tokens {cap} is below output_tokens {output_tokens}")
    return {**extra, **counts}


def _token_count(name: str, count: object) -> int:
    """``count`` as a token count (an integral float read as its integer), else ``ValueError``."""
    whole = count if type(count) is not float or not count.is_integer() else int(count)
    if type(whole) is not int or not 1 <= whole <= MAX_TOKENS:
        raise ValueError(f"{name} must be a token count, an integer from 1 to {MAX_TOKENS}")
    return whole


class FailBody(_LeaseRef):
    """A trajectory the worker could not run."""

    reason: Text = "worker reported failure"


class AboveCapError(ValueError):
    """A ``/done`` reports more output tokens than its item's ``max_new_tokens``: refused, lease kept."""

    def __init__(self, output_tokens: int, cap: int) -> None:
        self.output_tokens = output_tokens
        self.words = f"must be <= the item's max_new_tokens={cap}"  # its ``errors[]`` message
        super().__init__(f"output_tokens={output_tokens}: {self.words}")
