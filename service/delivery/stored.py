"""Text read back from Redis that another writer may have left unreadable: bytes that are not UTF-8.

The service's clients decode replies with ``surrogateescape`` (``REPLY_DECODING``): each byte that is
not UTF-8 arrives as a lone surrogate (U+DC80..U+DCFF) instead of failing the whole reply. Strict
decoding failed the reply, and with it every field read in the same transaction: one foreign byte in
an optional ``P:meta`` field (a client in another language, a truncated write, an older release)
made ``GET /schedule/{id}`` answer 500 on every poll, and nothing in the answer said which field.
A reader that knows what a field means then decides here what an unreadable one is: an optional
one reads as absent (``readable_or_none``), logged once per key and field, not on every poll.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

_log = logging.getLogger("service.delivery.stored")

# The redis-py client options of every client of the service and its sidecars: replies decoded as
# text, a byte that is not UTF-8 kept as a lone surrogate (and written back as the same byte).
REPLY_DECODING: dict[str, Any] = {"decode_responses": True, "encoding_errors": "surrogateescape"}
_LOGGED_MAX = 1024  # (key, field) pairs remembered as logged; past it, logged again rather than grown


class _Once:
    """Which (key, field) pairs were already logged as unreadable: a poll every second must not log
    every second. Bounded: forgotten all at once past ``_LOGGED_MAX`` (a few repeat lines then)."""

    def __init__(self) -> None:
        self._seen: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def first(self, key: str, field: str) -> bool:
        """Whether this is the first time ``key``'s ``field`` is reported (and remember it)."""
        with self._lock:
            if (key, field) in self._seen:
                return False
            if len(self._seen) >= _LOGGED_MAX:
                self._seen.clear()
            self._seen.add((key, field))
            return True


_once = _Once()


def utf8(text: str) -> bool:
    """Whether UTF-8 can carry ``text``: no lone surrogate, which is what a stored byte that was not
    UTF-8 decodes to (checked in C; ASCII, most stored text, at once)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def readable_or_none(value: Any, key: str, field: str) -> str | None:
    """Stored ``value`` of ``key``'s ``field`` as text; None when absent, or when it is not UTF-8
    (logged once, naming the key and field): for an optional field, which reads as absent."""
    if value is None:
        return None
    text = value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else str(value)
    if utf8(text):
        return text
    if _once.first(key, field):
        shown = text.encode("utf-8", "surrogateescape")[:80]
        _log.warning("%s field %s is not UTF-8 (%r), read as absent", key, field, shown)
    return None


def unreadable_field(doc: Any, path: str = "") -> str | None:
    """The dotted path of the first text in ``doc`` (JSON of dicts and lists, as read back) that is
    not UTF-8, or None: so a refusal names the field at fault, not merely the record."""
    if isinstance(doc, str):
        return None if utf8(doc) else path or "(the value)"
    if isinstance(doc, dict):
        for name, member in doc.items():
            where = f"{path}.{name}" if path else str(name)
            found = unreadable_field(name, where) if isinstance(name, str) else None
            found = found or unreadable_field(member, where)
            if found is not None:
                return found
    elif isinstance(doc, list):
        for index, member in enumerate(doc):
            found = unreadable_field(member, f"{path}[{index}]")
            if found is not None:
                return found
    return None
