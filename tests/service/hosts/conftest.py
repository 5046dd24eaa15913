"""The API fixtures the ``Host`` allow-list tests drive the service with: the guard wraps the app, so
these tests call the app as tests/service/api's do, with its fixtures (its autouse ``testclient_host``
included, which lists the test client's ``testserver``), not copies of them."""

from __future__ import annotations

from tests.service.api.conftest import client, live_settings, make_client, secured, testclient_host

__all__ = ["client", "live_settings", "make_client", "secured", "testclient_host"]
