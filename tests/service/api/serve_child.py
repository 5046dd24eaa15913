"""``rollout-scheduler serve`` run from a test's own Python source, as the console script runs it: what
the tests of a ``serve`` held (or planted) at one step of its start or exit share, so that each says
only what it plants and what it checks.

The child gets the parent's environment less ``REDIS_URL`` and every ``ROLLOUT_*`` (a developer's shell
must not change what the test runs, and no URL means the embedded server), its temporary files and
its model dir under the test's own ``tmp_path``, and all three pipes (the stdin one for a test that
lets a held child go on once it has signalled it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

# the console script's entry, its command line the child's arguments: a source's usual ending
MAIN = """
from service.cli import main
main()
"""

# a source's beginning: ``serve``'s app is one whose startup fails (``lifespan.startup.failed``, as a
# startup that raised is told to uvicorn); the rest of the start, the embedded server included, is real
FAILING_STARTUP = """
import sys
from service import app as service_app

async def failing(scope, receive, send):
    await receive()  # lifespan.startup
    await send({"type": "lifespan.startup.failed", "message": "planted"})

service_app.create_app = lambda *args, **kwargs: failing
"""


def serve_child(source: str, args: list[str], tmp_path: Path) -> subprocess.Popen[str]:
    """``python -c source *args`` in the repository's root, with the environment above: the process,
    its stdin, stdout and stderr pipes of the test's."""
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL" and not k.startswith("ROLLOUT_")}
    env.update(PYTHONPATH=str(ROOT), TMPDIR=str(tmp_path), ROLLOUT_MODEL_DIR=str(tmp_path / "models"))
    return subprocess.Popen(
        [sys.executable, "-c", source, *args],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def signalled_after(child: subprocess.Popen[str], said: str, sig: int, wait_s: float) -> tuple[str, str]:
    """The child's stdout and stderr once it has said ``said`` (a line its source prints where it holds),
    been sent ``sig`` there (its own pid only) and let go on (``go`` on its stdin): a stop signal met at
    one chosen step. The child is killed and reaped whatever happens, so a test's failure leaves none."""
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == said, child.communicate(timeout=wait_s)[1][-2000:]
        child.send_signal(sig)
        return child.communicate("go\n", timeout=wait_s)
    finally:
        child.kill()
        child.wait()
