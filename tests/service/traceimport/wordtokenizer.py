"""A word-level ``tokenizer.json`` for the veRL import tests: one token per whitespace-separated word,
so every count a test asserts can be read off its text."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tokenizers import Tokenizer, models, pre_tokenizers


def write_word_tokenizer(path: Path, words: Sequence[str]) -> Path:
    """Write a tokenizer knowing ``words`` (the first is the unknown token) to ``path``; return it."""
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token=words[0]))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(path))
    return path
