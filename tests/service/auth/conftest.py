"""The API fixtures the auth tests drive the service with: tokens are judged by the app's routes, so
these tests call the app as tests/service/api's do, with its fixtures (its autouse ``testclient_host``
included), not copies of them."""

from __future__ import annotations

from tests.service.api.conftest import client, live_settings, make_client, secured, testclient_host

__all__ = ["client", "live_settings", "make_client", "secured", "testclient_host"]
