"""What a sidecar loads to start: every module it imports is time before its probes answer.

Measured on the 2-core dev host: numpy (through the steal guard's constant and KV admission) cost
~0.2 s and pydantic-settings (through the Redis URL check) ~0.1 s of a sidecar's ~1.5 s start-up,
for nothing a sidecar runs. The root CLI (``--help``, and every command before it runs) loads no
command's heavy dependencies.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

# What ``rollout-scheduler sidecar`` imports before it serves, in either mode (service/commands/sidecar.py).
SIDECAR_START = """
import sys
from service.commands import sidecar
from service.sidecar import launch, pull_api
sidecar._check("redis://127.0.0.1:6379/0", "http://127.0.0.1:8000", None, None, "INFO")
sidecar._check_worker_id("w0")
print(" ".join(sorted(m for m in {modules} if m in sys.modules)))
"""

CLI_ROOT = """
import sys
import service.cli
service.cli._register()
print(" ".join(sorted(m for m in {modules} if m in sys.modules)))
"""


def _loaded(program: str, modules: set[str]) -> set[str]:
    """Which of ``modules`` a fresh interpreter has loaded after running ``program``."""
    code = program.format(modules=sorted(modules))
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    return set(done.stdout.split())


@pytest.mark.timeout(60)
def test_a_sidecar_starts_without_numpy_or_pydantic_settings() -> None:
    assert _loaded(SIDECAR_START, {"numpy", "pydantic_settings", "scipy", "lightgbm", "ortools"}) == set()


@pytest.mark.timeout(60)
def test_the_cli_root_loads_no_command_s_heavy_dependencies() -> None:
    heavy = {"numpy", "pydantic", "fastapi", "uvicorn", "redis", "httpx", "ortools", "lightgbm"}
    assert _loaded(CLI_ROOT, heavy) == set()
