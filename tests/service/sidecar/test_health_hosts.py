"""The push sidecar's health port and ``Host``: bound to loopback (the default) it answers loopback
names only, as the pull API and a service without tokens do (DNS rebinding: a web page re-pointing
its own name at 127.0.0.1 read the worker's counters); bound to the pod's address for the kubelet,
whose probes send ``Host: <pod IP>:<port>``, it answers every name (docs/operations.md, "Security").
"""

from __future__ import annotations

import pytest

from tests.service.sidecar.health_probes import probes_of


@pytest.mark.parametrize("path", ["/health", "/ready", "/metrics"])
def test_a_loopback_health_port_refuses_a_host_naming_another_server_and_reads_nothing(path: str) -> None:
    with probes_of(None) as probes:
        answer = probes.get(path, headers={"Host": "rebound.attacker.example:9102"})
    assert answer.status_code == 421
    assert answer.json() == {
        "detail": "Host 'rebound.attacker.example:9102' is not a name of this server: it answers only "
        "to localhost, 127.0.0.1 and [::1] (DNS rebinding guard)"
    }


@pytest.mark.parametrize("host", ["localhost:9102", "127.0.0.1:9102", "[::1]:9102", "LocalHost."])
def test_a_loopback_health_port_answers_every_loopback_name(host: str) -> None:
    with probes_of(None) as probes:
        answer = probes.get("/health", headers={"Host": host})
    assert (answer.status_code, answer.json()["status"]) == (200, "connecting")


def test_a_health_port_bound_for_the_kubelet_answers_its_probe_naming_the_pod_address() -> None:
    with probes_of(None, bound="0.0.0.0") as probes:
        answer = probes.get("/health", headers={"Host": "10.244.3.17:9102"})
    assert (answer.status_code, answer.json()["status"]) == (200, "connecting")
