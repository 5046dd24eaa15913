"""docs/sidecar.md's table "The counters, lease by lease" ends each lease in one of the counters its
lead sentence balances ``claimed + stolen + inherited`` against, and those are every ``SessionStats``
counter the exit line prints but the ones a lease comes by and those of leases this process never
took (the Prometheus series are held to the exposition by ``test_health.py``). An operator checks the
balance on the printed line: a counter added to the code and not to the table, or named there and
printed nowhere, broke it silently."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from service.sidecar.session_settings import SessionStats

DOC = (Path(__file__).resolve().parents[3] / "docs" / "sidecar.md").read_text()
TAKEN = ("claimed", "stolen", "inherited")  # how a lease comes to this sidecar
BESIDE = ("reaped", "reset")  # leases this process never took (lapsed ones, a predecessor's): no balance


def _counters() -> list[str]:
    return [field.name for field in dataclasses.fields(SessionStats)]


def _lease_by_lease() -> str:
    return DOC.split("**The counters, lease by lease.**", 1)[1].split("\n## ", 1)[0]


def _ends_in_lead() -> set[str]:
    """The counters the lead sentence says each lease ends in (``ends in exactly one of ...``)."""
    lead = re.search(r"ends in exactly one of (.*?) \(", _lease_by_lease(), re.DOTALL)
    assert lead, "the counters section says no longer what a lease ends in"
    return set(re.findall(r"`(\w+)`", lead.group(1)))


def test_a_lease_ends_in_every_counter_but_those_it_is_taken_by_and_the_other_workers() -> None:
    assert _ends_in_lead() == set(_counters()) - set(TAKEN) - set(BESIDE)
    section = re.sub(r"\s+", " ", _lease_by_lease())
    assert f"`{' + '.join(TAKEN)}` equals their sum" in section


def test_every_counter_the_lease_table_names_is_one_a_lease_ends_in() -> None:
    rows = [line for line in _lease_by_lease().splitlines() if line.startswith("| ") and "---" not in line]
    counted = {name for row in rows[1:] for name in re.findall(r"`(\w+)`", row.rsplit("|", 2)[1])}
    assert counted == _ends_in_lead()


def test_the_exit_line_s_keys_are_named_in_the_order_it_prints_them() -> None:
    """The sentence that says what the counters line holds names each key it prints, in order: it
    named every counter but ``inherited`` (round 46's), which a fleet's balance check adds."""
    lead = r"on exit the sidecar prints its counters\s+as one JSON line on stdout \((.*?)\)"
    said = re.search(lead, DOC, re.S)
    assert said, "docs/sidecar.md says no longer what the counters line holds"
    assert re.findall(r"`(\w+)`", said.group(1)) == ["worker_id", *_counters()]
