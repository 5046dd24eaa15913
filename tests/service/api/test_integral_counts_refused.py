"""A count sent as a float is read as the integer it is, then held to the bounds that integer is held to.

``1.0`` is the integer 1 in a report (``scheduler.trace.json_count``), so a float count outside a
count's range is refused as the integer is: ``-1.0`` in the words ``-1`` gets (below its least),
``3e9`` in those ``3000000000`` gets (past ``MAX_COUNT``), not as "no valid integer", which would send
a trainer looking for a type error where its value is out of range. A float that is no integer (a
fraction, NaN, an infinity) is refused in one sentence, naming the number as it was read.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient

from tests.service.api_helpers import actual_report


@pytest.fixture
def client(module_app: TestClient, redis_client: redis.Redis) -> TestClient:
    """The module's one app (``module_app``), on a Redis flushed for the test:
    a refusal is the body's."""
    return module_app


REPORT = actual_report(1, 2, 3)
COUNTS = ("step", "sample_idx", "prompt_tokens", "output_tokens", "max_new_tokens")
# a float's JSON text -> the integer's, which the same 422 refuses
SAME_AS = {"-1.0": "-1", "-3e0": "-3", "3e9": "3000000000", "2147483648.0": "2147483648"}
# a float that is no integer -> the number as the 422 names it
NO_INTEGER = {"1.5": "1.5", "NaN": "nan", "Infinity": "inf", "-Infinity": "-inf"}


def _post(client: TestClient, field: str, text: str) -> Any:
    """``REPORT`` posted with ``field``'s value the JSON text ``text``: the 422's status and body."""
    body = json.dumps({"actuals": [{**REPORT, field: "HERE"}]}).replace('"HERE"', text)
    response = client.post("/actuals", content=body, headers={"content-type": "application/json"})
    return response.status_code, response.json()


@pytest.mark.parametrize("field", COUNTS)
@pytest.mark.parametrize(("written", "integer"), SAME_AS.items(), ids=SAME_AS.keys())
def test_a_float_count_out_of_range_is_refused_as_its_integer_is(
    field: str, written: str, integer: str, client: TestClient
) -> None:
    as_float, as_integer = _post(client, field, written), _post(client, field, integer)
    words = [problem.pop("detail").partition(": ")[2] for _, problem in (as_float, as_integer)]
    assert (as_float, words[0]) == (as_integer, words[1])  # the detail names each as it was sent
    assert (as_integer[0], as_integer[1]["field"]) == (422, f"actuals[0].{field}")


@pytest.mark.parametrize("field", COUNTS)
@pytest.mark.parametrize(("written", "shown"), NO_INTEGER.items(), ids=NO_INTEGER.keys())
def test_a_float_that_is_no_integer_is_refused_naming_the_number(
    field: str, written: str, shown: str, client: TestClient
) -> None:
    status, body = _post(client, field, written)
    assert (status, body["field"]) == (422, f"actuals[0].{field}")
    assert body["detail"] == f"actuals[0].{field}={shown}: expected an integer"  # the value once
