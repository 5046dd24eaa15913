"""The line an offset of a text falls on, found by bisection over where each line starts.

The docs tests name each finding by its line (``docs/sidecar.md:9``). Counting the newlines before
every match is quadratic in a doc's size, and docs/experiments.md holds 1.3 MB: one pass of
``tests/service/cli_docs.py`` over it took 18 s that way (each of six tests read it), 0.2 s this way.
"""

from __future__ import annotations

import re
from bisect import bisect_right


class Lines:
    """Where each line of one text starts, to number the lines of offsets into it."""

    def __init__(self, text: str) -> None:
        self._starts = [0, *(newline.end() for newline in re.finditer("\n", text))]

    def of(self, offset: int) -> int:
        """The 1-based line ``offset`` falls on (a newline counts to the line it ends)."""
        return bisect_right(self._starts, offset)
