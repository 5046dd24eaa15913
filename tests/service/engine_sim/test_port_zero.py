"""``engine-sim --port 0`` serves on a port the kernel picks and says which in its banner.

Why. A port picked free before the engine binds it is free when picked, not when bound: another
process may take it in between (a CI run lost an engine so, among eight started at once). Asked for
port 0, the engine binds before its banner and names the port it holds, so a user or a test that
starts one never races for a port.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.service.bound_port import child_port

ROOT = Path(__file__).resolve().parents[3]
START_S = 120.0  # the child's imports on a loaded 2-core host: a bound against never, not a speed
pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads the child's sockets from /proc")


def test_engine_sim_on_port_0_names_the_port_it_serves_on_in_its_banner() -> None:
    args = ["engine-sim", "--port", "0", "--device", "H100", "--time-scale", "0.01"]
    child = subprocess.Popen(
        [sys.executable, "-c", "from service.cli import main; main()", *args],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stderr is not None
        banner = child.stderr.readline()  # said once the port is bound, before it serves
        said = re.search(r"on http://127\.0\.0\.1:(\d+) ", banner)
        assert said is not None, banner
        port = int(said.group(1))
        assert port != 0
        assert child_port(child, START_S) == port
        assert _health(port, START_S) == {"status": "ok", "engine": "simulated"}
    finally:
        child.kill()
        child.communicate(timeout=30)


def _health(port: int, timeout_s: float) -> object:
    """``/health``'s answer once the app answers (the socket listens before uvicorn serves on it)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).json()
        except httpx.TransportError:
            assert time.monotonic() < deadline, f"nothing answered on port {port} within {timeout_s} s"
            time.sleep(0.05)
