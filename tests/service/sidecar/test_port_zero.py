"""A sidecar asked for port 0 (``--pull-api 0``, ``--health-port 0``) serves on the kernel's pick and
logs the port, as it logs any port it listens on.

Why. A port picked free before the sidecar binds it is free when picked, not when bound: another
process may take it first, and the sidecar then exits "cannot listen". Port 0 leaves nothing to race
for, but only the log line tells its user (a test, a supervisor) where to reach it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx

from service.ports import free_port
from tests.service.bound_port import child_port
from tests.service.sidecar.procs import PROCESS_START_S, Proc, bound_url, cluster, wait_http, wait_until


def _logged_port(sidecar: Proc, what: str) -> int:
    """The port of the sidecar's ``<what> listening on http://127.0.0.1:<port>`` line, once logged.
    Read once the sidecar listens (``bound_url``: its bound is the child's own time, not the time its
    imports wait for a CPU on a loaded host, and one that exits fails with its log): the wait for the
    line is then a bound against never on the logging, and no longer holds the start."""
    bound_url(sidecar)
    pattern = re.compile(rf"{what} listening on http://127\.0\.0\.1:(\d+)$")

    def found() -> re.Match[str] | None:
        log = sidecar.log.read_text()
        assert sidecar.popen.poll() is None, f"{sidecar.name} exited: {log[-2000:]}"
        for line in log.splitlines():
            if line.startswith("{") and (match := pattern.search(json.loads(line)["message"])):
                return match
        return None

    wait_until(lambda: found() is not None, PROCESS_START_S, f"the {what}'s port logged")
    match = found()
    assert match is not None
    return int(match.group(1))


def test_a_pull_sidecar_on_port_0_logs_the_port_it_serves_its_api_on(redis_url: str, tmp_path: Path) -> None:
    with cluster(tmp_path) as procs:
        sidecar = procs.spawn(
            "pull", ["sidecar", "--worker-id", "w0", "--pull-api", "0", "--redis-url", redis_url]
        )
        port = _logged_port(sidecar, "pull API")
        assert port != 0
        assert child_port(sidecar.popen, PROCESS_START_S) == port
        wait_http(f"http://127.0.0.1:{port}/ready", sidecar)


def test_a_push_sidecar_on_health_port_0_logs_the_port_its_probes_answer_on(
    redis_url: str, tmp_path: Path
) -> None:
    with cluster(tmp_path) as procs:
        nowhere = f"http://127.0.0.1:{free_port()}"  # no engine: the probes answer all the same
        sidecar = procs.sidecar("w0", nowhere, redis_url, "--health-port", "0")
        port = _logged_port(sidecar, "health probes")
        assert port != 0
        assert child_port(sidecar.popen, PROCESS_START_S) == port
        wait_http(f"http://127.0.0.1:{port}/health", sidecar)
        assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).json()["worker_id"] == "w0"
