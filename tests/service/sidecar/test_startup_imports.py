"""What a sidecar loads to start: every module it imports is time before its probes answer.

Measured on the 2-core dev host: numpy (through the steal guard's constant and KV admission) cost
~0.2 s and pydantic-settings (through the Redis URL check) ~0.1 s of a sidecar's ~1.5 s start-up,
for nothing a sidecar runs. The root CLI (``--help``, and every command before it runs) loads no
command's heavy dependencies.
"""

from __future__ import annotations

import functools
import subprocess
import sys

import pytest

# What ``rollout-scheduler sidecar`` imports before it serves: the console script's entry
# (``service.cli.main``, its command line's parse and run left out: ``run`` returns at once), the
# command (service/commands/sidecar.py), then what each mode imports when it runs ({mode}:
# service/sidecar/launch.py, run_push and run_pull).
SIDECAR_START = """
import sys
import service.cli_app
service.cli_app.run = lambda: None
from service import cli
sys.argv = ["rollout-scheduler", "sidecar"]
cli.main()
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


# Every module a test here asks about: each start below is run once, in its own fresh interpreter, and
# reports which of these it loaded; the tests read their own from it. A child a test (~0.7 CPU-s
# each, five of them) when two asked the same start about different modules (ci59b).
WATCHED = {
    *("numpy", "pydantic_settings", "scipy", "lightgbm", "ortools"),
    *("fastapi", "starlette", "uvicorn", "pydantic", "pydantic_core", "redis", "httpx", "rich", "pygments"),
}
STARTS = {"push": (SIDECAR_START, PUSH), "pull": (SIDECAR_START, PULL), "cli root": (CLI_ROOT, "")}


@functools.cache
def _loaded_by(start: str) -> frozenset[str]:
    """Which of ``WATCHED`` a fresh interpreter has loaded after running ``start``'s program in its
    mode (``STARTS``): what a process of this start imports, whichever test asks first."""
    program, mode = STARTS[start]
    code = program.format(modules=sorted(WATCHED), mode=mode)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    return frozenset(done.stdout.split())


def _loaded(start: str, modules: set[str]) -> set[str]:
    """Which of ``modules`` a sidecar's ``start`` (push, pull) or the CLI root's loads."""
    assert modules <= WATCHED
    return modules & _loaded_by(start)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", ["push", "pull"])
def test_a_sidecar_starts_without_numpy_or_pydantic_settings(mode: str) -> None:
    heavy = {"numpy", "pydantic_settings", "scipy", "lightgbm", "ortools"}
    assert _loaded(mode, heavy) == set()


@pytest.mark.timeout(60)
def test_a_push_sidecar_serves_its_probes_without_a_web_framework() -> None:
    """Three GETs on a thread (service/sidecar/health.py) took FastAPI and uvicorn ~0.5 s of CPU to load."""
    assert _loaded("push", {"fastapi", "starlette", "uvicorn"}) == set()


@pytest.mark.timeout(60)
def test_a_push_sidecar_checks_its_worker_id_without_pydantic() -> None:
    """Pydantic and the API schemas (~0.1 s of CPU) loaded for one rule on ``--worker-id``; pull mode
    keeps them (FastAPI)."""
    assert _loaded("push", {"pydantic", "pydantic_core"}) == set()


@pytest.mark.timeout(60)
def test_a_push_sidecar_loads_httpx_without_httpx_s_own_command_line() -> None:
    """httpx's ``__init__`` imports its CLI (rich, pygments) where they are installed: ~0.15 of a push
    sidecar's ~0.75 CPU-s of imports, for a command line no command of ours runs (ci60b)."""
    assert _loaded("push", {"httpx", "rich", "pygments"}) == {"httpx"}


@pytest.mark.timeout(60)
def test_a_pull_sidecar_starts_without_the_engine_client() -> None:
    """Pull mode talks to no engine: httpx (~0.1 s of CPU) is push mode's."""
    assert _loaded("pull", {"httpx"}) == set()


@pytest.mark.timeout(60)
def test_the_cli_root_loads_no_command_s_heavy_dependencies() -> None:
    heavy = {"numpy", "pydantic", "fastapi", "uvicorn", "redis", "httpx", "ortools", "lightgbm"}
    assert _loaded("cli root", heavy) == set()
