"""docs/api.md's "The caller's deadline" gives the publish's reserve in figures, and they are
``service/pipeline/publish_pace.py``'s and ``deadline.py``'s: an operator sizes a trainer's timeout
from them (a 4,096-trajectory step's reserve, the shortest deadline a small step is answered under).

Round 46 wrote the paragraph with the code; nothing held the two together after it.
"""

from __future__ import annotations

import re
from pathlib import Path

from service.pipeline import deadline, publish_pace

DOCS = Path(__file__).resolve().parents[2] / "docs"
_ORDINALS = {"slowest": 0, "second slowest": 1, "third slowest": 2}


def _paragraph() -> str:
    """The "caller's deadline" paragraph of docs/api.md, its lines joined."""
    text = (DOCS / "api.md").read_text().split("**The caller's deadline.**", 1)[1].split("\n\n", 1)[0]
    return " ".join(text.split())


def _figure(pattern: str, text: str) -> tuple[str, ...]:
    match = re.search(pattern, text)
    assert match is not None, f"docs/api.md no longer says {pattern!r}"
    return match.groups()


def test_the_reserve_s_pace_is_the_one_the_service_keeps() -> None:
    """ "the second slowest of the last 8 ... (a request under 256 trajectories counted as 256),
    times 1.5, times the request's trajectories, plus 20 ms"."""
    text = _paragraph()
    ordinal, remembered = _figure(r"the ((?:second |third )?slowest) of the last (\d+)", text)
    assert (_ORDINALS[ordinal], int(remembered)) == (publish_pace.STALLS_IGNORED, publish_pace.REMEMBERED)
    floor, floor_again = _figure(r"a request under ([\d,]+) trajectories counted as ([\d,]+)", text)
    assert int(floor.replace(",", "")) == int(floor_again.replace(",", "")) == publish_pace.FLOOR_TRAJECTORIES
    headroom, fixed_ms = _figure(r"times ([\d.]+), times the request's trajectories, plus (\d+) ms", text)
    assert (float(headroom), float(fixed_ms) / 1000) == (publish_pace.HEADROOM, publish_pace.FIXED_S)


def test_the_reserve_before_a_first_publish_is_the_service_s_prior() -> None:
    publish_ms, handover_ms = _figure(
        r"before a replica's first publish, ([\d.]+) ms \(publish\) and ([\d.]+) ms \(handover\)",
        _paragraph(),
    )
    assert float(publish_ms) / 1000 == publish_pace.PRIOR_PUBLISH_S_PER_TRAJECTORY
    assert float(handover_ms) / 1000 == publish_pace.PRIOR_HANDOVER_S_PER_TRAJECTORY


def test_the_mark_s_budget_under_a_deadline_leaves_the_least_reserve_the_docs_give() -> None:
    """delivery.md's ``P:planning``: "at most what the deadline leaves less 20 ms, the least a
    publish's reserve can be"."""
    text = " ".join((DOCS / "delivery.md").read_text().split())
    (least_ms,) = _figure(
        r"at most what the deadline leaves less (\d+) ms, the least a publish's reserve", text
    )
    assert float(least_ms) / 1000 == deadline.MIN_RESERVE_S
