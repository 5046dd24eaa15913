"""A trace file's columns renamed into the schema's (``trace import --map``), refusing any renaming that
would lose a column or land two on one name.

Apart from ``predictors.traceio`` because it is a rule of its own, the same for every format: a csv or
parquet header is renamed at once (``Renamer.header``), a jsonl file record by record (each line names
its own columns, so a mapped column none of them names is only known missing at the end). The readers
in ``traceio`` call it before anything checks the header.

An error about a cell after the renaming names the schema's column, which the user's file does not
hold (``output_tokens='0'`` of a file whose column is ``response_length``): ``in_file_terms`` names
the file's column, and the schema's it was mapped to (learn54). An error raised before the renaming,
or by the renaming itself, names the file's own column or the mapping's already: a ``FileNamedError``.
"""

from __future__ import annotations

from collections.abc import Mapping
from difflib import get_close_matches

from predictors.headerhints import ALIASES, separator_hint
from scheduler.errors import InvalidInputError
from scheduler.trace import OPTIONAL_COLUMNS, REQUIRED_COLUMNS, TraceFormatError

TRACE_COLUMNS = (*REQUIRED_COLUMNS, *OPTIONAL_COLUMNS)
NEAR_MISS = 0.85  # difflib's ratio from which a --map target is a trace column misspelt (steps, rewards)


def check_target(target: str, pair: str) -> None:
    """Refuse a ``--map`` onto a name that is a trace column misspelt (``max_new_token``, ``rewards``,
    ``Step``), or another tool's name for one (``ALIASES``: vLLM's ``max_tokens``, veRL's
    ``response_length``). A map onto another name keeps the column as a feature of that name, so the
    typo was taken silently: the file's cap became a feature ``max_new_token`` and the trace had no cap
    (trace56), as it did under ``max_tokens``, 0.83 from ``max_new_tokens`` (edges59). Refused, not
    renamed to the column meant: the format has one name a column, which the errors then name as
    the user's ``--map`` does. A name far from every trace column (``level=difficulty``) still renames
    a feature."""
    if target in TRACE_COLUMNS:
        return
    alias = ALIASES.get(target.casefold())
    if alias is not None:
        column, whose = alias
        source = pair.partition("=")[2].strip()
        reason = (
            f"{target!r} is {whose}; the trace's column is {column!r} (--map {column}={source}; "
            "a --map onto another name keeps a feature)"
        )
        raise InvalidInputError("map", pair, reason)
    near = get_close_matches(target.casefold(), TRACE_COLUMNS, n=1, cutoff=NEAR_MISS)
    if near:
        reason = f"{target!r} is no trace column, {near[0]!r} is (a --map onto another name keeps a feature)"
        raise InvalidInputError("map", pair, reason)


class FileNamedError(TraceFormatError):
    """A trace error naming a column as the file or the ``--map`` names it (a renaming refused, a key
    a jsonl line holds twice), not as the schema: ``in_file_terms`` leaves it as it is."""


def in_file_terms(error: TraceFormatError, rename: Mapping[str, str]) -> TraceFormatError:
    """``error`` naming the file's column where ``rename`` (file column -> schema column) put that
    column under the schema's name the error names, and saying which; likewise the other column a
    cell is compared with (``TraceFormatError.compared``: ``exceeds cap=5`` of a cap the file calls
    ``cap``, where it named ``max_new_tokens``, trace55); any other error as it is."""
    if isinstance(error, FileNamedError):
        return error
    names = {new: old for old, new in rename.items()}
    reason = error.reason
    if error.compared is not None and error.compared[1] in names:
        how, other, value = error.compared
        reason = f"{how} {names[other]}={value} (as {other}: --map {other}={names[other]})"
    source = names.get(error.column)
    if source is None:
        if reason == error.reason:
            return error
        return TraceFormatError(error.source, error.line, error.column, error.value, reason)
    reason = f"as {error.column} (--map {error.column}={source}): {reason}"
    return TraceFormatError(error.source, error.line, source, error.value, reason)


class Renamer:
    """Renames a file's columns into the schema's, refusing a rename that would lose a column."""

    def __init__(self, rename: Mapping[str, str], source: str) -> None:
        self.rename = rename
        self.source = source
        self.unseen = set(rename)  # jsonl: mapped columns no record has named yet

    def header(self, columns: list[str]) -> list[str]:
        """A file's header renamed: every renamed column must exist, and none may land on another."""
        for old in self.rename:
            if old not in columns:
                reason = "no such column to map (--map)" + separator_hint(columns)
                raise FileNamedError(self.source, 1, old, None, reason)
        renamed = [self.rename.get(c, c) for c in columns]
        first: dict[str, int] = {}
        for position, name in enumerate(renamed):
            earlier = first.setdefault(name, position)
            if earlier == position:
                continue
            where = f"columns {earlier + 1} and {position + 1}"
            if not name:  # a blank cell has no name to show: it is named by its position
                raise FileNamedError(
                    self.source,
                    1,
                    f"column {position + 1}",
                    "",
                    f"{where} both have a blank header cell (name every column)",
                )
            mapped = columns[earlier] != name or columns[position] != name
            reason = "would both carry this name after --map" if mapped else "both carry this name"
            raise FileNamedError(self.source, 1, name, None, f"{where} {reason}")
        return renamed

    def cells(self, cells: dict[str, object], line: int) -> dict[str, object]:
        """One record's cells renamed (jsonl: each line names its own columns)."""
        if not self.rename:
            return cells
        self.unseen.difference_update(cells)
        self._check_required_seen(cells, line)
        out: dict[str, object] = {}
        for name, value in cells.items():
            new = self.rename.get(name, name)
            if new in out:
                raise FileNamedError(
                    self.source, line, new, value, "two cells would carry this name after --map"
                )
            out[new] = value
        return out

    def _check_required_seen(self, cells: dict[str, object], line: int) -> None:
        """A record lacking the column mapped onto a required one, when no record before it held that
        column either, is refused as the mapping's mistake: the row's own error named only the
        required column ("output_tokens=None: required value is missing"), not the ``--map`` typo
        that ``check_all_seen`` names for an optional one (a later line cannot mend this line)."""
        for old, new in self.rename.items():
            if new in REQUIRED_COLUMNS and old in self.unseen and old not in cells:
                reason = f"no such column to map (--map {new}={old}): no line up to this one holds it"
                raise FileNamedError(self.source, line, old, None, reason)

    def check_all_seen(self) -> None:
        """After a jsonl file's last record: a mapped column none of them named is refused, as
        ``header`` refuses one a csv or parquet header lacks (a typo would otherwise map nothing)."""
        for old in self.rename:
            if old in self.unseen:
                raise FileNamedError(self.source, 1, old, None, "no such column to map (--map)")
