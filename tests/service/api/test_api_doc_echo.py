"""docs/api.md's account of what a 422 sends back of the input at fault is the service's: the limits
past which a value and a field's path are cut, and what each is cut to, as the "Errors" table's 422
row gives them, are ``service/problems/details.py``'s; its examples are the service's answers.

A client author sizes a log line, or parses ``field``, from that row. Until 2026-12-05 it gave a
text's echo as four characters and its size (``"qqqq... (100000 characters)"``); the service keeps 32."""

from __future__ import annotations

import re
from typing import Any

from fastapi.testclient import TestClient

from service.problems.details import ECHO_DIGITS, ECHO_HEAD, MAX_ECHO, PATH_HEAD, PATH_TAIL, echo
from tests.service.api_helpers import batch_body
from tests.service.errors_doc import errors_table

_VALUE = re.compile(
    r"one past (\d+) digits or (\d+) characters cut to its start \(its first (\d+) digits, (\d+) char"
)
_PATH = re.compile(r"a path past (\d+) characters .*? keeps its first (\d+) parts and its last (\d+)")
_EXAMPLE = re.compile(
    r'`"?((?:\d+|q+|sampling\.extra\.[a-z.]+)\.\.\.[a-z.]* \(\d+ (?:digits|characters|parts)\))"?`'
)


def _row() -> str:
    """The "Errors" table's 422 row."""
    return errors_table()[422]


def _nested(depth: int) -> Any:
    """A JSON object ``depth`` levels deep, past pydantic's validation depth when ``depth`` is 300."""
    node: Any = 1
    for _ in range(depth):
        node = {"a": node}
    return node


def test_the_422_row_gives_the_limits_a_value_and_a_path_are_cut_at_and_what_is_kept() -> None:
    (value,) = _VALUE.findall(_row())
    assert tuple(int(figure) for figure in value) == (ECHO_DIGITS, MAX_ECHO, ECHO_DIGITS, ECHO_HEAD)
    (path,) = _PATH.findall(_row())
    assert tuple(int(figure) for figure in path) == (MAX_ECHO, PATH_HEAD, PATH_TAIL)


def test_the_422_row_s_examples_are_what_the_service_sends_back(client: TestClient) -> None:
    """The number and the text as ``echo`` cuts them, and the path of a ``sampling.extra`` nested
    past the validation depth as the service names it in ``field``."""
    number, text, path = _EXAMPLE.findall(_row())
    assert [number, text] == [echo(10**4000), echo("q" * 100_000)]
    response = client.post("/schedule", json=batch_body(sampling={"extra": _nested(300)}))
    assert (response.status_code, response.json()["field"]) == (422, path)
