"""A trace grouped by (prompt, step): the unit every per-prompt aggregate is built from.

Grouping is done with bincounts over integer codes, never a Python loop over rows, because the fold
over steps (``predictors.promptstats``) and the training set both start from it on every retrain.
``repeated_rows`` lives here too: it keys rows by the same (step, prompt, sample) identity; and
``sorted_codes``, prompts numbered whatever the rows' order (a fit's canonical order, its folds).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from predictors import cutoff
from predictors.tracetable import FloatArray, IntArray, ObjArray, Trace

UNIQUE_TABLE_ROWS = 8  # (step, prompt) keys are grouped by a table up to this many times the rows wide


def factorize(values: ObjArray, index: dict[str, int] | None = None) -> tuple[IntArray, dict[str, int]]:
    """Integer codes for strings in first-seen order (a dict pass: faster than sorting objects).

    With ``index`` the codes continue it (it is grown in place): a resumed fold numbers only the
    prompts its new rows bring, exactly as one pass over the old rows and then the new would."""
    index = {} if index is None else index
    setdefault = index.setdefault
    codes = np.fromiter((setdefault(v, len(index)) for v in values), dtype=np.int64, count=len(values))
    return codes, index


def coded_first_seen(codes: IntArray, names: Sequence[str]) -> tuple[IntArray, dict[str, int]]:
    """``factorize`` of the ids ``names[codes]``, from codes already given: each code's first row
    (a minimum per code, no hashing of strings), the codes present renumbered in that order."""
    n = len(codes)
    first = np.full(len(names), n, dtype=np.int64)
    np.minimum.at(first, codes, np.arange(n))
    present = np.flatnonzero(first < n)
    order = present[np.argsort(first[present])]  # the first rows differ: one order
    renumbered = np.empty(len(names), dtype=np.int64)
    renumbered[order] = np.arange(len(order))
    return renumbered[codes], {names[code]: new for new, code in enumerate(order.tolist())}


def recoded(codes: IntArray, values: ObjArray, index: dict[str, int]) -> IntArray:
    """``factorize(values, index)[0]`` from ``codes`` that number ``values`` already (equal codes
    where the values are equal: ``History``'s, made as each chunk was appended), growing ``index``
    alike: only the first row of each distinct code is hashed, in the order those rows come, so
    the new values are numbered as factorize numbers them. Hashing every row of a step again was
    ~6 ms of the ~9 ms resumed fold of a 32,768-row step (each replica's first predict of a step)."""
    if len(codes) == 0:
        return np.empty(0, dtype=np.int64)
    _, first, inverse = np.unique(codes, return_index=True, return_inverse=True)
    order = np.argsort(first)  # the distinct codes by their first row: factorize meets them so
    setdefault = index.setdefault
    mine = np.empty(len(first), dtype=np.int64)
    mine[order] = np.fromiter(
        (setdefault(v, len(index)) for v in values[first[order]]), dtype=np.int64, count=len(first)
    )
    return mine[inverse.ravel()]


def sorted_codes(prompt_ids: ObjArray) -> IntArray:
    """Each row's prompt numbered by the sorted order of the ids: the same numbers whatever the
    order of the rows (first-seen codes would follow it). Sorts the distinct ids only."""
    seen, index = factorize(prompt_ids)  # first-seen codes: index's keys are in code order
    rank = np.empty(len(index), dtype=np.int64)
    rank[np.argsort(np.array(list(index), dtype=object), kind="stable")] = np.arange(len(index))
    return rank[seen]


def repeated_rows(trace: Trace, same_length: bool = False) -> np.ndarray:
    """True for each row whose (step, prompt_id, sample_idx) an earlier row already has (and, with
    ``same_length``, its output_tokens too): one trajectory reported twice.

    A repeat is its own "sibling" in leave-one-out features, so its length leaks into its own
    training example and the p90 calibration (coverage 0.895 -> 0.815 with one step doubled)."""
    codes, _ = factorize(trace.prompt_id)
    columns = [trace.step, codes, trace.sample_idx] + ([trace.output_tokens] if same_length else [])
    order = np.lexsort(columns[::-1])
    keys = np.stack([c[order] for c in columns], axis=1)
    repeat_of_previous = np.zeros(len(trace), dtype=bool)
    repeat_of_previous[1:] = np.all(keys[1:] == keys[:-1], axis=1)
    repeated = np.zeros(len(trace), dtype=bool)
    repeated[order] = repeat_of_previous  # lexsort is stable: the first of equal keys keeps its row
    return repeated


@dataclass(frozen=True, eq=False)
class StepGroups:
    """One row per (prompt, step) group of a trace, sorted by step: the unit the fold consumes."""

    prompt: IntArray  # prompt code of the group
    step: IntArray  # step of the group
    n: IntArray  # samples
    total: FloatArray  # sum of output tokens
    maximum: FloatArray  # max output tokens
    sumsq: FloatArray  # sum of squared output tokens
    log_sum: FloatArray  # sum of log output tokens (log of max(tokens, 1))
    log_sumsq: FloatArray  # sum of squared log output tokens
    truncated: IntArray  # samples at the cap
    trunc_cap: FloatArray  # largest cap of a truncated sample (its length where the cap is unknown); 0: none
    trunc_len: FloatArray  # largest length of a truncated sample; 0: none
    reward_sum: FloatArray  # sum of known rewards
    reward_n: IntArray  # known rewards
    row_group: IntArray  # for every trace row, its group number


def step_groups(trace: Trace, codes: IntArray) -> StepGroups:
    """Aggregate a trace by (prompt code, step) with bincounts (no Python loop over rows).

    The caller's check (``predictors.cutoff``: a request's deadline) runs between the passes: at
    1 M rows (a full re-fold) they took ~76 ms of CPU in one stretch (docs/experiments.md, deadline49)."""
    width = int(codes.max()) + 1 if len(codes) else 1
    step_code, steps = _step_codes(trace.step, width)
    uniq, inverse = _unique_inverse(step_code * width + codes)
    cutoff.check()
    m = len(uniq)
    y = trace.output_tokens.astype(np.float64)
    logy = np.log(np.maximum(y, 1.0))
    n = np.bincount(inverse, minlength=m)
    maximum = np.full(m, -np.inf)
    np.maximum.at(maximum, inverse, y)
    cutoff.check()
    known = ~np.isnan(trace.reward)
    cut = trace.truncated
    trunc_cap, trunc_len = np.zeros(m), np.zeros(m)
    np.maximum.at(trunc_cap, inverse[cut], np.where(trace.max_new_tokens > 0, trace.max_new_tokens, y)[cut])
    np.maximum.at(trunc_len, inverse[cut], y[cut])
    cutoff.check()
    total, sumsq = _sums(inverse, y, minlength=m), _sums(inverse, y * y, minlength=m)
    log_sum, log_sumsq = _sums(inverse, logy, minlength=m), _sums(inverse, logy * logy, minlength=m)
    cutoff.check()
    return StepGroups(
        prompt=uniq % width,
        step=uniq // width if steps is None else steps[uniq // width],
        n=n,
        total=total,
        maximum=maximum,
        sumsq=sumsq,
        log_sum=log_sum,
        log_sumsq=log_sumsq,
        truncated=_sums(inverse, cut, minlength=m).astype(np.int64),
        trunc_cap=trunc_cap,
        trunc_len=trunc_len,
        reward_sum=_sums(inverse, np.where(known, trace.reward, 0.0), minlength=m),
        reward_n=_sums(inverse, known, minlength=m).astype(np.int64),
        row_group=inverse.astype(np.int64),
    )


def _unique_inverse(keys: IntArray) -> tuple[IntArray, IntArray]:
    """``np.unique(keys, return_inverse=True)``, the same arrays, marking the keys present in a table
    over their range where it is not much wider than the rows: (step, prompt) keys of a run span
    steps x prompts, a few times the rows, and the sort it saves was ~40-150 ms of every full fold
    at 1 M rows (the first predict after a late report, each append once a capped history is full,
    each retrain). Keys of a wider range (steps numbered sparsely) are sorted as before."""
    if len(keys) == 0 or int(keys.min()) < 0 or int(keys.max()) >= UNIQUE_TABLE_ROWS * len(keys) + 2**16:
        uniq, inverse = np.unique(keys, return_inverse=True)
        return uniq, inverse.ravel()
    present = np.zeros(int(keys.max()) + 1, dtype=bool)
    present[keys] = True
    rank = np.cumsum(present) - 1
    return np.flatnonzero(present), rank[keys]


def _step_codes(step: IntArray, width: int) -> tuple[IntArray, IntArray | None]:
    """(code of each row's step, step of each code or None where codes are steps) such that
    ``code * width + prompt`` fits in an int64.

    The codes are the steps themselves (no extra sort) unless a step is so large that the key
    would overflow (steps numbered by timestamp, say): the groups of different prompts and steps
    then shared keys, and their lengths were silently mixed up. Then steps are numbered densely."""
    if len(step) == 0 or int(step.max()) < np.iinfo(np.int64).max // width:
        return step, None
    distinct, code = np.unique(step, return_inverse=True)
    return code.ravel().astype(np.int64), distinct


def _sums(groups: IntArray, weights: np.ndarray, minlength: int) -> FloatArray:
    """Per-group sums of ``weights`` as float64 (bincount's stub types it as int)."""
    return np.asarray(np.bincount(groups, weights=weights, minlength=minlength), dtype=np.float64)
