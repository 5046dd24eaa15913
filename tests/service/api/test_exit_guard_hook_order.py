"""The exit guard decides the status after every wait the service registers at exit, whichever module
a process imports first: its hook (``_at_the_exits_end``) is registered before any of the waits.

Python runs ``atexit`` hooks last registered first, so the guard's hook runs after the waits only if it
is registered before them: ``settling.py`` imports ``exit_guard`` first, and each module with a wait
(``plan_thread``, ``mark_hop``, ``post_publish``) imports ``settling`` before it registers its own
(exit51). A module that registered its wait before that import would run it after the decision,
unguarded: a guard whose bound passed during it found the decision taken, and the exit ended 0
(review51b checked the assumption on each entry: serve's, the app factory's under uvicorn, each module
with a wait imported first).

Each entry is imported in a fresh interpreter whose ``atexit.register`` notes what it registers.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
GUARD = "service.api.exit_guard:_at_the_exits_end"
# the imports a process runs first, then what ``atexit.register`` was given, in order
CHILD = """
import atexit, importlib, sys

real = atexit.register

def noted(func, *args, **kwargs):
    print(f"{getattr(func, '__module__', '?')}:{getattr(func, '__qualname__', func)}", flush=True)
    return real(func, *args, **kwargs)

atexit.register = noted
for name in sys.argv[1:]:
    importlib.import_module(name)
"""
ENTRIES = [
    ("service.cli_app", "service.commands.serve", "service.app"),  # serve: the command line, then the app
    ("service.app",),  # the app factory, run by uvicorn directly
    ("service.api.plan_thread",),
    ("service.api.mark_hop",),
    ("service.pipeline.post_publish",),
]


def _registered(*modules: str) -> list[str]:
    child = subprocess.run(
        [sys.executable, "-c", CHILD, *modules],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return child.stdout.split()


@pytest.mark.parametrize("modules", ENTRIES, ids=lambda modules: modules[-1])
def test_the_guards_hook_is_registered_before_every_wait_of_the_service(modules: tuple[str, ...]) -> None:
    hooks = _registered(*modules)
    waits = [hook for hook in hooks if hook.startswith("service.") and hook != GUARD]
    assert waits, hooks  # each entry registers some wait: else this checks nothing
    assert GUARD in hooks
    assert all(hooks.index(GUARD) < hooks.index(wait) for wait in waits), hooks
