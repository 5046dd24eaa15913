"""Why a trace's header lacks a column, where the header itself shows it: the file is separated by
another character, or names the column in another case. A bare "required column is missing (import
it with --map step=COLUMN)" sent the user looking for a column the file did have."""

from __future__ import annotations


def missing_hint(column: str, columns: list[str]) -> str:
    """The end of the message for ``column`` missing from ``columns``: the separator the header seems to
    use, else the column it names in another case, else the ``--map`` that imports another column."""
    separator = separator_hint(columns)
    if separator:
        return separator
    other = next((c for c in columns if c.strip().casefold() == column.casefold()), None)
    if other is not None:  # --map strips its names: one with blanks at an end can only be renamed
        mapped = f", or import with --map {column}={other}" if other == other.strip() else ""
        return f" (the header has {other!r}: rename it{mapped})"
    return f" (import it with --map {column}=COLUMN)"


def separator_hint(columns: list[str]) -> str:
    """Why a header has no such column when it is one cell holding another separator: a ';'-separated
    export (a comma-decimal locale's spreadsheet) was sent looking for a column name to ``--map``."""
    found = [s for s in (";", "\t", "|") if len(columns) == 1 and s in columns[0]]
    if not found:
        return ""
    cell = columns[0][:48]
    return f": the header is one cell, {cell!r}, separated by {found[0]!r}; save it with ',' between cells"
