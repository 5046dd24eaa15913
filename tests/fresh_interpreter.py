"""Run one function of a test helper module in a fresh Python interpreter and return its result.

Some tests measure state the whole process shares: the cycle collector's counts and collections
above all. A pytest-xdist worker runs module after module in one process, and threads an earlier
module left running (a server's loop, a plan still solving) allocate, free and collect on the same
collector meanwhile: in round 60's fresh-clone CI a foreign collection and a few frees moved
``gc.get_count()`` under a test's bound and it failed (docs/experiments.md, lead, round 61). A fresh
interpreter has no thread but its own, so what such a test reads is what the code under test did.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]  # the checkout: the child imports ``tests`` from it
WAIT_S = 120.0  # a bound against a hung child; the scenarios here take well under a second


def in_fresh_interpreter(function: Callable[[], Any]) -> Any:
    """``function()`` run in a new interpreter (``python -c``, the checkout as its directory), its
    JSON result read back; a failure in the child raises here with the child's stderr."""
    module, name = function.__module__, function.__qualname__
    script = f"import json; from {module} import {name}; print(json.dumps({name}()))"
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=WAIT_S, check=False
    )
    if done.returncode != 0:
        where = f"{module}.{name} exited {done.returncode} in a fresh interpreter"
        raise AssertionError(f"{where}:\n{done.stderr}")
    return json.loads(done.stdout.splitlines()[-1])
