"""The API fixtures the client tests run a live service with: the client is tested against the real
app, so these are tests/service/api's (its autouse ``testclient_host`` included), not copies."""

from __future__ import annotations

from tests.service.api.conftest import live_settings, testclient_host

__all__ = ["live_settings", "testclient_host"]
