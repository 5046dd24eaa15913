"""The pull API's probes in its OpenAPI document: each of ``/health``, ``/ready`` and ``/metrics`` once,
as its ``GET``. Their ``HEAD`` (what curl -I and load balancers probe with) is served but kept out of
the schema: a client generated from it would otherwise carry a second, bodiless call for each probe.
"""

from __future__ import annotations

from service.sidecar.connecting import Connecting
from service.sidecar.pull_api import create_pull_app
from service.sidecar.session import WorkerSession


def _never() -> WorkerSession:
    raise AssertionError("the schema is built without connecting")


def test_each_probe_is_in_the_schema_as_its_get_alone() -> None:
    paths = create_pull_app(Connecting("w0", _never)).openapi()["paths"]
    assert {path: sorted(paths[path]) for path in ("/health", "/ready", "/metrics")} == {
        "/health": ["get"],
        "/ready": ["get"],
        "/metrics": ["get"],
    }
    assert not [path for path, operations in paths.items() if "head" in operations]
