"""``rollout-scheduler serve`` started as the console script runs it, held still as the app's module
begins to import: the stop tests signal it then, whatever the host's load, so no sleep of theirs
decides the outcome. It runs with the embedded server (no ``REDIS_URL``) and a temporary dir of the
test's own."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.service.api.serve_child import MAIN, serve_child

IMPORTING = "importing the app\n"  # the child's word that it stands still


def stand_still(module: str, said: str) -> str:
    """A child's source ending: the console script's entry, held still (saying ``said``) as ``module``
    begins to import, until the test's signal."""
    return (
        f"""
import sys, time

class StandStill:
    def find_spec(self, name, path=None, target=None):
        if name == {module!r}:
            sys.meta_path.remove(self)
            print({said!r}, flush=True)
            time.sleep(600)  # until the test's signal
        return None

sys.meta_path.insert(0, StandStill())
"""
        + MAIN
    )


# serve held at the app's import
STAND_STILL = stand_still("service.app", IMPORTING.rstrip("\n"))


def held_in_imports(source: str, args: list[str], tmp_path: Path) -> subprocess.Popen[str]:
    """``source`` (ending in ``STAND_STILL``) run with ``args``, once it says it imports the app; a
    child that says anything else is killed and reaped before the assertion fails. The child is
    ``serve_child``'s: the parent's environment less ``REDIS_URL`` and ``ROLLOUT_*``, its files under
    ``tmp_path``."""
    child = serve_child(source, args, tmp_path)
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == IMPORTING
    except BaseException:
        child.kill()
        child.communicate()
        raise
    return child
