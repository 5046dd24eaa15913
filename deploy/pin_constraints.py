"""Write ``deploy/constraints.txt``: exact pins of the runtime dependency closure, taken from a working venv.

The image must install the versions the test suite passed with, not whatever the registry serves on the
day of the build. ``pip freeze`` alone would also pin the dev tools (pytest, mypy, ruff), which the image
does not ship, so we walk the installed metadata from ``rollout-scheduler``'s own requirements (no
extras) and keep only the packages that walk reaches, at the versions installed here.

Run it from the repo root with the venv's Python after changing dependencies:
``.venv/bin/python deploy/pin_constraints.py``.
"""

from __future__ import annotations

import argparse
import platform
import sys
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

PROJECT = "rollout-scheduler"
HEADER = (
    "# Exact runtime pins for deploy/Dockerfile: the dependency closure of rollout-scheduler (no extras),\n"
    "# at the versions installed in the venv the tests passed in. Regenerate, never hand-edit:\n"
    "#   .venv/bin/python deploy/pin_constraints.py\n"
    "# python={python} platform={platform}\n"
)


def _runtime_requirements(dist: metadata.Distribution) -> list[Requirement]:
    """The distribution's requirements that apply here without any extra selected."""
    reqs = [Requirement(text) for text in dist.requires or []]
    # evaluate() fills in this interpreter's environment; "extra" empty = no extra selected.
    return [req for req in reqs if req.marker is None or req.marker.evaluate({"extra": ""})]


def runtime_closure(project: str = PROJECT) -> dict[str, str]:
    """Map each package the project needs at run time (transitively) to its installed version."""
    pins: dict[str, str] = {}
    todo = [req.name for req in _runtime_requirements(metadata.distribution(project))]
    while todo:
        name = canonicalize_name(todo.pop())
        if name in pins:
            continue
        dist = metadata.distribution(name)
        pins[name] = dist.version
        todo.extend(req.name for req in _runtime_requirements(dist))
    return pins


def render(pins: dict[str, str]) -> str:
    """The constraints file text, sorted so regenerating it gives a readable diff."""
    header = HEADER.format(python=platform.python_version(), platform=f"{sys.platform}-{platform.machine()}")
    return header + "".join(f"{name}=={pins[name]}\n" for name in sorted(pins))


def main(argv: list[str] | None = None) -> int:
    """Write the constraints file (default ``deploy/constraints.txt`` beside this script)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("constraints.txt"))
    args = parser.parse_args(argv)
    pins = runtime_closure()
    args.out.write_text(render(pins))
    print(f"wrote {len(pins)} pins to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
