"""docs/solver.md's "The caller's deadline" names every stage a plan can give up in and how often the
floor's long parts check the deadline: the stages ``DeadlinePassedError`` names (what an operator
reads in ``plan given up`` and the 504's log) and the constants the checks count with.

Each round of give-up checks (deadline48, deadline49) added a stage or a spacing to the page by hand:
deadline49's ``keys`` stage made it, and nothing would have told had it not.
"""

from __future__ import annotations

import re
from pathlib import Path

import scheduler
from scheduler import at_once, validation
from scheduler.policies import listrun, problem, robust

SOLVER = Path(__file__).resolve().parents[2] / "docs" / "solver.md"
# A stage as the planner enters it: ``with stage("bound"):`` or ``with giveup.stage("keys"):``.
_STAGE = re.compile(r'\bstage\(\s*"([^"]+)"')


def _paragraph() -> str:
    """The paragraph of the page that lists the stages, its lines joined."""
    text = " ".join(SOLVER.read_text().split())
    start = text.index("past it the planner raises `DeadlinePassedError`")
    return text[start : text.index("which no check can shorten", start)]


def _planner_stages() -> set[str]:
    """Every stage name the planner's code enters, read from its source."""
    root = Path(scheduler.__file__).parent
    return {name for path in root.rglob("*.py") for name in _STAGE.findall(path.read_text())}


def test_the_page_names_every_stage_the_planner_gives_up_in_and_no_other() -> None:
    listed = re.search(r"naming the stage it was in \(((?:`[^`]+`,? ?)+)\)", _paragraph())
    assert listed is not None, "docs/solver.md no longer lists the stages"
    named = re.findall(r"`([^`]+)`", listed.group(1))
    stages = _planner_stages()
    assert len(stages) >= 14
    assert sorted(named) == sorted(stages)


def test_the_checks_spacing_the_page_gives_is_the_code_s() -> None:
    """Every N the paragraph gives is the constant that part counts with."""
    text = _paragraph()
    said = {
        "every {:,} units the LPT placement places": listrun.CHECK_EVERY,
        "and trajectories the spreads read": robust.GIVE_UP_EVERY,
        "every {:,} trajectories validation reads and pairs its key check reads": validation.GIVE_UP_EVERY,
        "every {:,} of its units": problem.GIVE_UP_EVERY,
        "every {:,} items of whole queues the at-once pass plays": at_once.GIVE_UP_ITEMS,
    }
    assert robust.GIVE_UP_EVERY == listrun.CHECK_EVERY  # the page gives the spreads the placement's N
    assert [phrase for phrase, every in said.items() if phrase.format(every) not in text] == []
