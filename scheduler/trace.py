"""The trace format: one row per generated trajectory, shared by training, evaluation and replay.

Required columns: ``step``, ``prompt_id``, ``sample_idx``, ``prompt_tokens``, ``output_tokens``.
Optional: ``max_new_tokens``, ``finish_reason`` (``stop`` | ``length``), ``reward``. Any other column
is kept as a feature: numeric when every value parses as a number, categorical otherwise.
This module holds the schema and row validation only; reading and writing files (csv, jsonl,
parquet) lives in ``predictors.traceio`` because it is I/O. docs/trace-format.md documents it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal

from scheduler.errors import InvalidInputError

REQUIRED_COLUMNS: tuple[str, ...] = ("step", "prompt_id", "sample_idx", "prompt_tokens", "output_tokens")
OPTIONAL_COLUMNS: tuple[str, ...] = ("max_new_tokens", "finish_reason", "reward")
FINISH_REASONS: frozenset[str] = frozenset({"stop", "length"})


@dataclass(frozen=True, slots=True)
class TraceRow:
    """One trajectory as it really ran."""

    step: int  # training step (or epoch) that generated it
    prompt_id: str  # stable prompt identity across steps
    sample_idx: int  # index within the prompt's group
    prompt_tokens: int  # prompt length, tokens
    output_tokens: int  # generated length, tokens (the quantity we predict)
    max_new_tokens: int | None = None  # generation cap, when known
    finish_reason: str | None = None  # "stop" or "length" (truncated at the cap)
    reward: float | None = None  # verifier/reward-model score, when known
    features: Mapping[str, float | str] = field(default_factory=dict)  # extra columns, typed


INT64_MAX = 2**63 - 1
# Least value of each integer column. An engine refuses an empty prompt (and the planner needs one).
# A generation is at least the token it ended on (an "empty" response is its EOS alone: one decode
# step, counted by engines and by veRL's response mask), so an output of 0 tokens is misreported, as
# ``POST /actuals`` refuses it too: a trace once took it, and pushed it was left out (learn53).
MINIMUM = {"step": 0, "sample_idx": 0, "prompt_tokens": 1, "output_tokens": 1, "max_new_tokens": 1}
# Why a count below its least is refused, said with the refusal where the reason is not the range alone.
BELOW_MINIMUM = {"output_tokens": "a generation is at least the token it ended on (an empty one is its EOS)"}


# Why a finish reason other than these is no actual (a trace row, ``POST /actuals``): an engine's
# ``abort`` (a pause for a weight sync, a cancel) cut the generation before it ended, at any count, 0
# included; its count is no length, and learned as one it taught the predictor short (trace55).
NO_LENGTH = (
    "must be 'stop' or 'length': a generation that ended otherwise (an engine's abort) says no length "
    "to learn from, so it is no actual"
)


def says_length(finish_reason: str | None) -> bool:
    """Whether a generation that ended so has a length to learn from: ``stop`` or ``length``, or an
    unknown finish (None, a trace row's). The one rule of what is an actual: a trace row and ``POST
    /actuals`` refuse any other (``actual_finish``), a result of any other is stored and reported by
    no client (``service.client.actuals.says_length``), and its count is not held to a length's least
    (``output_length``)."""
    return finish_reason is None or finish_reason in FINISH_REASONS


def result_says_length(finish_reason: str, output_tokens: int) -> bool:
    """Whether a stored result says something of length: it stopped or hit its cap (``says_length``),
    with a token out. One that does not is reported by no client (``service.client.actuals``), so an
    asked-for retrain takes such a trajectory as settled without an actual
    (``service.learning.step_over``). No entry takes an output of no token with either reason now
    (``output_length``); one stored before says nothing. Here, not in the client's package, so that
    ``serve`` reads it without importing the client's HTTP side (httpx, ~0.2 s of every start)."""
    return says_length(finish_reason) and output_tokens >= MINIMUM["output_tokens"]


def actual_finish(finish_reason: str | None) -> str | None:
    """``finish_reason`` of an actual (``says_length``), or a ``ValueError`` in ``NO_LENGTH``'s words."""
    if not says_length(finish_reason):
        raise ValueError(NO_LENGTH)
    return finish_reason


def output_length(output_tokens: int, finish_reason: str | None = None) -> int:
    """``output_tokens`` as a reported generation's length, or a ``ValueError`` saying why it is none.

    Every entry an output length comes in by refuses one below its least in these words, so none
    takes what another refuses: a trace cell (``int_cell``), ``POST /actuals``, the sidecar's
    ``/done``, the delivery's ``complete`` (learn54; ``/done`` took 0). A generation that says no
    length (``says_length``: a worker's ``abort``, of which no actual is made) is not held to it: an
    abort before its first token is 0; None is a length of unknown finish, as a trace row's."""
    if not says_length(finish_reason):
        return output_tokens
    if output_tokens < MINIMUM["output_tokens"]:
        raise ValueError(_below("output_tokens", MINIMUM["output_tokens"]))
    return output_tokens


def _below(column: str, minimum: int) -> str:
    """The words a count below its least is refused in (``BELOW_MINIMUM``'s reason, where one is)."""
    why = BELOW_MINIMUM.get(column)
    return f"must be >= {minimum}" + (f": {why}" if why else "")


class TraceFormatError(InvalidInputError):
    """A malformed trace cell, located by source, line (1-based, header = line 1 for csv) and column.

    ``compared``: where the cell is refused against another column of its row (an output past its
    cap), how and which: (``"exceeds"``, ``"max_new_tokens"``, 5), the reason then ``exceeds
    max_new_tokens=5``; a renaming names that column as the file does (``predictors.tracerename``)."""

    def __init__(
        self,
        source: str,
        line: int,
        column: str,
        value: object,
        reason: str,
        compared: tuple[str, str, object] | None = None,
    ) -> None:
        self.source = source
        self.line = line
        self.column = column
        self.compared = compared
        super().__init__(f"{source}:{line}:{column}", value, reason)


def int_cell(raw: object, column: str, minimum: int) -> int:
    """An integer cell as every trace path reads it: ``12`` and ``12.0``, never ``12.5``; a
    ``ValueError`` saying why not."""
    if isinstance(raw, bool):
        raise ValueError("expected an integer, got a boolean")
    if isinstance(raw, int):
        value = raw
    elif isinstance(raw, float):
        value = integral(raw)
    else:
        text = _plain_number(raw)
        try:
            value = int(text)
        except ValueError:
            # "12.0" is accepted; "12.5" and "abc" are not
            value = integral(_number(text, "expected an integer"))
    if value < minimum:
        raise ValueError(_below(column, minimum))
    if value > INT64_MAX:  # counts and steps are held as int64 columns
        raise ValueError(f"exceeds {INT64_MAX}")
    return value


def integral(number: float) -> int:
    """A count written as a float (``12.0``, ``1e2``) as the integer it is; a ``ValueError`` for a
    fraction, NaN or an infinity. The one rule a count is read by wherever one arrives as a number:
    every trace path (``int_cell``) and the API's bodies (``json_count``)."""
    if not math.isfinite(number) or number != int(number):
        raise ValueError("expected an integer")
    return int(number)


def json_count(value: object) -> object:
    """A count in a JSON body (a pydantic ``BeforeValidator``): a float read by ``integral``, refused
    as ``integral`` refuses it; anything else as it came, for the model's strict ``int`` to take or refuse.
    JSON has one number type, so ``1.0`` is the integer 1 (JSON Schema's ``integer`` takes it, and a
    float column's writer emits it), as a trace reads it; ``true`` and ``"1"`` are no number in JSON,
    and a strict body refuses them, where a csv cell, always text, cannot tell. The refusal's words do
    not name the value: every 422 that shows them leads with it (``step=1.5: expected an integer``,
    ``service.problems.details.named``, the sidecar's pull API too), and said twice it read
    ``step=1.5: expected an integer, got 1.5`` (user66)."""
    if type(value) is not float:
        return value
    return integral(value)


# The largest integer a float holds exactly with every smaller one: past it a float id may be another
# integer's, rounded (two prompts under one id), and no reader can tell which it was.
FLOAT_ID_EXACT = 2**53


def id_cell(raw: object) -> str:
    """A prompt id as every trace file reads it: one prompt, one id, whatever its file's type for it.

    Text is the id as written (stripped): a csv cell is always text, so ``007`` and ``1.0`` there are
    those ids. A number (jsonl, a parquet column) is an integer's id, read as the integer's digits:
    ``1``, ``1.0``, ``1e0`` and a decimal ``1.0`` are all ``'1'``. A float id column (pandas makes one
    of an int column holding a null, or after a merge) read ``'1.0'`` where jsonl's ``1`` read ``'1'``:
    the same prompt under two ids across steps, and its history split (ids56). A ``ValueError`` for
    what is no id: a boolean (a flag column), NaN (pandas' missing value), an infinite or non-integral
    number (``1.5``: a column of reals mapped as the id, almost surely), and a float past 2**53, which
    may be another integer rounded."""
    if isinstance(raw, bool):
        raise ValueError("expected text or a number, got a boolean")
    if isinstance(raw, int):
        return str(raw)
    if isinstance(raw, (float, Decimal)):
        if raw != raw:  # NaN (float or decimal)
            raise ValueError("required value is missing (NaN: a missing value, as pandas writes one)")
        if not math.isfinite(raw):
            raise ValueError("an infinite number is no id")
        if raw != int(raw):
            raise ValueError("a number as an id must be an integer (a column of reals taken for the ids?)")
        if isinstance(raw, float) and abs(raw) > FLOAT_ID_EXACT:
            reason = "a float id past 2**53 may be another integer rounded: write the ids as integers or text"
            raise ValueError(reason)
        return str(int(raw))
    return str(raw).strip()


def _plain_number(raw: object) -> str:
    """A number cell's text, refused (``ValueError``) when it holds what only Python reads as a
    number: ``int``/``float`` take ``1_0`` as 10 and Arabic-Indic ``\\u0665`` as 5."""
    text = str(raw).strip()
    if not text.isascii() or "_" in text:
        raise ValueError("expected a number in ASCII digits, without '_'")
    return text


def _number(text: str, reason: str) -> float:
    """``float(text)``, or a ``ValueError`` saying ``reason``: float's own message ("could not
    convert string to float: 'zero'") names Python's type, not the column's, and repeats the cell."""
    try:
        return float(text)
    except ValueError:
        raise ValueError(reason) from None


def _float_cell(raw: object) -> float:
    value = (
        _number(_plain_number(raw), "expected a number") if not isinstance(raw, (int, float)) else float(raw)
    )
    if not math.isfinite(value):
        raise ValueError("must be a finite number")
    return value


def _empty(raw: object) -> bool:
    return raw is None or (isinstance(raw, str) and raw.strip() == "")


def parse_row(cells: Mapping[str, object], source: str, line: int) -> TraceRow:
    """Validate one row of raw cells into a ``TraceRow``; every problem names source, line and column."""
    for column in REQUIRED_COLUMNS:
        if column not in cells or _empty(cells[column]):
            raise TraceFormatError(source, line, column, cells.get(column), "required value is missing")
    try:
        prompt_id = id_cell(cells["prompt_id"])
    except ValueError as exc:
        raw_id = cells["prompt_id"]  # a decimal shown as its number, not as ``Decimal('1.5')``
        shown = float(raw_id) if isinstance(raw_id, Decimal) else raw_id
        raise TraceFormatError(source, line, "prompt_id", shown, str(exc)) from None
    finish = cells.get("finish_reason")
    finish_reason = None if _empty(finish) else str(finish).strip()
    if not says_length(finish_reason):  # before the counts: an abort's 0 is no miscount, it is no actual
        raise TraceFormatError(source, line, "finish_reason", finish, NO_LENGTH)
    current = ""
    try:
        current = "step"
        step = int_cell(cells["step"], current, MINIMUM[current])
        current = "sample_idx"
        sample_idx = int_cell(cells["sample_idx"], current, MINIMUM[current])
        current = "prompt_tokens"
        prompt_tokens = int_cell(cells["prompt_tokens"], current, MINIMUM[current])
        current = "output_tokens"
        output_tokens = int_cell(cells["output_tokens"], current, MINIMUM[current])
        current = "max_new_tokens"
        raw_cap = cells.get(current)
        max_new = None if _empty(raw_cap) else int_cell(raw_cap, current, MINIMUM[current])
        current = "reward"
        raw_reward = cells.get(current)
        reward = None if _empty(raw_reward) else _float_cell(raw_reward)
    except ValueError as exc:
        raise TraceFormatError(source, line, current, cells.get(current), str(exc)) from None
    if max_new is not None and output_tokens > max_new:
        compared = ("exceeds", "max_new_tokens", max_new)
        reason = f"exceeds max_new_tokens={max_new}"
        raise TraceFormatError(source, line, "output_tokens", output_tokens, reason, compared)
    known = set(REQUIRED_COLUMNS) | set(OPTIONAL_COLUMNS)
    extras = {k: v for k, v in cells.items() if k not in known and not _empty(v)}
    return TraceRow(
        step=step,
        prompt_id=prompt_id,
        sample_idx=sample_idx,
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
        max_new_tokens=max_new,
        finish_reason=finish_reason,
        reward=reward,
        features=_typed_features(extras),
    )


def _typed_features(extras: Mapping[str, object]) -> dict[str, float | str]:
    typed: dict[str, float | str] = {}
    for name, raw in extras.items():
        if isinstance(raw, (int, float)) and not isinstance(raw, bool):
            typed[name] = float(raw)
            continue
        try:
            typed[name] = float(str(raw))
        except ValueError:
            typed[name] = str(raw)
    return typed
