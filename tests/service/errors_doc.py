"""docs/api.md's "Errors" table read as the doc tests check it: each status with the text of its row.
The doc-values tests (every problem answered has a row) and the API doc echo test (the 422 row says
what a 422 echoes) read it alike, rather than one importing it from the other's test module."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def errors_table() -> dict[int, str]:
    """docs/api.md's "Errors" table: status -> the text of its row."""
    section = (ROOT / "docs" / "api.md").read_text().split("\n## Errors", 1)[1].split("\n## ", 1)[0]
    return {int(status): when for status, when in re.findall(r"^\| ([0-9]{3}) \| (.*) \|$", section, re.M)}
