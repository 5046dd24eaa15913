"""The rule for a name the API accepts (a worker id, among others), without pydantic.

``service.api.schemas.Name`` is this rule as a pydantic type; a push-mode sidecar checks its
``--worker-id`` by it before it starts, and loads no pydantic for it (~0.1 s of a start-up that
delays its probes; ``tests/service/sidecar/test_startup_imports.py``). One rule, two readers: both
take the figures below, and ``name_error`` answers the API's words for each breach, in the order
pydantic checks them (length, then characters).

``NAME_MAX_LENGTH`` bounds every id the service takes (worker, prompt and schedule ids), and the
delivery protocol holds a publish to it too: until 2026-12-04 publish refused worker ids past 200
characters that the API had accepted up to 256, so such a step was planned and then refused.

An id's characters are refused in words (``chars_error``), wherever pydantic's pattern refused them:
``String should match pattern '^[A-Za-z0-9_.:-]+$'`` left a trainer to read a regular expression
for what ``step#1`` broke (user67).
"""

from __future__ import annotations

import re

NAME_MAX_LENGTH = 256  # the longest id of any kind: API, sidecar and delivery alike
_NAME_CHARS = re.compile(r"[A-Za-z0-9_.:@/+=-]+")
NAME_PATTERN = f"^{_NAME_CHARS.pattern}$"  # as pydantic states it in its message
# A schedule id's, narrower: it is a path segment (``/schedule/{id}``) and a part of Redis keys
_SCHEDULE_ID_CHARS = re.compile(r"[A-Za-z0-9_.:-]+")
SCHEDULE_ID_PATTERN = f"^{_SCHEDULE_ID_CHARS.pattern}$"
# each id's pattern -> its characters, and them in words
_IN_WORDS = {
    NAME_PATTERN: (_NAME_CHARS, "ASCII letters, digits and _ . : @ / + = -"),
    SCHEDULE_ID_PATTERN: (_SCHEDULE_ID_CHARS, "ASCII letters, digits and _ . : -"),
}


def chars_error(value: str, pattern: str) -> str | None:
    """Why ``value`` breaks an id's ``pattern``, in words: its first character the id may not hold,
    where, and those it may (the value itself is named by whoever leads the message: once); None for
    a pattern that is no id's."""
    if pattern not in _IN_WORDS:
        return None
    chars, words = _IN_WORDS[pattern]
    at = next((i for i, char in enumerate(value) if chars.fullmatch(char) is None), None)
    found = "" if at is None else f"{value[at]!r} (character {at}) is not allowed: "
    return f"{found}an id holds only {words}"


def name_error(value: str) -> str | None:
    """Why ``value`` is not a name, in the message the API gives for it; None when it is one.

    The API refuses such a worker's claims and reports (an empty or odd id would claim from a queue no
    plan fills), so a sidecar refuses to start with one rather than run idle."""
    if not value:
        return "String should have at least 1 character"
    if len(value) > NAME_MAX_LENGTH:
        return f"String should have at most {NAME_MAX_LENGTH} characters"
    if _NAME_CHARS.fullmatch(value) is None:  # fullmatch: ``$`` would let a trailing newline through
        return chars_error(value, NAME_PATTERN)
    return None
