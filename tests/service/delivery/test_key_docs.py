"""The key tables agree with the code: ``service/delivery/keys.py``'s docstring (the canonical table)
names every key the module or a Lua script builds and no other, and docs/delivery.md (the protocol's
keys) with docs/api.md (the service's fleet-wide keys) show the same keys as that table."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from service.delivery import fleet_keys, keys

ROOT = Path(__file__).resolve().parents[3]
PREFIX, SCHEDULE, WORKER, STEP = "<prefix>", "<schedule_id>", "<worker>", "<step>"
BASE = keys.schedule_keys(SCHEDULE, PREFIX).base  # the tables write it ``P``
FLEET = "Fleet-wide keys of the service"  # the docstring's heading over the service's own keys
NOT_KEYS = {"schedule_keys", "all_keys_pattern"}  # take a prefix, build no key name


def _short(key: str) -> str:
    return key.replace(BASE, "P")


def _code_keys() -> set[str]:
    """Every key name keys.py builds and every per-schedule key a Lua script builds (``k('pin')``)."""
    schedule = keys.schedule_keys(SCHEDULE, PREFIX)
    properties = [name for name, value in vars(keys.ScheduleKeys).items() if isinstance(value, property)]
    built = {getattr(schedule, name) for name in properties if name not in ("base", "pattern")}
    built |= {schedule.queue(WORKER), schedule.queue(keys.SHARED_QUEUE), schedule.unpinned(WORKER)}
    built.add(schedule.holdable("<cap>", WORKER))
    for name, function in inspect.getmembers(keys, inspect.isfunction):
        parameters = [p for p in inspect.signature(function).parameters if p != "prefix"]
        if len(parameters) < len(inspect.signature(function).parameters) and name not in NOT_KEYS:
            built.add(function(*[STEP if p == "step" else WORKER for p in parameters], prefix=PREFIX))
    scripts = (ROOT / "service" / "delivery" / "lua").glob("*.lua")
    built |= {f"{BASE}:{s}" for script in scripts for s in re.findall(r"\bk\('(\w+)'\)", script.read_text())}
    return {_short(key) for key in built}


def _docstring_keys(section: str) -> set[str]:
    """The keys a part of keys.py's docstring opens a table row or bullet with."""
    return set(re.findall(r"^(?:\* )?``([^`]+)``", section, re.MULTILINE))


def _markdown_keys(doc: str) -> set[str]:
    """The keys in the first column of a Markdown table headed ``| key``, with ``rs`` as ``<prefix>``."""
    text = (ROOT / "docs" / doc).read_text()
    table = re.search(r"^\| key.*?\n(?:\|.*\n)+", text, re.MULTILINE)
    assert table is not None, f"{doc} has no key table"
    cells = [row.split("|")[1] for row in table.group().splitlines()[2:]]
    return {
        re.sub(r"^rs:", f"{PREFIX}:", key).replace("{rs:", "{<prefix>:")
        for c in cells
        for key in re.findall(r"`([^`]+)`", c)
    }


def test_the_docstring_table_names_every_key_the_code_builds_and_no_other() -> None:
    documented = _docstring_keys(keys.__doc__ or "")
    built = _code_keys()
    assert (sorted(built - documented), sorted(documented - built)) == ([], [])


def test_the_delivery_doc_shows_the_protocols_keys_and_the_api_doc_the_services() -> None:
    protocol, fleet = (keys.__doc__ or "").split(FLEET)
    assert _markdown_keys("delivery.md") == {
        key.replace(SCHEDULE, "sid") for key in _docstring_keys(protocol)
    }
    assert _markdown_keys("api.md") == _docstring_keys(fleet)


def test_keys_re_exports_every_name_fleet_keys_builds_so_the_tables_are_checked_against_it() -> None:
    """The fleet-wide keys are built in fleet_keys.py and re-exported by keys.py, which callers and the
    table check above read: a key added there and not re-exported would escape both."""
    ours = {
        name
        for name, value in vars(fleet_keys).items()
        if (inspect.isfunction(value) and value.__module__ == fleet_keys.__name__) or name.isupper()
    }
    assert sorted(name for name in ours if getattr(keys, name, None) is not getattr(fleet_keys, name)) == []


_COUNTED = re.compile(r"keeps fleet-wide state in (\w+) keys and (\w+) per step")
_NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9}


def test_the_api_doc_counts_the_fleet_wide_keys_its_table_shows() -> None:
    """ "eight keys and one per step" read one per step after round 46 added a step's planning zset
    beside its set: the prose's counts are the table's, keys of a step (``<step>``) apart."""
    text = (ROOT / "docs" / "api.md").read_text()
    (counts,) = _COUNTED.findall(text)
    fleet = _markdown_keys("api.md")
    per_step = {key for key in fleet if STEP in key}
    assert tuple(_NUMBERS[word] for word in counts) == (len(fleet - per_step), len(per_step))
