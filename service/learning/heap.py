"""Giving the heap a retrain freed back to the operating system (glibc's ``malloc_trim``).

A fit allocates and frees a few hundred MB in native code (LightGBM's datasets, boosters and model
strings) on whichever request or background thread ran it. glibc keeps freed chunks in that thread's
arena and returns to the OS only what lies at the arena's top, so the free pages between live
chunks stay resident: a replica retraining between plans grew 225 -> 447 MB in a soak (helper
memgrow46's entry in docs/experiments.md), in jumps, with no Python object or model version held.
``malloc_trim(0)`` walks every arena and releases those pages; it costs milliseconds, once a swap.
Elsewhere (musl, macOS) there is no such call, and nothing is done.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
from collections.abc import Callable
from functools import cache

_log = logging.getLogger("service.models")


@cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where the C library has none."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim: Callable[[int], int] = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None
    return trim


def release_freed_heap() -> bool:
    """Return the free pages of every malloc arena to the OS; True where any were released.

    Called once a retrain or reload swapped its model in: the old boosters and the fit's buffers are
    freed by then. Never raises: a replica that cannot trim serves as before, only larger."""
    trim = _malloc_trim()
    if trim is None:
        return False
    try:
        return bool(trim(0))
    except Exception:  # a foreign libc whose symbol misbehaves: not worth a failed retrain
        _log.debug("malloc_trim failed", exc_info=True)
        return False
