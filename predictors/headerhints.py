"""Why a trace's header lacks a column, where the header itself shows it: the file is separated by
another character, or names the column in another case or by another tool's name (veRL's
``response_length``). A bare "required column is missing (import
it with --map step=COLUMN)" sent the user looking for a column the file did have."""

from __future__ import annotations

from collections.abc import Collection, Mapping

SHOWN_COLUMNS = 12  # of a header listed in a missing column's error: enough to pick from, one line
# Another tool's name for a trace column: the column it stands for, and whose name it is. A --map onto
# one is refused (``tracerename.check_target``), as a header naming a column so (``alias_refusal``);
# a header lacking a required column but naming it so is pointed at it (``missing_hint``). Matched
# whole (casefolded), not by difflib: ``prompt_len`` is 0.87 from ``prompt_length``, and a feature's
# own name (test_traceimport_near_names.py).
ALIASES: dict[str, tuple[str, str]] = {
    "max_tokens": ("max_new_tokens", "vLLM's and OpenAI's name for the cap"),
    "max_completion_tokens": ("max_new_tokens", "OpenAI's chat completions' name for the cap"),
    "max_output_tokens": ("max_new_tokens", "OpenAI's Responses API's name for the cap"),
    "max_response_length": ("max_new_tokens", "veRL's name for the cap (data.max_response_length)"),
    "completion_tokens": ("output_tokens", "vLLM's and OpenAI's name for the output length (usage)"),
    "response_length": ("output_tokens", "veRL's name for the output length"),
    "prompt_length": ("prompt_tokens", "veRL's name for the prompt length"),
    "input_tokens": ("prompt_tokens", "OpenAI's Responses API's name for the prompt length (usage)"),
    "score": ("reward", "veRL's name for the reward (its rollout dumps' field)"),
}


def alias_refusal(columns: Collection[str]) -> tuple[str, str] | None:
    """The first of ``columns`` (a header's names after any ``--map``) that is another tool's name for a
    trace column (``ALIASES``), and why a trace may not hold it; None where none is.

    Such a column was read as a feature of that name: a file's ``max_tokens`` left the trace without a
    cap (an output past it accepted), its ``completion_tokens`` handed the predictor the very length it
    is to predict, and its ``score`` (a reward) was no reward. A ``--map`` onto such a name is refused
    (``tracerename.check_target``); a file naming a column so is refused alike, pointed at the
    ``--map`` that imports it as the trace's column, or, beside that column, at leaving it out
    (edges60). Kept as a feature, it takes another name by ``--map``, as any feature may."""
    present = set(columns)
    for name in columns:
        alias = ALIASES.get(name.casefold())
        if alias is None:
            continue
        column, whose = alias
        keep = "a feature may not carry another tool's name for a trace column; to keep it as one: "
        keep += f"trace import --map NAME={name}"
        if column in present:
            return (
                name,
                f"{name!r} is {whose}, beside the trace's own {column!r}: leave it out of the file ({keep})",
            )
        meant = f"import it with trace import --map {column}={name}"
        return name, f"{name!r} is {whose}; the trace's column is {column!r}: {meant} ({keep})"
    return None


def missing_columns(missing: list[str], columns: list[str], rename: Mapping[str, str] | None = None) -> str:
    """The message for the required ``missing`` (in the schema's order) that ``columns`` lacks: the
    first one's hint, then the others and the columns the file does have, so one run shows every
    ``--map`` an import needs, not one column a run, and the user need not list the header to find
    what to map.

    ``columns`` are the file's own names and ``rename`` the ``--map`` renaming (file column -> schema
    column): the list shows each column as the file names it, a renamed one with the name it was given
    (``'epoch' (as step)``). It listed the names after the renaming, ``'step', ..., 'rlen'`` of a file
    whose header reads ``epoch, ..., rlen`` (trace56). A column the renaming took is no candidate
    for a hint: it already went to another column."""
    rename = rename or {}
    free = [column for column in columns if column not in rename]
    message = f"required column is missing{missing_hint(missing[0], free)}"
    if separator_hint(columns):
        return message
    if len(missing) > 1:
        message += f"; missing too: {', '.join(missing[1:])}"
    if all(_variant(column, free) is not None for column in missing):
        return message  # each is pointed at in the header already
    shown = ", ".join(_named(c, rename) for c in columns[:SHOWN_COLUMNS])
    more = f" and {len(columns) - SHOWN_COLUMNS:,} more" if len(columns) > SHOWN_COLUMNS else ""
    return f"{message}; the columns it has: {shown}{more}" if columns else f"{message}; it has no column"


def _named(column: str, rename: Mapping[str, str]) -> str:
    """A header's column as the file names it, and what ``--map`` renamed it to, if anything."""
    return f"{column!r} (as {rename[column]})" if column in rename else repr(column)


def missing_hint(column: str, columns: list[str]) -> str:
    """The end of the message for ``column`` missing from ``columns``: the separator the header seems to
    use, else the column it names in another case, else by another tool's name (``ALIASES``: veRL's
    ``response_length``, a file column to ``--map``, not a name to guess), else the ``--map`` that
    imports another column.
    The command is named: replay and ``predictor eval`` read traces too, and take no ``--map``."""
    separator = separator_hint(columns)
    if separator:
        return separator
    other = _variant(column, columns)
    if other is not None:  # --map strips its names: one with blanks at an end can only be renamed
        mapped = f", or import with trace import --map {column}={other}" if other == other.strip() else ""
        return f" (the header has {other!r}: rename it{mapped})"
    named = next((c for c in columns if ALIASES.get(c.casefold(), ("", ""))[0] == column), None)
    if named is not None:
        whose = ALIASES[named.casefold()][1]
        return f" (the header has {named!r}, {whose}: import it with trace import --map {column}={named})"
    return f" (import it with trace import --map {column}=COLUMN)"


def separator_hint(columns: list[str]) -> str:
    """Why a header has no such column when it is one cell holding another separator: a ';'-separated
    export (a comma-decimal locale's spreadsheet) was sent looking for a column name to ``--map``."""
    found = [s for s in (";", "\t", "|") if len(columns) == 1 and s in columns[0]]
    if not found:
        return ""
    cell = columns[0][:48]
    return f": the header is one cell, {cell!r}, separated by {found[0]!r}; save it with ',' between cells"


def _variant(column: str, columns: list[str]) -> str | None:
    """The header's name for ``column`` in another case or with blanks at an end (``Step``), or None."""
    return next((c for c in columns if c.strip().casefold() == column.casefold()), None)
