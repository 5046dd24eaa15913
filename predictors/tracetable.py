"""The in-memory form of a trace: one numpy array per column, not a list of ``TraceRow``.

Why columnar: training and evaluation aggregate a million rows per step by prompt, which is a few
vectorised numpy passes over columns but seconds of Python over row objects. ``TraceRow``
(scheduler/trace.py) stays the unit of validation and of exchange with code that wants rows:
``Trace.from_rows`` and ``Trace.rows`` convert both ways.

Missing optional values are encoded in-band so every column stays a plain numpy array:
``max_new_tokens`` 0 (a real cap is >= 1), ``finish_reason`` -1, ``reward`` NaN, numeric extras NaN,
categorical extras "" (empty string).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from scheduler.trace import INT64_MAX, MINIMUM, TraceRow

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
ObjArray = npt.NDArray[np.object_]
CodeArray = npt.NDArray[np.int8]

FINISH_NAMES: tuple[str, ...] = ("stop", "length")  # finish_reason code i <-> FINISH_NAMES[i]
FINISH_UNKNOWN = -1
FINISH_LENGTH = 1  # code of "length": truncated at max_new_tokens


@dataclass(frozen=True, eq=False)
class Trace:
    """A validated trace held column by column; every array has one entry per row."""

    step: IntArray  # training step (epoch) that generated the row
    prompt_id: ObjArray  # str prompt identity, stable across steps
    sample_idx: IntArray  # index within the prompt's group
    prompt_tokens: IntArray  # prompt length, tokens
    output_tokens: IntArray  # generated length, tokens
    max_new_tokens: IntArray  # generation cap; 0 = unknown
    finish_reason: CodeArray  # index into FINISH_NAMES; -1 = unknown
    reward: FloatArray  # reward; NaN = unknown
    numeric: Mapping[str, FloatArray] = field(default_factory=dict)  # extra numeric columns, NaN = missing
    categorical: Mapping[str, ObjArray] = field(default_factory=dict)  # extra text columns, "" = missing

    def __post_init__(self) -> None:
        n = len(self.step)
        columns = [self.prompt_id, self.sample_idx, self.prompt_tokens, self.output_tokens]
        columns += [self.max_new_tokens, self.finish_reason, self.reward]
        columns += [*self.numeric.values(), *self.categorical.values()]
        if any(len(c) != n for c in columns):
            raise ValueError("every trace column must have one entry per row")

    def __len__(self) -> int:
        return len(self.step)

    @property
    def truncated(self) -> npt.NDArray[np.bool_]:
        """Rows that stopped at the cap: finish_reason "length", or output == cap when that is unknown."""
        at_cap = (self.max_new_tokens > 0) & (self.output_tokens >= self.max_new_tokens)
        known = self.finish_reason != FINISH_UNKNOWN
        return np.where(known, self.finish_reason == FINISH_LENGTH, at_cap)

    def steps(self) -> IntArray:
        """The distinct steps present, ascending."""
        return np.unique(self.step)

    def take(self, index: npt.NDArray[np.bool_] | npt.NDArray[np.intp] | IntArray | slice) -> Trace:
        """The rows selected by a boolean mask or an index array, as a new trace (by a slice: views of
        these columns, no copy)."""
        return Trace(
            step=self.step[index],
            prompt_id=self.prompt_id[index],
            sample_idx=self.sample_idx[index],
            prompt_tokens=self.prompt_tokens[index],
            output_tokens=self.output_tokens[index],
            max_new_tokens=self.max_new_tokens[index],
            finish_reason=self.finish_reason[index],
            reward=self.reward[index],
            numeric={k: v[index] for k, v in self.numeric.items()},
            categorical={k: v[index] for k, v in self.categorical.items()},
        )

    @staticmethod
    def concat(traces: Sequence[Trace]) -> Trace:
        """Rows of all traces in order; an extra column missing from one trace is missing in its rows.

        A column is typed as ``from_rows`` would type all the rows at once: text in any trace makes
        it text in all (a worker's reports arrive in batches, and one batch may hold only numbers).
        """
        if not traces:
            return empty_trace()
        cat_names = list(dict.fromkeys(k for t in traces for k in t.categorical))
        numeric_names = [k for k in dict.fromkeys(k for t in traces for k in t.numeric) if k not in cat_names]

        def cat(get: str) -> np.ndarray:
            return np.concatenate([getattr(t, get) for t in traces])

        return Trace(
            step=cat("step"),
            prompt_id=cat("prompt_id"),
            sample_idx=cat("sample_idx"),
            prompt_tokens=cat("prompt_tokens"),
            output_tokens=cat("output_tokens"),
            max_new_tokens=cat("max_new_tokens"),
            finish_reason=cat("finish_reason"),
            reward=cat("reward"),
            numeric={
                k: np.concatenate([t.numeric.get(k, np.full(len(t), np.nan)) for t in traces])
                for k in numeric_names
            },
            categorical={k: np.concatenate([t.text_column(k) for t in traces]) for k in cat_names},
        )

    def text_column(self, name: str) -> ObjArray:
        """Extra column ``name`` as text: numbers as ``from_rows`` writes them, "" where missing."""
        if name in self.categorical:
            return self.categorical[name]
        return numbers_as_text(self.numeric[name]) if name in self.numeric else _blank(len(self))

    @staticmethod
    def from_rows(rows: Iterable[TraceRow]) -> Trace:
        """Columns from validated rows; an extra column is numeric only if every value in it is a number."""
        return TraceBuilder().extend(rows).build()

    def rows(self) -> Iterator[TraceRow]:
        """The rows back as ``TraceRow`` objects (slow for millions of rows; for exchange, not compute)."""
        for i in range(len(self)):
            features: dict[str, float | str] = {}
            for name, num in self.numeric.items():
                if not np.isnan(num[i]):
                    features[name] = float(num[i])
            for name, text in self.categorical.items():
                if text[i] != "":
                    features[name] = str(text[i])
            code = int(self.finish_reason[i])
            yield TraceRow(
                step=int(self.step[i]),
                prompt_id=str(self.prompt_id[i]),
                sample_idx=int(self.sample_idx[i]),
                prompt_tokens=int(self.prompt_tokens[i]),
                output_tokens=int(self.output_tokens[i]),
                max_new_tokens=int(self.max_new_tokens[i]) or None,
                finish_reason=FINISH_NAMES[code] if code >= 0 else None,
                reward=None if np.isnan(self.reward[i]) else float(self.reward[i]),
                features=features,
            )


def _blank(n: int) -> ObjArray:
    out = np.empty(n, dtype=object)
    out[:] = ""
    return out


def numbers_as_text(values: FloatArray) -> ObjArray:
    """A numeric extra column as the text ``from_rows`` gives numbers in a text column; NaN -> ""."""
    text = _blank(len(values))
    known = ~np.isnan(values)
    text[known] = [number_text(float(v)) for v in values[known]]
    return text


def empty_trace() -> Trace:
    """A trace with no rows (the identity of ``Trace.concat``)."""
    return TraceBuilder().build()


class TraceBuilder:
    """Accumulates validated rows, then types each extra column once all its values are known."""

    def __init__(self) -> None:
        self._ints: dict[str, list[int]] = {k: [] for k in _INT_COLUMNS}
        self._prompt: list[str] = []
        self._finish: list[int] = []
        self._reward: list[float] = []
        self._extras: dict[str, dict[int, float | str]] = {}  # column -> row index -> value

    def add(self, row: TraceRow, raw_extras: Mapping[str, float | str] | None = None) -> None:
        """Append one row; ``raw_extras`` (text as read) overrides ``row.features`` for typing."""
        index = len(self._prompt)
        for name in _INT_COLUMNS:
            self._ints[name].append(getattr(row, name) or 0)
        self._prompt.append(row.prompt_id)
        self._finish.append(FINISH_NAMES.index(row.finish_reason) if row.finish_reason else FINISH_UNKNOWN)
        self._reward.append(np.nan if row.reward is None else row.reward)
        for name, value in (row.features if raw_extras is None else raw_extras).items():
            self._extras.setdefault(name, {})[index] = value

    def extend(self, rows: Iterable[TraceRow]) -> TraceBuilder:
        """Append every row; returns self for chaining."""
        for row in rows:
            self.add(row)
        return self

    def build(self) -> Trace:
        """The trace, with each extra column typed as a whole (numeric, else categorical)."""
        n = len(self._prompt)
        numeric, categorical = typed_extras(n, self._extras)
        prompt = np.empty(n, dtype=object)
        prompt[:] = self._prompt
        return Trace(
            **{k: np.asarray(v, dtype=np.int64) for k, v in self._ints.items()},
            prompt_id=prompt,
            finish_reason=np.asarray(self._finish, dtype=np.int8),
            reward=np.asarray(self._reward, dtype=np.float64),
            numeric=numeric,
            categorical=categorical,
        )


_INT_COLUMNS = ("step", "sample_idx", "prompt_tokens", "output_tokens", "max_new_tokens")
_FINISH_READ = (None, "", *FINISH_NAMES)  # what ``TraceBuilder.add`` codes: "" and None as unknown


def foldable(row: TraceRow) -> TraceRow:
    """``row`` itself where ``TraceBuilder`` holds each of its fields as the trace format means it,
    else a ``ValueError`` naming the field. The builder trusts its rows (``parse_row`` or an API
    schema checked them); a row read back from a store something else may have written (the actuals
    stream, ``service.learning.actuals``) is checked here first, or one bad value (a finish reason
    "abort", features ``[1.0]``, a reward "high") raises out of ``build`` and takes every row read
    with it, on every later read of that store (poison51).

    The counts are the trace format's too (``scheduler.trace.parse_row``, which the API's schema
    agrees with): a prompt of at least one token, a cap of at least one where one is given, and no
    output past its cap. Such a row builds, but no engine ran it (an empty prompt is refused, no
    output passes its cap), and an output past its cap taught the predictor a length no sample can
    have; ``POST /actuals`` refuses it, and a release before 2026-12-02 stored it (learn52)."""
    for name in _INT_COLUMNS:
        value = getattr(row, name)
        if value is None and name == "max_new_tokens":
            continue
        if not _is_int64_count(value) or value < MINIMUM[name]:
            raise ValueError(f"{name} is not a count in [{MINIMUM[name]}, {INT64_MAX}]")
    if row.max_new_tokens is not None and row.output_tokens > row.max_new_tokens:
        raise ValueError(f"output_tokens {row.output_tokens} exceeds max_new_tokens {row.max_new_tokens}")
    if not isinstance(row.prompt_id, str):
        raise ValueError("prompt_id is not text")
    if row.finish_reason not in _FINISH_READ:
        raise ValueError(f"finish_reason is neither none nor one of {FINISH_NAMES}")
    if row.reward is not None and not finite_number(row.reward):
        raise ValueError("reward is not a finite number")
    if not isinstance(row.features, Mapping):
        raise ValueError("features is not an object")
    for name, value in row.features.items():
        if not isinstance(name, str) or not feature_value(value):
            raise ValueError(f"feature {str(name)[:64]!r} is neither text nor a finite number")
    return row


def finite_number(value: object) -> bool:
    """Whether a float column holds ``value`` as the finite number it is: an int or a float, not a
    bool (JSON's ``true`` is no number), not NaN or infinite, not an int past a float's range."""
    if type(value) is float:  # the usual case first: the actuals page reader asks it per value
        return math.isfinite(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int past 1e308
        return False


def feature_value(value: object) -> bool:
    """Whether ``value`` is one an extra column holds: text, or a finite number (``finite_number``)."""
    return isinstance(value, str) or finite_number(value)


def _is_int64_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= INT64_MAX


def typed_extras(
    n: int, extras: Mapping[str, Mapping[int, float | str]]
) -> tuple[dict[str, FloatArray], dict[str, ObjArray]]:
    """The extra columns of ``n`` rows (``extras``: column -> row index -> value as read), each typed
    as a whole: numeric where every value is a number, else text. Shared by ``TraceBuilder`` and the
    actuals stream's page reader (``service.learning.actuals_page``), so both type a column alike."""
    numeric: dict[str, FloatArray] = {}
    categorical: dict[str, ObjArray] = {}
    for name, values in extras.items():
        as_numbers = _all_numeric(values.values())
        if as_numbers is not None:
            column = np.full(n, np.nan)
            column[list(values)] = as_numbers
            numeric[name] = column
        else:
            text = _blank(n)
            for i, v in values.items():
                text[i] = as_level(v)
            categorical[name] = text
    return numeric, categorical


def _all_numeric(values: Iterable[float | str]) -> list[float] | None:
    out: list[float] = []
    for v in values:
        if isinstance(v, float):
            out.append(v)
            continue
        try:
            out.append(float(v))
        except ValueError:
            return None
    return out


def as_level(value: float | str | None) -> str:
    """A value of a text column as a trace holds it: numbers as ``number_text``, missing as ""."""
    if value is None:
        return ""
    return value if isinstance(value, str) else number_text(float(value))


def number_text(value: float) -> str:
    """A number as a category level: ``3`` for 3.0, the shortest round-trip form otherwise."""
    return str(int(value)) if value.is_integer() else repr(value)


# Why a trace refuses an infinite feature: the service's entries hold the rule already (``POST
# /actuals`` and ``trace push`` answer "Input should be a finite number", the history's rows
# ``feature_value``), where a trace took one, trained on it and wrote it to jsonl as ``Infinity``.
INFINITE_FEATURE = "an infinite number: a feature is text or a finite number, as POST /actuals takes one"


def first_infinite(trace: Trace) -> tuple[str, int] | None:
    """(column, row) of the first row holding an infinite value in a numeric extra column, the first
    such column of that row; None where every one is finite or missing (NaN: a missing value)."""
    found: tuple[int, str] | None = None
    for name, values in trace.numeric.items():
        rows = np.flatnonzero(np.isinf(values))
        if len(rows) and (found is None or int(rows[0]) < found[0]):
            found = (int(rows[0]), name)
    return None if found is None else (found[1], found[0])
