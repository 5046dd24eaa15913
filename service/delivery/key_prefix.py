"""The rule a deployment's key prefix must meet, apart from the key names it starts (``keys.py``).

Apart because it is a check of an operator's input (``serve``'s settings, the sidecars' ``--prefix``),
not a key or a time-to-live: ``keys.py`` names every key built on a prefix, this module says which
prefixes keep those names meaning what the tables there say.
"""

from __future__ import annotations

import re

DEFAULT_PREFIX = "rs"  # the prefix of a deployment that names none (re-exported by keys.py)
_PREFIX = re.compile(r"[A-Za-z0-9_.:-]{1,64}")  # no braces (hash tags), globs or spaces


class PrefixError(ValueError):
    """A refused key prefix. Its message names the value (the sidecars' ``--prefix`` line needs it);
    ``reason`` is the rule alone, for a line that shows the value already (``serve``'s settings)."""

    def __init__(self, prefix: str, reason: str) -> None:
        super().__init__(f"key prefix {prefix!r} {reason}")
        self.reason = reason


def check_prefix(prefix: str) -> str:
    """``prefix`` if every key built on it keeps its meaning; ``PrefixError`` naming the rule otherwise:
    a brace would move the ``{schedule_id}`` hash tag, a glob would match other deployments' keys."""
    if not _PREFIX.fullmatch(prefix):
        raise PrefixError(prefix, "must be 1-64 of A-Z a-z 0-9 _ . : -")
    return prefix
