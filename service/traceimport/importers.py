"""Turn other tools' rollout records into the project's trace format.

Two sources:

- veRL rollout dumps (``trainer.rollout_data_dir``): one ``{step}.jsonl`` per training step, each
  line ``{"input": <decoded prompt>, "output": <decoded response>, "score": <reward>, "step": <n>,
  ...extra reward fields}``. veRL writes text, not token counts, so counts come from a tokenizer the
  user names by its local ``tokenizer.json`` or model folder (``service.traceimport.tokenizer``); the
  prompt id is a stable hash of the input text, so the same prompt keeps its id across epochs; a prompt's
  samples in one step are numbered in file order (veRL's ``balance_batch`` reorders a prompt's
  samples, and no line says which was generated first). A multi-turn line whose output holds tool
  results is counted whole and counted for the summary (``holds_tool_output``). Training steps
  start at 1: a step-0 line is validation before training and is refused, as is a line carrying
  the ``reward`` key only ``_validate`` adds, and two files of one step (see
  ``_refuse_validation``). veRL decodes without special tokens, so a response that stopped on EOS
  re-encodes one token short: with the cap known, the import adds it back (``count_eos``). Extra
  fields (``acc``, DAPO's ``overlong_reward``, ``request_id``, ``gts``, ...) are dropped unless
  named in ``keep``: a reward manager computes them from the finished response, so as predictor
  features they would hand a step its own answer (see ``_kept_extras``).
- generic csv / jsonl / parquet with other column names: a mapping renames them into the schema
  (``--map output_tokens=response_length``) and every row is validated by ``parse_row``.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from predictors.headerhints import ALIASES
from predictors.jsonlobjects import jsonl_objects
from predictors.traceio import check_input_file, check_unique, read_renamed, refuse_infinite, utf8_rows
from predictors.tracerename import check_target
from predictors.tracetable import Trace, TraceBuilder
from scheduler.errors import InvalidInputError
from scheduler.trace import (
    MINIMUM,
    OPTIONAL_COLUMNS,
    REQUIRED_COLUMNS,
    TraceFormatError,
    TraceRow,
    int_cell,
    parse_row,
)
from service.traceimport.tokenizer import count_tokens, describe_tokenizer, load_tokenizer, tokenizer_file

_VERL_TEXT_FIELDS = frozenset({"input", "output", "gts", "score", "step"})
_VERL_READ_FIELDS = frozenset({"input", "output", "score", "step"})  # what a trace row is made of
_SCHEMA = frozenset(REQUIRED_COLUMNS) | frozenset(OPTIONAL_COLUMNS)
GENERIC_FORMATS = ("csv", "jsonl", "parquet")


@dataclass(frozen=True, slots=True)
class ImportResult:
    """An imported trace and what the import did, for the command to report."""

    trace: Trace
    files: int  # input files read
    tokenizer: str  # the tokenizer that counted tokens, as ``describe_tokenizer`` says ("" for a file's)
    clamped: int  # rows whose re-tokenized output exceeded the cap and were set to it
    empty: tuple[str, ...] = ()  # step files that held no rows (a 0-byte dump imported as nothing, unsaid)
    tool_turns: int = 0  # rows whose output holds tool results (``holds_tool_output``): not all generated
    dropped: tuple[str, ...] = ()  # the dump lines' fields left out of the trace (not read, not kept)
    skipped: tuple[str, ...] = ()  # .jsonl files beside the dumps not named by a step alone: not read


def prompt_hash(text: str) -> str:
    """The stable id of a prompt text: the first 16 hex digits of its SHA-256, prefixed ``p``."""
    return "p" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def import_verl(
    directory: str | Path,
    tokenizer_path: str | Path,
    max_new_tokens: int | None,
    keep: Sequence[str] = (),
    count_eos: bool = True,
) -> ImportResult:
    """Import every ``{step}.jsonl`` under ``directory``, counting tokens with ``tokenizer_path`` (a
    ``tokenizer.json`` or a model folder holding one);
    of the dump lines' extra fields only those named in ``keep`` become columns. With a cap and
    ``count_eos``, an output that re-encodes below the cap gets back the EOS token veRL counted in
    its response length but decoded away (see ``_output_count``). Another ``.jsonl`` there (``1.5.jsonl``,
    a trace written into the folder) is not a dump veRL writes: it is not read, and named in ``skipped``
    for the command to say, since a dump misnamed by hand would otherwise vanish from the trace unsaid."""
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise InvalidInputError(
            "dir", str(directory), "is a file, not a folder of {step}.jsonl rollout dumps"
        )
    if not directory.is_dir():
        raise InvalidInputError("dir", str(directory), "no such directory")
    _check_keep(keep)
    listed = list(directory.glob("*.jsonl"))  # listed once: the dumps, and what is beside them
    files = sorted((p for p in listed if _is_step_name(p.stem)), key=_step_order)
    skipped = tuple(sorted(p.name for p in listed if not _is_step_name(p.stem)))
    if not files:
        named = "; veRL names each dump by its step alone, as 12.jsonl" if skipped else ""
        reason = f"holds no {{step}}.jsonl rollout dumps ({_listing(directory)}){named}"
        raise InvalidInputError("dir", str(directory), reason)
    _refuse_one_step_twice(files)
    tokenizer_json = tokenizer_file(tokenizer_path)
    tokenizer = load_tokenizer(tokenizer_json)
    builder, clamped, kept, empty, tool_turns, where = TraceBuilder(), 0, frozenset(keep), [], 0, []
    fields: set[str] = set()
    for path in files:
        records = _read_dump(path)
        fields.update(name for _, record in records for name in record)
        if not records:
            empty.append(path.name)
        _refuse_validation(path, records)
        tool_turns += sum(holds_tool_output(record) for _, record in records)
        counts = count_tokens(tokenizer, [r[1]["input"] for r in records], [r[1]["output"] for r in records])
        seen: dict[tuple[int, str], int] = {}
        for (line, record), (prompt_tokens, output_tokens) in zip(records, counts, strict=True):
            row, was_clamped = _verl_row(
                path, line, record, (prompt_tokens, output_tokens), (max_new_tokens, count_eos), seen, kept
            )
            builder.add(row)
            where.append((str(path), line))
            clamped += was_clamped
    trace = builder.build()
    refuse_infinite(trace, where)  # a kept field's Infinity, as every trace file's
    if len(trace) == 0:
        raise InvalidInputError("dir", str(directory), "its {step}.jsonl dumps hold no rows")
    check_unique(trace, str(directory))
    _check_kept_present(trace, keep, directory)
    described = describe_tokenizer(tokenizer, tokenizer_json)
    dropped = tuple(sorted(fields - _VERL_READ_FIELDS - kept))
    return ImportResult(trace, len(files), described, clamped, tuple(empty), tool_turns, dropped, skipped)


def _listing(directory: Path, shown: int = 6) -> str:
    """What a folder without dumps holds, folders marked ``/``: pointed at the run's folder, which holds
    ``rollout_data_dir`` and ``validation_data_dir``, the import named neither."""
    names = sorted(p.name + ("/" if p.is_dir() else "") for p in directory.iterdir())
    if not names:
        return "it is empty"
    more = f", and {len(names) - shown} more" if len(names) > shown else ""
    return f"it holds {', '.join(names[:shown])}{more}"


def _step_order(path: Path) -> tuple[int, str]:
    """Files by step, then by name: a step named twice is reported the same way whatever the
    directory listing's order."""
    return int(path.stem), path.name


def _is_step_name(stem: str) -> bool:
    """Whether a dump's file name is a step number veRL writes: ASCII digits only. ``isdigit`` alone
    admits ``²`` (``int`` then raises) and other scripts' digits (an Arabic-Indic one would pose as
    step 1)."""
    return stem.isascii() and stem.isdecimal()


def _check_keep(keep: Sequence[str]) -> None:
    """Refuse a ``--keep-field`` that names a field the import already reads (or a schema column):
    keeping it would shadow the counted or renamed value, not add a feature. Likewise one named by
    another tool's name for a trace column (a reward extra ``response_length``): the trace written
    would hold a column every reader refuses (``headerhints.alias_refusal``)."""
    for name in keep:
        if name in _VERL_TEXT_FIELDS or name in _SCHEMA:
            raise InvalidInputError("keep-field", name, "not an extra field (the import reads it already)")
        alias = ALIASES.get(name.casefold())
        if alias is not None:
            reason = f"{alias[1]}, which the trace holds as {alias[0]!r}: no feature may carry it"
            raise InvalidInputError("keep-field", name, reason)


def _check_kept_present(trace: Trace, keep: Sequence[str], directory: Path) -> None:
    """Refuse a ``--keep-field`` no dump line carried as a scalar: a typo would otherwise leave the
    user believing the feature is in the trace, as ``--map`` refuses a column the file lacks."""
    for name in keep:
        if name not in trace.numeric and name not in trace.categorical:
            message = f"no dump line under {directory} holds it as a number or text"
            raise InvalidInputError("keep-field", name, message)


def _read_dump(path: Path) -> list[tuple[int, dict[str, object]]]:
    """A dump's records, or an ``InvalidInputError`` naming a dump that cannot be read: a folder
    named ``2.jsonl``, or a link to a file on a volume not mounted, failed with the OS's words
    (``[Errno 2] No such file or directory`` for a name ``ls`` lists)."""
    try:
        return list(_verl_records(path))
    except OSError as exc:
        why = "a link to a missing file" if path.is_symlink() and not path.exists() else exc.strerror
        raise InvalidInputError("dump", str(path), f"cannot be read ({why or exc})") from None


def _verl_records(path: Path) -> Iterator[tuple[int, dict[str, object]]]:
    for line, record in utf8_rows(jsonl_objects(path), str(path)):
        for field in ("input", "output"):
            if field not in record:  # read as None, it said "must be decoded text" of a key not there
                reason = "missing (every line of a veRL rollout dump holds decoded input and output text)"
                raise TraceFormatError(str(path), line, field, None, reason)
            if not isinstance(record[field], str):
                raise TraceFormatError(str(path), line, field, record[field], "must be decoded text")
        yield line, record


TOOL_RESPONSE_MARK = "<tool_response>"  # Hermes-format tool results (veRL's default multi_turn.format)
SINGLE_TURN = 2  # veRL's num_turns of a single-turn rollout: the user's turn and the assistant's


def holds_tool_output(record: Mapping[str, object]) -> bool:
    """Whether a dump line is a multi-turn rollout whose ``output`` holds tool results.

    veRL's agent loop appends each tool result, rendered by the chat template, to ``responses``
    between the assistant's turns (``response_mask`` 0 there), and the dump decodes ``responses``
    whole: the text no longer says which tokens the engine generated and which it prefilled, and the
    dump writes neither the mask nor the turn count. What shows: the ``<tool_response>`` tag Qwen's
    and other Hermes-format templates wrap a tool result in (Qwen's tokenizers do not mark it
    special, so it survives ``skip_special_tokens``), or a ``num_turns`` field above veRL's
    single-turn 2 where a reward function added one. Templates whose tool role is marked by special
    tokens only (Llama 3's ``ipython``, gpt-oss) leave no mark in the text."""
    output = record.get("output")
    if isinstance(output, str) and TOOL_RESPONSE_MARK in output:
        return True
    turns = next((record[k] for k in ("num_turns", "__num_turns__") if k in record), None)
    return isinstance(turns, (int, float)) and not isinstance(turns, bool) and turns > SINGLE_TURN


VALIDATION_MARK = "reward"  # the key ``_validate`` adds to every line it dumps; ``fit`` never does


def _refuse_one_step_twice(files: list[Path]) -> None:
    """Refuse two files naming one step (``3.jsonl`` and ``03.jsonl``): veRL writes one file per step,
    so a second is another run's or a copy, and merging them would number two runs' samples as one
    step's group."""
    for earlier, later in itertools.pairwise(files):
        if int(earlier.stem) == int(later.stem):
            reason = f"names step {int(later.stem)} as {earlier.name} does: veRL writes one file per step"
            raise InvalidInputError("dump", str(later), reason)


def _refuse_validation(path: Path, records: list[tuple[int, dict[str, object]]]) -> None:
    """Refuse a line that is not this file's training rollout: one of step 0 (veRL's training steps
    start at 1, as ``fit`` increments ``global_steps`` before its first batch; only ``_validate``
    before training dumps at 0), one carrying ``reward`` (``_validate`` adds it to each line it
    dumps, at every ``test_freq`` step too, into a ``{global_steps}.jsonl`` that overwrites the
    rollout of that step in a shared folder), or one whose step is not its file's (veRL writes each
    file's step into each of its lines). Validation is greedy samples of held-out prompts: imported,
    it would pose as a training step's groups."""
    apart = "import trainer.rollout_data_dir, kept apart from trainer.validation_data_dir"
    for line, record in records:
        step = _as_step(_step_of(record, path), path, line)
        if step == 0:
            reason = f"step 0 is veRL's validation before training, not a rollout (steps start at 1): {apart}"
        elif VALIDATION_MARK in record:
            reason = f"a '{VALIDATION_MARK}' key marks a line veRL's validation wrote, not a rollout: {apart}"
        elif step != int(path.stem):
            reason = f"step {step} is not its file's: veRL writes a file's step into each of its lines"
        else:
            continue
        raise InvalidInputError("dump", f"{path}:{line}", reason)


def _output_count(counted: int, cap: int | None, count_eos: bool) -> int:
    """An output's length as veRL counted it, from its re-encoded text: veRL decodes with
    ``skip_special_tokens=True``, so the EOS a stopped response ended on (counted in its response
    mask, generated and paid for by the engine) is gone from the text. A count below the cap is a
    response that stopped, so it gets its EOS back (at most reaching the cap); one at or past it was
    truncated, had none, and is clamped to the cap (re-encoding can overshoot). Without the cap no
    line says which stopped, so counts stay as encoded. An empty output is the exception: it stopped
    (no cap is below one token) on the one token it generated, its EOS (or, with ``--no-count-eos``,
    a stop string left out of the text), so it counts 1 whatever the flags; the trace format refuses
    an output of 0 tokens, as ``POST /actuals`` does (``scheduler.trace.MINIMUM``)."""
    if counted == 0:
        return 1
    if cap is None:
        return counted
    if counted >= cap:
        return cap
    return counted + 1 if count_eos else counted


def _verl_row(
    path: Path,
    line: int,
    record: Mapping[str, object],
    counts: tuple[int, int],
    cap_eos: tuple[int | None, bool],
    seen: dict[tuple[int, str], int],
    keep: frozenset[str],
) -> tuple[TraceRow, bool]:
    """One dump line as a trace row. ``counts`` are the re-encoded (prompt, output) lengths; ``cap_eos``
    the cap (or None) and whether to add back a stopped output's EOS. Truncation is judged on the
    re-encoded count: one that reaches the cap with its EOS added back stopped on its last token."""
    (prompt_tokens, output_tokens), (cap, count_eos) = counts, cap_eos
    step = _step_of(record, path)
    prompt_id = prompt_hash(str(record["input"]))
    key = (_as_step(step, path, line), prompt_id)
    seen[key] = seen.get(key, -1) + 1
    clamped = cap is not None and output_tokens > cap
    cells: dict[str, object] = {
        "step": step,
        "prompt_id": prompt_id,
        "sample_idx": seen[key],
        "prompt_tokens": prompt_tokens,
        "output_tokens": _output_count(output_tokens, cap, count_eos),
        "reward": record.get("score"),
    }
    if cap is not None:
        cells["max_new_tokens"] = cap
        cells["finish_reason"] = "length" if output_tokens >= cap else "stop"
    cells.update(_kept_extras(record, keep, path, line))
    return parse_row(cells, str(path), line), clamped


def _step_of(record: Mapping[str, object], path: Path) -> object:
    """A line's ``step``, or its file's (``{step}.jsonl``) where the line has none: a ``null`` or
    blank step is a missing value, as in every trace file, not the text ``None`` to parse."""
    step = record.get("step")
    return path.stem if step is None or (isinstance(step, str) and not step.strip()) else step


def _kept_extras(
    record: Mapping[str, object], keep: frozenset[str], path: Path, line: int
) -> dict[str, object]:
    """The extra fields the user opted into. All others are dropped: a reward manager's extras
    (``acc``, ``overlong_reward``: a linear function of the response length) exist only after
    generation, so as features they leak a step's own lengths into its prediction (measured: eval MAE
    97 with DAPO's extras kept vs 173 without, on identical trajectories). A kept field holding a list
    or an object is an error at its line, as such a cell is in every trace file: it was left out of
    that row without a word, a missing value beside other lines' numbers."""
    kept: dict[str, object] = {}
    for name, value in record.items():
        if name not in keep:
            continue
        if isinstance(value, (list, dict)):
            kind = "an object" if isinstance(value, dict) else "a list"
            raise TraceFormatError(str(path), line, name, value, f"{kind}, not a number or text")
        kept[name] = value
    return kept


def _as_step(raw: object, path: Path, line: int) -> int:
    try:
        return int_cell(raw, "step", MINIMUM["step"])  # as parse_row will read it
    except ValueError as exc:
        raise TraceFormatError(str(path), line, "step", raw, str(exc)) from None


# --- generic files with a column mapping ---------------------------------------------------------


def parse_mapping(pairs: Sequence[str]) -> dict[str, str]:
    """``["output_tokens=response_len", ...]`` -> {source column: schema column}; rejects bad pairs,
    and a column named twice on either side (the later pair would silently win)."""
    mapping: dict[str, str] = {}
    for pair in pairs:
        target, sep, source = (part.strip() for part in pair.partition("="))
        if not sep or not target or not source:
            raise InvalidInputError("map", pair, "expected SCHEMA_COLUMN=FILE_COLUMN")
        if source in mapping or target in mapping.values():
            raise InvalidInputError("map", pair, "maps a column already mapped by an earlier --map")
        check_target(target, pair)
        mapping[source] = target
    return mapping


def import_generic(path: str | Path, fmt: str, mapping: Mapping[str, str]) -> ImportResult:
    """Read ``path`` as ``fmt``, rename columns by ``mapping`` (file -> schema), validate every row.

    The rows are read exactly as ``read_trace`` reads a trace, after the renaming: one set of rules,
    and the same vectorised path for csv and parquet.
    """
    path = Path(path)
    if fmt not in GENERIC_FORMATS:
        raise InvalidInputError("from", fmt, f"expected one of verl, {', '.join(GENERIC_FORMATS)}")
    check_input_file("trace", path, "a trace file")
    try:
        trace = read_renamed(path, f".{fmt}", mapping)
    except TraceFormatError as exc:
        if fmt == "jsonl" and exc.column in REQUIRED_COLUMNS and _is_verl_line(path, exc.line):
            message = (
                f"{path}:{exc.line} is a line of a veRL rollout dump (decoded input and output text, no "
                f"token counts): import its folder, trace import {path.parent} --from verl --tokenizer "
                "PATH/tokenizer.json"
            )
            raise InvalidInputError("from", fmt, message) from None
        raise
    if len(trace) == 0:
        raise InvalidInputError("trace", str(path), "the file has no rows")
    check_unique(trace, str(path))
    return ImportResult(trace, 1, "", 0)


def _is_verl_line(path: Path, line: int) -> bool:
    """Whether ``line`` of a jsonl file holds veRL's decoded ``input`` and ``output`` text: a dump read
    as a generic file lacks ``prompt_id`` first, and was refused as if a column wanted ``--map``."""
    record = next((cells for at, cells in jsonl_objects(path) if at == line), {})
    return isinstance(record.get("input"), str) and isinstance(record.get("output"), str)
