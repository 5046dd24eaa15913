"""The refusing client the argument tests share: every request it sends is recorded (``sent``) and
answered 422 (``tests.service.client.refusing``), so a test that expects no request can say so."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from service.client import SchedulerClient
from tests.service.client.refusing import refusing


@pytest.fixture
def sent() -> list[httpx.Request]:
    """The requests the client sent (each answered 422)."""
    return []


@pytest.fixture
def client(sent: list[httpx.Request]) -> Iterator[SchedulerClient]:
    """A client whose every request is recorded and refused."""
    with refusing(sent) as made:
        yield made
