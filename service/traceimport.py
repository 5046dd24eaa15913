"""Turn other tools' rollout records into the project's trace format.

Two sources:

- veRL rollout dumps (``trainer.rollout_data_dir``): one ``{step}.jsonl`` per training step, each
  line ``{"input": <decoded prompt>, "output": <decoded response>, "score": <reward>, "step": <n>,
  ...extra reward fields}``. veRL writes text, not token counts, so counts come from a tokenizer the
  user names by its local ``tokenizer.json`` (the ``tokenizers`` package); the prompt id is a stable
  hash of the input text, so the same prompt keeps its id across epochs; a prompt's samples in one
  step are numbered in file order. Scalar extra fields (e.g. ``acc``) are kept as columns.
- generic csv / jsonl / parquet with other column names: a mapping renames them into the schema
  (``--map output_tokens=response_length``) and every row is validated by ``parse_row``.
"""

from __future__ import annotations

import csv
import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from predictors.traceio import jsonl_objects
from predictors.tracetable import Trace, TraceBuilder
from scheduler.errors import InvalidInputError
from scheduler.trace import REQUIRED_COLUMNS, TraceFormatError, TraceRow, parse_row

_VERL_TEXT_FIELDS = frozenset({"input", "output", "gts", "score", "step"})
GENERIC_FORMATS = ("csv", "jsonl", "parquet")


@dataclass(frozen=True, slots=True)
class ImportResult:
    """An imported trace and what the import did, for the command to report."""

    trace: Trace
    files: int  # input files read
    tokenizer: str  # the tokenizer that counted tokens ("" when counts came from the file)
    clamped: int  # rows whose re-tokenized output exceeded the cap and were set to it


def prompt_hash(text: str) -> str:
    """The stable id of a prompt text: the first 16 hex digits of its SHA-256, prefixed ``p``."""
    return "p" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def load_tokenizer(path: str | Path) -> object:
    """Load a local ``tokenizer.json``; a missing or unreadable file is an ``InvalidInputError``."""
    from tokenizers import Tokenizer

    path = Path(path)
    if not path.is_file():
        raise InvalidInputError("tokenizer", str(path), "no such file (expected a local tokenizer.json)")
    try:
        return Tokenizer.from_file(str(path))
    except Exception as exc:  # the Rust side raises a generic Exception for a malformed file
        raise InvalidInputError("tokenizer", str(path), f"not a readable tokenizer.json ({exc})") from None


def import_verl(
    directory: str | Path, tokenizer_path: str | Path, max_new_tokens: int | None
) -> ImportResult:
    """Import every ``{step}.jsonl`` under ``directory``, counting tokens with ``tokenizer_path``."""
    directory = Path(directory)
    if not directory.is_dir():
        raise InvalidInputError("dir", str(directory), "no such directory")
    files = sorted((p for p in directory.glob("*.jsonl") if p.stem.isdigit()), key=lambda p: int(p.stem))
    if not files:
        raise InvalidInputError("dir", str(directory), "holds no {step}.jsonl rollout dumps")
    tokenizer = load_tokenizer(tokenizer_path)
    builder, clamped = TraceBuilder(), 0
    for path in files:
        records = list(_verl_records(path))
        counts = _count_tokens(tokenizer, [r[1]["input"] for r in records], [r[1]["output"] for r in records])
        seen: dict[tuple[int, str], int] = {}
        for (line, record), (prompt_tokens, output_tokens) in zip(records, counts, strict=True):
            row, was_clamped = _verl_row(
                path, line, record, prompt_tokens, output_tokens, max_new_tokens, seen
            )
            builder.add(row)
            clamped += was_clamped
    return ImportResult(builder.build(), len(files), str(tokenizer_path), clamped)


def _verl_records(path: Path) -> Iterator[tuple[int, dict[str, object]]]:
    for line, record in jsonl_objects(path):
        for field in ("input", "output"):
            if not isinstance(record.get(field), str):
                raise TraceFormatError(str(path), line, field, record.get(field), "must be decoded text")
        yield line, record


def _count_tokens(tokenizer: object, inputs: list[object], outputs: list[object]) -> list[tuple[int, int]]:
    """Token counts of each (input, output) pair, batch-encoded without special tokens."""
    encode = tokenizer.encode_batch  # type: ignore[attr-defined]
    prompt = encode(inputs, add_special_tokens=False)
    output = encode(outputs, add_special_tokens=False)
    return [(len(p.ids), len(o.ids)) for p, o in zip(prompt, output, strict=True)]


def _verl_row(
    path: Path,
    line: int,
    record: Mapping[str, object],
    prompt_tokens: int,
    output_tokens: int,
    cap: int | None,
    seen: dict[tuple[int, str], int],
) -> tuple[TraceRow, bool]:
    step = record.get("step", path.stem)
    prompt_id = prompt_hash(str(record["input"]))
    key = (_as_step(step, path, line), prompt_id)
    seen[key] = seen.get(key, -1) + 1
    clamped = cap is not None and output_tokens > cap
    cells: dict[str, object] = {
        "step": step,
        "prompt_id": prompt_id,
        "sample_idx": seen[key],
        "prompt_tokens": prompt_tokens,
        "output_tokens": min(output_tokens, cap) if cap is not None else output_tokens,
        "reward": record.get("score"),
    }
    if cap is not None:
        cells["max_new_tokens"] = cap
        cells["finish_reason"] = "length" if output_tokens >= cap else "stop"
    for name, value in record.items():
        if name not in _VERL_TEXT_FIELDS and isinstance(value, (int, float, str)) and name not in cells:
            cells[name] = value
    return parse_row(cells, str(path), line), clamped


def _as_step(raw: object, path: Path, line: int) -> int:
    try:
        return int(str(raw))
    except ValueError:
        raise TraceFormatError(str(path), line, "step", raw, "expected an integer") from None


# --- generic files with a column mapping ---------------------------------------------------------


def parse_mapping(pairs: Sequence[str]) -> dict[str, str]:
    """``["output_tokens=response_len", ...]`` -> {source column: schema column}; rejects bad pairs."""
    mapping: dict[str, str] = {}
    for pair in pairs:
        target, sep, source = pair.partition("=")
        if not sep or not target.strip() or not source.strip():
            raise InvalidInputError("map", pair, "expected SCHEMA_COLUMN=FILE_COLUMN")
        mapping[source.strip()] = target.strip()
    return mapping


def import_generic(path: str | Path, fmt: str, mapping: Mapping[str, str]) -> ImportResult:
    """Read ``path`` as ``fmt``, rename columns by ``mapping`` (file -> schema), validate every row."""
    path = Path(path)
    if fmt not in GENERIC_FORMATS:
        raise InvalidInputError("from", fmt, f"expected one of verl, {', '.join(GENERIC_FORMATS)}")
    if not path.is_file():
        raise InvalidInputError("trace", str(path), "no such file")
    rows = {"csv": _csv_rows, "jsonl": _jsonl_rows, "parquet": _parquet_rows}[fmt](path)
    builder, first = TraceBuilder(), True
    for line, cells in rows:
        renamed = {mapping.get(k, k): v for k, v in cells.items()}
        if first:
            _check_columns(renamed, path, line)  # say which mapping is missing, once, up front
            first = False
        builder.add(parse_row(renamed, str(path), line))
    trace = builder.build()
    if len(trace) == 0:
        raise InvalidInputError("trace", str(path), "the file has no rows")
    return ImportResult(trace, 1, "", 0)


def _check_columns(cells: Mapping[str, object], path: Path, line: int) -> None:
    missing = [c for c in REQUIRED_COLUMNS if c not in cells]
    if missing:
        raise TraceFormatError(
            str(path),
            line,
            missing[0],
            None,
            f"required column missing (map one with --map {missing[0]}=...)",
        )


def _csv_rows(path: Path) -> Iterator[tuple[int, dict[str, object]]]:
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        for cells in reader:
            yield reader.line_num, dict(cells)


def _jsonl_rows(path: Path) -> Iterator[tuple[int, dict[str, object]]]:
    with path.open(encoding="utf-8") as handle:
        for line, text in enumerate(handle, start=1):
            if text.strip():
                try:
                    cells = json.loads(text)
                except json.JSONDecodeError as exc:
                    raise TraceFormatError(str(path), line, "<json>", text.strip()[:40], exc.msg) from None
                if not isinstance(cells, dict):
                    raise TraceFormatError(
                        str(path), line, "<json>", cells, "each line must be a JSON object"
                    )
                yield line, cells


def _parquet_rows(path: Path) -> Iterator[tuple[int, dict[str, object]]]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow raises several unrelated types for a corrupt file
        raise InvalidInputError("trace", str(path), f"not a readable parquet file ({exc})") from None
    columns = {name: table.column(name).to_pylist() for name in table.column_names}
    for index in range(table.num_rows):
        yield index + 1, {name: values[index] for name, values in columns.items()}
