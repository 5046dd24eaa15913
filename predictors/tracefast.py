"""A vectorised fast path for reading traces: the same trace as the row-by-row path, or no answer.

Validating a million rows one ``parse_row`` call at a time takes 15-20 s; whole-column checks in
pyarrow take about one. ``parse_row`` stays the authority: this path accepts a table only when every
cell is in a plain form that column operations can check exactly as ``parse_row`` would (digits for
integers, a strict decimal for reals, no whitespace at either end of any text, known finish
reasons...). Anything else, including every malformed row, returns None, and the caller reads the
file row by row, which reports the exact ``file:line:column``. A property test holds the two paths
to the same result.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from predictors.tracetable import FINISH_NAMES, FINISH_UNKNOWN, FloatArray, IntArray, ObjArray, Trace
from scheduler.trace import FLOAT_ID_EXACT, MINIMUM, OPTIONAL_COLUMNS, REQUIRED_COLUMNS

_EDGE_SPACE = r"^[\s\v\x1c-\x1f\x85\p{Z}]|[\s\v\x1c-\x1f\x85\p{Z}]$"  # anything str.strip() would remove
_DIGITS = r"^[0-9]+$"
_REAL = r"^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$"
_KNOWN = frozenset(REQUIRED_COLUMNS) | frozenset(OPTIONAL_COLUMNS)


class _RejectedError(Exception):
    """This table is not for the fast path (the row-by-row path decides what is wrong with it)."""


def fast_trace(table: Any) -> Trace | None:
    """The trace of a pyarrow table, or None when any cell needs the row-by-row rules."""
    names = list(table.column_names)
    if len(set(names)) != len(names) or any(c not in names for c in REQUIRED_COLUMNS):
        return None
    cols = {name: table.column(name).combine_chunks() for name in names}
    try:
        return _build(cols, table.num_rows)
    except _RejectedError:
        return None


def _build(cols: dict[str, Any], n: int) -> Trace:
    ints = {
        name: _ints(cols[name], MINIMUM[name], required=True)
        for name in REQUIRED_COLUMNS
        if name != "prompt_id"
    }
    cap = (
        _ints(cols["max_new_tokens"], MINIMUM["max_new_tokens"], required=False)
        if "max_new_tokens" in cols
        else np.zeros(n, np.int64)
    )
    if np.any((cap > 0) & (ints["output_tokens"] > cap)):
        raise _RejectedError
    numeric: dict[str, FloatArray] = {}
    categorical: dict[str, ObjArray] = {}
    for name, column in cols.items():
        if not name.strip() and not np.all(_missing(column)):
            raise _RejectedError  # a value under no name: the row path refuses it at its line
        if name not in _KNOWN and name.strip():
            _extra(name, column, numeric, categorical)
    return Trace(
        step=ints["step"],
        prompt_id=_text(cols["prompt_id"]),
        sample_idx=ints["sample_idx"],
        prompt_tokens=ints["prompt_tokens"],
        output_tokens=ints["output_tokens"],
        max_new_tokens=cap,
        finish_reason=_finish(cols["finish_reason"], n)
        if "finish_reason" in cols
        else np.full(n, -1, np.int8),
        reward=_reals(cols["reward"]) if "reward" in cols else np.full(n, np.nan),
        numeric=numeric,
        categorical=categorical,
    )


def _types() -> Any:
    import pyarrow.types as pat

    return pat


def _missing(column: Any) -> np.ndarray:
    """Null cells, and empty strings in a text column."""
    import pyarrow.compute as pc

    null = column.is_null().to_numpy(zero_copy_only=False)
    if _types().is_string(column.type) or _types().is_large_string(column.type):
        empty = pc.equal(column, "").fill_null(False).to_numpy(zero_copy_only=False)
        return np.asarray(null | empty)
    return np.asarray(null)


def _all(column: Any, pattern: str, missing: np.ndarray) -> bool:
    import pyarrow.compute as pc

    matches = pc.match_substring_regex(column, pattern).fill_null(False).to_numpy(zero_copy_only=False)
    return bool(np.all(matches | missing))


def _any_edge_space(column: Any) -> bool:
    import pyarrow.compute as pc

    return bool(pc.any(pc.match_substring_regex(column, _EDGE_SPACE)).as_py() or False)


def _ints(column: Any, minimum: int, required: bool) -> IntArray:
    """An integer column: digits-only text, integers, or integral floats; missing -> 0 (optional only)."""
    import pyarrow.compute as pc

    missing = _missing(column)
    if required and np.any(missing):
        raise _RejectedError
    pat = _types()
    if pat.is_string(column.type) or pat.is_large_string(column.type):
        if not _all(column, _DIGITS, missing):
            raise _RejectedError
        filled = column.fill_null("0")
        filled = pc.if_else(pc.equal(filled, ""), "0", filled)
        try:
            values = np.asarray(pc.cast(filled, "int64").to_numpy(zero_copy_only=False), dtype=np.int64)
        except Exception as exc:  # too large for int64
            raise _RejectedError from exc
    elif pat.is_integer(column.type):
        values = np.asarray(column.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
    elif pat.is_floating(column.type):
        raw = np.asarray(column.fill_null(0.0).to_numpy(zero_copy_only=False), dtype=np.float64)
        if not np.all(np.isfinite(raw)) or np.any(raw != np.floor(raw)) or np.any(np.abs(raw) > 2**62):
            raise _RejectedError
        values = raw.astype(np.int64)
    else:
        raise _RejectedError
    if np.any(values[~missing] < minimum):
        raise _RejectedError
    return np.where(missing, 0, values)


def _text(column: Any) -> ObjArray:
    """Prompt ids: non-empty text with nothing to strip, or a column of integers (or of integral
    floats up to 2**53, or of integral decimals) read as their digits, as ``scheduler.trace.id_cell``
    reads each cell: a numeric id column is common (pandas, a dataset's index, a database's
    ``NUMERIC``) and went row by row, ~15x slower."""
    import pyarrow as pa
    import pyarrow.compute as pc

    pat = _types()
    if np.any(_missing(column)):
        raise _RejectedError
    if pat.is_integer(column.type):
        return np.asarray(pc.cast(column, pa.string()).to_numpy(zero_copy_only=False), dtype=object)
    if pat.is_floating(column.type):
        raw = np.asarray(column.to_numpy(zero_copy_only=False), dtype=np.float64)
        # NaN, an infinity, a fraction or a float past 2**53: id_cell refuses it, at its row
        if (
            not np.all(np.isfinite(raw))
            or np.any(raw != np.floor(raw))
            or np.any(np.abs(raw) > FLOAT_ID_EXACT)
        ):
            raise _RejectedError
        digits = pc.cast(pa.array(raw.astype(np.int64)), pa.string())
        return np.asarray(digits.to_numpy(zero_copy_only=False), dtype=object)
    if pat.is_decimal(column.type):
        return _decimal_digits(column)
    if not (pat.is_string(column.type) or pat.is_large_string(column.type)) or _any_edge_space(column):
        raise _RejectedError
    return np.asarray(column.to_numpy(zero_copy_only=False), dtype=object)


def _decimal_digits(column: Any) -> ObjArray:
    """A decimal id column's integers as digits (``1.00`` -> ``'1'``, id_cell's rule): cast to scale 0
    at its own precision, which pyarrow refuses where it would lose a fraction (``1.50``: id_cell
    refuses it, at its row). A decimal holds no NaN nor infinity, and any precision is exact."""
    import pyarrow as pa
    import pyarrow.compute as pc

    whole = pa.decimal256 if _types().is_decimal256(column.type) else pa.decimal128
    try:
        integers = pc.cast(column, whole(column.type.precision, 0))
    except pa.ArrowInvalid as exc:
        raise _RejectedError from exc
    return np.asarray(pc.cast(integers, pa.string()).to_numpy(zero_copy_only=False), dtype=object)


def _finish(column: Any, n: int) -> np.ndarray:
    """finish_reason codes; missing -> -1, anything but 'stop'/'length' -> reject."""
    missing = _missing(column)
    pat = _types()
    if np.all(missing):
        return np.full(n, FINISH_UNKNOWN, np.int8)
    if not (pat.is_string(column.type) or pat.is_large_string(column.type)):
        raise _RejectedError
    values = np.asarray(column.fill_null("").to_numpy(zero_copy_only=False), dtype=object)
    codes = np.full(n, FINISH_UNKNOWN, np.int8)
    for code, name in enumerate(FINISH_NAMES):
        codes[values == name] = code
    if np.any((codes == FINISH_UNKNOWN) & ~missing):
        raise _RejectedError
    return codes


def _reals(column: Any) -> FloatArray:
    """A finite real per cell (missing -> NaN): strict decimals in text, or numbers."""
    values = _numbers(column)
    if values is None or not np.all(np.isfinite(values[~_missing(column)])):
        raise _RejectedError
    return values


def _numbers(column: Any) -> FloatArray | None:
    """float64 with NaN for missing; None when some present cell is not a plain number."""
    import pyarrow.compute as pc

    pat = _types()
    missing = _missing(column)
    if pat.is_string(column.type) or pat.is_large_string(column.type):
        if not _all(column, _REAL, missing):
            return None
        filled = column.fill_null("nan")
        filled = pc.if_else(pc.equal(filled, ""), "nan", filled)
        values = np.asarray(pc.cast(filled, "float64").to_numpy(zero_copy_only=False), dtype=np.float64)
    elif pat.is_integer(column.type) or pat.is_floating(column.type):
        values = np.asarray(column.cast("float64").fill_null(np.nan).to_numpy(zero_copy_only=False))
    else:
        raise _RejectedError
    return np.where(missing, np.nan, values)


def _extra(name: str, column: Any, numeric: dict[str, FloatArray], categorical: dict[str, ObjArray]) -> None:
    """Type one extra column as a whole, as the row path does: numeric if every present value parses."""
    pat = _types()
    missing = _missing(column)
    if pat.is_integer(column.type) or pat.is_floating(column.type):
        values = _numbers(column)
        assert values is not None
        if not np.all(np.isnan(values)):  # the row path never sees a column with no present value
            numeric[name] = values
        return
    if not (pat.is_string(column.type) or pat.is_large_string(column.type)) or _any_edge_space(column):
        raise _RejectedError
    if np.all(missing):
        return
    values = _numbers(column)
    if values is not None:
        numeric[name] = values
        return
    text = np.asarray(column.fill_null("").to_numpy(zero_copy_only=False), dtype=object)
    if all(_python_float(v) for v in set(text[~missing].tolist())):
        raise _RejectedError  # every value reads as a Python number ("inf", "1_0"): the row path types it
    categorical[name] = text


def _python_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
