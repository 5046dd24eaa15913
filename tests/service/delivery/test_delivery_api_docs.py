"""docs/delivery.md's API section (the protocol as a Python caller sees it) agrees with ``Delivery``:
it shows every public method, each keyword it gives is one the method takes, each literal it shows a
keyword with is its default, each outcome enum's members are listed whole, and its errors paragraph
names every error the package exports. A method left out (``cancel``'s ``withdraw_s``, the in-flight
marks) was behaviour a caller of the protocol could only find in the code."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

from service.delivery import Delivery, errors, outcomes

DOC = Path(__file__).resolve().parents[3] / "docs" / "delivery.md"
_CALL = re.compile(r"\bdelivery\.(\w+)\(")


def _section() -> str:
    """The API section: from its heading to the key layout's."""
    return DOC.read_text().split("## The API (`service.delivery`)", 1)[1].split("## Key layout", 1)[0]


def _calls() -> dict[str, str]:
    """Each method the section's code block calls -> its own arguments as written, those of calls
    inside them (``PublishedSchedule(queues=...)``) and the comments between them left out."""
    block = _section().split("```python", 1)[1].split("```", 1)[0]
    block = re.sub(r"#[^\n]*", "", block)
    return {match.group(1): _top_level(block[match.end() :]) for match in _CALL.finditer(block)}


def _top_level(text: str) -> str:
    """What ``text`` holds up to the parenthesis that closes the call it is inside, nested calls out."""
    depth, kept = 0, []
    for char in text:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth < 0:
            break
        kept.append(char if depth == 0 else "")
    return "".join(kept)


def _public_methods() -> set[str]:
    return {name for name, _ in inspect.getmembers(Delivery, inspect.isfunction) if not name.startswith("_")}


def test_the_api_section_shows_every_public_method_of_delivery() -> None:
    shown = set(_calls()) | ({"from_url"} if "Delivery.from_url(" in _section() else set())
    assert sorted(_public_methods() - shown) == []
    assert sorted(set(_calls()) - _public_methods()) == []


def test_every_keyword_the_api_section_gives_a_method_is_one_it_takes() -> None:
    wrong = {
        (method, keyword)
        for method, arguments in _calls().items()
        for keyword in re.findall(r"\b(\w+)=", arguments)
        if keyword not in inspect.signature(getattr(Delivery, method)).parameters
    }
    assert sorted(wrong) == []


def test_the_errors_paragraph_names_every_error_the_package_exports() -> None:
    paragraph = _section().split("Errors:", 1)[1]
    assert sorted(name for name in errors.__all__ if f"`{name}" not in paragraph) == []


_OUTCOMES = re.compile(r"-> (?:list\[)?(\w+Outcome)\]?[ .#]*((?:[A-Z_]+(?: \| )?)+)")


def listed_outcomes(block: str) -> dict[str, set[str]]:
    """Each outcome enum the code block returns -> the members its lines list after it (``-> X  #
    A | B`` or ``-> X.A | B``); a method shown twice (``release``) lists its enum's members once."""
    found: dict[str, set[str]] = {}
    for enum, members in _OUTCOMES.findall(block):
        found.setdefault(enum, set()).update(members.replace(" ", "").split("|"))
    return found


def test_every_outcome_enum_the_api_section_lists_is_listed_whole() -> None:
    """A caller matches on these: ``fail``'s ``DUPLICATE`` (2026-12-05, a repeated failure report)
    was an answer its ``match`` would not have had a case for, had the section not listed it."""
    block = _section().split("```python", 1)[1].split("```", 1)[0]
    listed = listed_outcomes(block)
    assert sorted(listed) == ["CompletionOutcome", "PublishOutcome", "ReleaseOutcome"]
    members = {enum: {member.name for member in getattr(outcomes, enum)} for enum in listed}
    assert listed == members


def test_an_outcome_left_out_of_a_list_is_caught() -> None:
    block = "delivery.fail(lease, reason) -> ReleaseOutcome        # REQUEUED | DEAD_LETTERED | STALE\n"
    assert listed_outcomes(block) == {"ReleaseOutcome": {"REQUEUED", "DEAD_LETTERED", "STALE"}}
    assert listed_outcomes(block)["ReleaseOutcome"] != {member.name for member in outcomes.ReleaseOutcome}


_KEYWORD = re.compile(r"""\b(\w+)=("[^"]*"|'[^']*'|[^,\s)]+)""")
_EXAMPLES = {("release", "died")}  # what a caller passes (``died="its engine"``), not the default


def keyword_values(arguments: str) -> list[tuple[str, object]]:
    """The ``keyword=value`` pairs of a call's arguments whose value is a literal, read as Python."""
    found = []
    for keyword, written in _KEYWORD.findall(arguments):
        try:
            found.append((keyword, ast.literal_eval(written)))
        except (ValueError, SyntaxError):  # a name or an expression: an example, not a default
            continue
    return found


def test_every_literal_a_keyword_is_shown_with_is_that_keyword_s_default() -> None:
    """``cancel(schedule_id, withdraw_s=0)`` reads as "0 unless given": a caller leaving it out gets
    a cancel that withdraws nothing in flight, as the line says."""
    shown = [
        (method, keyword, value)
        for method, arguments in _calls().items()
        for keyword, value in keyword_values(arguments)
        if (method, keyword) not in _EXAMPLES
    ]
    assert len(shown) >= 10
    defaults = {(m, k): inspect.signature(getattr(Delivery, m)).parameters[k].default for m, k, _ in shown}
    assert [(m, k, v, defaults[m, k]) for m, k, v in shown if v != defaults[m, k]] == []


def test_a_keyword_shown_with_another_value_than_its_default_is_caught() -> None:
    (pair,) = keyword_values("schedule_id, withdraw_s=60")
    assert pair == ("withdraw_s", 60)
    assert pair[1] != inspect.signature(Delivery.cancel).parameters["withdraw_s"].default
