"""The API fixtures the learning tests drive the service with: actuals arrive by ``POST /actuals`` and
retrains by ``/models``, so these tests call the app as tests/service/api's do, with its fixtures (its
autouse ``testclient_host`` included), not copies of them."""

from __future__ import annotations

from tests.service.api.conftest import client, live_settings, make_client, secured, testclient_host

__all__ = ["client", "live_settings", "make_client", "secured", "testclient_host"]
