"""The tokenizer ``trace import --from verl`` counts with: found, loaded, named, and run.

veRL dumps decoded text, not token counts, so counts come from a Hugging Face ``tokenizer.json``
read by the ``tokenizers`` package. ``--tokenizer`` takes that file or the model folder holding it
(``Qwen2.5-7B-Instruct/``, as downloaded: ``tokenizer.json`` beside ``tokenizer_config.json`` and
the weights); naming the file inside was a step every user had to find out. A folder holding only a
sentencepiece ``tokenizer.model`` is refused by name: ``tokenizers`` reads ``tokenizer.json`` only.
"""

from __future__ import annotations

import os
from pathlib import Path

from predictors.traceio import check_input_file
from scheduler.errors import InvalidInputError

TOKENIZER_FILE = "tokenizer.json"
NO_TOKENIZERS = "counting tokens needs the tokenizers package: pip install 'rollout-scheduler[trace]'"
ENCODE_CHUNK = 64  # texts per tokenizer batch: enough for its threads, few Encodings held at once


def tokenizer_file(path: str | Path) -> Path:
    """The ``tokenizer.json`` that ``path`` names: the file itself, or the one a model folder holds;
    an ``InvalidInputError`` for a missing path or a folder without one, saying what it holds."""
    path = Path(path)
    if not path.is_dir():
        check_input_file("tokenizer", path, f"a {TOKENIZER_FILE} or a model folder holding one")
        return path
    inside = path / TOKENIZER_FILE
    if inside.is_file():
        return inside
    raise InvalidInputError("tokenizer", str(path), _no_tokenizer_json(path))


def _no_tokenizer_json(folder: Path, shown: int = 6) -> str:
    """Why a folder gives no tokenizer: a sentencepiece model only (a slow tokenizer, which
    ``tokenizers`` cannot read), or what it holds instead (a hub cache's top folder holds
    ``snapshots/``, the file sits two levels down)."""
    if (folder / "tokenizer.model").is_file():
        return (
            f"holds tokenizer.model (sentencepiece) but no {TOKENIZER_FILE}: only {TOKENIZER_FILE} is "
            "supported (transformers' AutoTokenizer.from_pretrained(folder).save_pretrained(folder) "
            "writes one where it converts the model to a fast tokenizer)"
        )
    names = sorted(p.name + ("/" if p.is_dir() else "") for p in folder.iterdir())
    more = f", and {len(names) - shown} more" if len(names) > shown else ""
    held = f"it holds {', '.join(names[:shown])}{more}" if names else "it is empty"
    return f"holds no {TOKENIZER_FILE} ({held})"


def load_tokenizer(path: str | Path) -> object:
    """Load a local ``tokenizer.json`` (the file itself, not a folder: see ``tokenizer_file``) to
    count whole texts; an unreadable file is an ``InvalidInputError``.

    A ``tokenizer.json`` may carry the padding or truncation it was saved with (``"padding":
    {"strategy": "BatchLongest"}``, ``"truncation": {"max_length": 512}``), which ``encode_batch``
    applies: every count of a batch came out as its longest text's, or stopped at the limit, without
    a word. Both are switched off here: a count is of the text, all of it.
    """
    try:
        from tokenizers import Tokenizer
    except ImportError:  # the ``trace`` extra's, not the base install's: a bare traceback said only that
        raise InvalidInputError("tokenizer", str(path), NO_TOKENIZERS) from None

    path = Path(path)
    check_input_file("tokenizer", path, f"a {TOKENIZER_FILE}")
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as exc:  # the Rust side raises a generic Exception for a malformed file
        raise InvalidInputError("tokenizer", str(path), f"not a readable {TOKENIZER_FILE} ({exc})") from None
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def describe_tokenizer(tokenizer: object, path: str | Path) -> str:
    """Which tokenizer counted: its file's full path, model kind and vocabulary. Every Hugging Face
    tokenizer is a ``tokenizer.json``, so the name as given (``tokenizer.json``) told no model. The
    path is made absolute, not resolved: the hub cache links ``snapshots/<rev>/tokenizer.json`` to
    ``blobs/<sha256>``, a name that tells no model either."""
    model = type(tokenizer.model).__name__  # type: ignore[attr-defined]
    size = tokenizer.get_vocab_size(with_added_tokens=True)  # type: ignore[attr-defined]
    return f"{os.path.abspath(path)} ({model}, vocabulary {size:,})"


def count_tokens(tokenizer: object, inputs: list[object], outputs: list[object]) -> list[tuple[int, int]]:
    """Token counts of each (input, output) pair, encoded without special tokens."""
    return list(zip(_lengths(tokenizer, inputs), _lengths(tokenizer, outputs), strict=True))


def _lengths(tokenizer: object, texts: list[object]) -> list[int]:
    """Each text's token count, batch-encoded ``ENCODE_CHUNK`` texts at a time keeping only lengths.

    An ``Encoding`` holds ids, offsets, masks and tokens per token: encoding a whole step file in one
    batch peaked at 1.57 GB for 12M tokens, in chunks at 142 MB, with the same counts.
    """
    encode = tokenizer.encode_batch  # type: ignore[attr-defined]
    lengths: list[int] = []
    for start in range(0, len(texts), ENCODE_CHUNK):
        chunk = encode(texts[start : start + ENCODE_CHUNK], add_special_tokens=False)
        lengths.extend(len(encoding.ids) for encoding in chunk)
    return lengths
