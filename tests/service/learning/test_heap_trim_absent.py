"""``heap.release_freed_heap`` where the C library's ``malloc_trim`` is missing or misbehaves (musl,
macOS, a foreign libc): nothing is done and nothing is raised, so a retrain that cannot trim still
swaps its model in. Kills mutants that survived round 46's tests (helper mutants10,
docs/experiments.md)."""

from __future__ import annotations

import ctypes
from collections.abc import Iterator

import pytest

from service.learning import heap


@pytest.fixture(autouse=True)
def lookup_again() -> Iterator[None]:
    """``_malloc_trim`` is looked up once per process: looked up afresh here, and after the test."""
    heap._malloc_trim.cache_clear()
    yield
    heap._malloc_trim.cache_clear()


def test_a_c_library_without_malloc_trim_trims_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    class NoTrim:
        def __init__(self, name: str) -> None:
            del name

    monkeypatch.setattr(ctypes, "CDLL", NoTrim)
    assert heap.release_freed_heap() is False


def test_a_malloc_trim_that_raises_is_no_failed_retrain(monkeypatch: pytest.MonkeyPatch) -> None:
    class Misbehaves:
        def __init__(self, name: str) -> None:
            del name

        def malloc_trim(self, pad: int) -> int:
            raise ctypes.ArgumentError(f"pad {pad}")

    monkeypatch.setattr(ctypes, "CDLL", Misbehaves)
    assert heap.release_freed_heap() is False
