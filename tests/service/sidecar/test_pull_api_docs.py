"""docs/sidecar.md's pull API table is the pull server's: a row for each route it serves and no
other, and for ``/done`` and ``/fail`` every outcome the report can be answered, as its enum has them.

A worker written from the table matches on these outcomes. Until round 45 Redis had no way to tell a
repeated failure report from a lapse, and ``/fail`` answered ``stale`` for both; it answers
``duplicate`` for a repeat since (``P:failed``), and only a row listing it tells the worker's
author that a retried ``/fail`` is answered so."""

from __future__ import annotations

import re
from pathlib import Path

from fastapi.routing import APIRoute

from service.delivery import CompletionOutcome, ReleaseOutcome
from service.sidecar.pull_api import router

DOC = Path(__file__).resolve().parents[3] / "docs" / "sidecar.md"
_ROUTE = re.compile(r"^\| `(GET|POST) (/[a-z]+)", re.MULTILINE)
_OUTCOMES = re.compile(r'"outcome": ("\w+"(?: \\\| "\w+")*)')
GONE = "unknown_schedule"  # the pull server's own answer for a schedule gone from Redis


def _rows() -> dict[str, str]:
    """The pull API table: ``METHOD /path`` -> its row."""
    return {
        f"{method} {path}": row
        for row in DOC.read_text().splitlines()
        for method, path in _ROUTE.findall(row)
    }


def answered(row: str) -> set[str]:
    """The outcomes a row gives its report (``{"outcome": "accepted" \\| "duplicate"}``, ...)."""
    return {value for values in _OUTCOMES.findall(row) for value in re.findall(r'"(\w+)"', values)}


def test_the_table_has_a_row_for_each_route_the_pull_server_serves_and_no_other() -> None:
    served = {
        f"{method} {route.path}"
        for route in router.routes
        if isinstance(route, APIRoute)
        for method in route.methods or ()
        if method != "HEAD"
    }
    assert set(_rows()) == served


def test_the_done_and_fail_rows_give_every_outcome_of_their_report_and_no_other() -> None:
    rows = _rows()
    assert answered(rows["POST /done"]) == {outcome.value for outcome in CompletionOutcome} | {GONE}
    assert answered(rows["POST /fail"]) == {outcome.value for outcome in ReleaseOutcome} | {GONE}


def test_a_row_without_an_outcome_is_caught() -> None:
    """The /fail row as it was before round 45: ``duplicate`` missing."""
    row = r'`{"outcome": "requeued" \| "dead_lettered"}`; 200 `{"outcome": "stale", "error"}`'
    assert answered(row) == {"requeued", "dead_lettered", "stale"}
    assert answered(row) != {outcome.value for outcome in ReleaseOutcome}
