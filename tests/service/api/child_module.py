"""One of this folder's child modules (``*_child``) run as a process of its own, from the repository root.

The exit tests watch what a real interpreter does past its ``atexit`` hooks, which no in-process test
reaches: each runs a module as ``python -m`` with the tree on its path and reads its status and output.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def run_child(module: str, *args: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
    """``module`` run to its end (``timeout_s``: a bound against never), its status not checked."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
