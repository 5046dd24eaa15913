"""The API fixtures the pipeline tests drive the service with: a batch goes through the pipeline by
``POST /schedule``, so these tests call the app as tests/service/api's do, with its fixtures (its
autouse ``testclient_host`` included), not copies of them."""

from __future__ import annotations

from tests.service.api.conftest import client, make_client, testclient_host

__all__ = ["client", "make_client", "testclient_host"]
