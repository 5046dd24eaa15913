"""deploy/constraints.txt read as the image's pip reads it, and the venv's runtime closure beside it.

Shared by the Dockerfile checks (the pins cover the project's requirements) and the check that the pins
are the versions installed here (tests/deploy/test_constraints_in_step.py).
"""

from __future__ import annotations

import runpy
from collections.abc import Callable
from pathlib import Path
from typing import cast

from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
CONSTRAINTS = ROOT / "deploy" / "constraints.txt"


def read_pins(path: Path = CONSTRAINTS) -> dict[str, str]:
    """Canonical package name -> pinned version; every line not a comment must be an exact ``==`` pin."""
    pins: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if line and not line.startswith("#"):
            name, sep, version = line.partition("==")
            assert sep, f"not an exact pin: {line!r}"
            pins[canonicalize_name(name)] = version
    return pins


def installed_closure() -> dict[str, str]:
    """What ``deploy/pin_constraints.py`` would pin from this venv: the project's runtime dependency
    closure (no extras) at the installed versions. Its own function, so the two can never disagree on
    what the closure is; read from the installed metadata, offline."""
    script = runpy.run_path(str(ROOT / "deploy" / "pin_constraints.py"))
    return cast(Callable[[], dict[str, str]], script["runtime_closure"])()
