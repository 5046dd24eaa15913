"""What the predictor is asked about: trajectories about to run, one ``Query`` each or a columnar batch.

The service builds ``Query`` objects from a request; replay and training hand over whole columns
(``QueryBatch.from_trace``) so that a 32k-trajectory batch costs no per-row Python work.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from predictors.tracetable import FloatArray, IntArray, ObjArray, Trace, as_level
from scheduler.errors import InvalidInputError

NO_CAP = 2**31 - 1  # stands in for an unknown max_new_tokens: no clipping from above (no raise, no headroom)


@dataclass(frozen=True, slots=True)
class Query:
    """One trajectory to predict."""

    prompt_id: str  # stable prompt identity (matches the trace's prompt_id)
    sample_idx: int  # index within the prompt's group
    prompt_tokens: int  # prompt length, tokens
    max_new_tokens: int  # generation cap: predictions are clipped to [1, max_new_tokens]
    features: Mapping[str, float | str] = field(default_factory=dict)  # extra trace columns, by name


@dataclass(frozen=True, eq=False)
class QueryBatch:
    """Queries held column by column; every array has one entry per query."""

    prompt_id: ObjArray  # str
    sample_idx: IntArray
    prompt_tokens: IntArray
    max_new_tokens: IntArray  # >= 1
    numeric: Mapping[str, FloatArray] = field(default_factory=dict)  # NaN = missing
    categorical: Mapping[str, ObjArray] = field(default_factory=dict)  # "" = missing

    def __len__(self) -> int:
        return len(self.prompt_id)

    def take(self, index: IntArray) -> QueryBatch:
        """The queries at ``index``, as a new batch."""
        return QueryBatch(
            prompt_id=self.prompt_id[index],
            sample_idx=self.sample_idx[index],
            prompt_tokens=self.prompt_tokens[index],
            max_new_tokens=self.max_new_tokens[index],
            numeric={k: v[index] for k, v in self.numeric.items()},
            categorical={k: v[index] for k, v in self.categorical.items()},
        )

    @staticmethod
    def of(queries: Sequence[Query]) -> QueryBatch:
        """Columns from query objects, validating caps and typing extras per column like a trace."""
        for i, q in enumerate(queries):
            if q.max_new_tokens < 1:
                raise InvalidInputError(f"queries[{i}].max_new_tokens", q.max_new_tokens, "must be >= 1")
            if q.prompt_tokens < 0:
                raise InvalidInputError(f"queries[{i}].prompt_tokens", q.prompt_tokens, "must be >= 0")
        prompt = np.empty(len(queries), dtype=object)
        prompt[:] = [q.prompt_id for q in queries]
        names = list(dict.fromkeys(k for q in queries for k in q.features))
        numeric: dict[str, FloatArray] = {}
        categorical: dict[str, ObjArray] = {}
        for name in names:
            values = [q.features.get(name) for q in queries]
            if all(v is None or isinstance(v, (int, float)) for v in values):
                numeric[name] = np.array([np.nan if v is None else float(v) for v in values])
            else:
                text = np.empty(len(values), dtype=object)
                text[:] = [as_level(v) for v in values]
                categorical[name] = text
        return QueryBatch(
            prompt_id=prompt,
            sample_idx=np.fromiter((q.sample_idx for q in queries), dtype=np.int64, count=len(queries)),
            prompt_tokens=np.fromiter((q.prompt_tokens for q in queries), dtype=np.int64, count=len(queries)),
            max_new_tokens=np.fromiter(
                (q.max_new_tokens for q in queries), dtype=np.int64, count=len(queries)
            ),
            numeric=numeric,
            categorical=categorical,
        )

    @staticmethod
    def from_trace(trace: Trace, default_cap: int) -> QueryBatch:
        """The rows of a trace as queries; rows with an unknown cap get ``default_cap``."""
        caps = np.where(trace.max_new_tokens > 0, trace.max_new_tokens, default_cap)
        return QueryBatch(
            prompt_id=trace.prompt_id,
            sample_idx=trace.sample_idx,
            prompt_tokens=trace.prompt_tokens,
            max_new_tokens=caps.astype(np.int64),
            numeric=trace.numeric,
            categorical=trace.categorical,
        )
