"""Litter for the collector-pause tests: an object only the cycle collector frees.

The pause tests and their edge cases both leave ``MAX_PENDING`` of these uncollected; they share the
class here rather than through one test module's private name, so a change to it reaches both.
"""

from __future__ import annotations


class Cycle:
    """An object that refers to itself: only the cycle collector frees it."""

    def __init__(self) -> None:
        self.me = self
