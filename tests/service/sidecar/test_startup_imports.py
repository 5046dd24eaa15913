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

# What ``rollout-scheduler sidecar`` imports before it serves (service/commands/sidecar.py), then
# what each mode imports when it runs ({mode}: service/sidecar/launch.py, run_push and run_pull).
SIDECAR_START = """
import sys
from service.commands import sidecar, sidecar_checks
from service.sidecar import launch
sidecar_checks.check_connections("redis://127.0.0.1:6379/0", "http://127.0.0.1:8000", None, None, "INFO")
sidecar_checks.check_worker_id("w0")
{mode}
print(" ".join(sorted(m for m in {modules} if m in sys.modules)))
"""
PUSH = "from service.sidecar import engine_client, health, runner"
PULL = "import uvicorn; from service.sidecar import pull_api"

CLI_ROOT = """
import sys
import service.cli_app
service.cli_app._register()
print(" ".join(sorted(m for m in {modules} if m in sys.modules)))
"""


def _loaded(program: str, modules: set[str], mode: str = "") -> set[str]:
    """Which of ``modules`` a fresh interpreter has loaded after running ``program`` (in ``mode``)."""
    code = program.format(modules=sorted(modules), mode=mode)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    return set(done.stdout.split())


@pytest.mark.timeout(60)
def test_a_sidecar_starts_without_numpy_or_pydantic_settings() -> None:
    heavy = {"numpy", "pydantic_settings", "scipy", "lightgbm", "ortools"}
    assert _loaded(SIDECAR_START, heavy, f"{PUSH}; {PULL}") == set()


@pytest.mark.timeout(60)
def test_a_push_sidecar_serves_its_probes_without_a_web_framework() -> None:
    """Three GETs on a thread (service/sidecar/health.py) took FastAPI and uvicorn ~0.5 s of CPU to load."""
    assert _loaded(SIDECAR_START, {"fastapi", "starlette", "uvicorn"}, PUSH) == set()


@pytest.mark.timeout(60)
def test_a_push_sidecar_checks_its_worker_id_without_pydantic() -> None:
    """Pydantic and the API schemas (~0.1 s of CPU) loaded for one rule on ``--worker-id``; pull mode
    keeps them (FastAPI)."""
    assert _loaded(SIDECAR_START, {"pydantic", "pydantic_core"}, PUSH) == set()


@pytest.mark.timeout(60)
def test_a_pull_sidecar_starts_without_the_engine_client() -> None:
    """Pull mode talks to no engine: httpx (~0.1 s of CPU) is push mode's."""
    assert _loaded(SIDECAR_START, {"httpx"}, PULL) == set()


@pytest.mark.timeout(60)
def test_the_cli_root_loads_no_command_s_heavy_dependencies() -> None:
    heavy = {"numpy", "pydantic", "fastapi", "uvicorn", "redis", "httpx", "ortools", "lightgbm"}
    assert _loaded(CLI_ROOT, heavy) == set()
