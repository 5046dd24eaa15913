"""deploy/constraints.txt pins the versions installed in the venv the tests run in, not only versions
pyproject.toml allows.

The image installs exactly these pins (deploy/Dockerfile), so it runs what the suite passed with only
while they are what the venv holds; the file is written from the venv (deploy/pin_constraints.py) and
says so. By round 51 the two had drifted (idna 3.20, opentelemetry-api 1.45.2 and redis 8.1.0 pinned;
3.21, 1.45.3 and 8.2.0 installed and tested) and nothing failed: the pins were inside pyproject's bounds
(test_dockerfile's check) and the closure check skips a package installed at another version. So the
pins are held to the installed versions: pyproject's bounds alone would let the image ship versions no
test ran.

``make venv`` installs under the pins, so a fresh clone's venv agrees with them whatever the registry
serves that day (the check cannot fail for a release nobody here made); a package upgraded in the venv
fails here until the pins are regenerated. Offline: installed metadata only.
"""

from __future__ import annotations

import platform
import re
import sys

from tests.deploy.pins import CONSTRAINTS, ROOT, installed_closure, read_pins

Drift = dict[str, tuple[str | None, str | None]]


def drift(pins: dict[str, str], installed: dict[str, str], *, same_names: bool) -> Drift:
    """Each package pinned at a version other than the installed one: name -> (pinned, installed); with
    ``same_names``, also each pinned and not installed, or installed and not pinned (``None``)."""
    names = set(pins) | set(installed) if same_names else set(pins) & set(installed)
    pairs = {name: (pins.get(name), installed.get(name)) for name in sorted(names)}
    return {name: pair for name, pair in pairs.items() if pair[0] != pair[1]}


def _made_here() -> bool:
    """Whether this interpreter is the kind the pins were made with (Python minor version, platform):
    only then is the closure the same set of packages, environment markers differing between them."""
    made = re.search(r"python=(\d+\.\d+)\.\S+ platform=(\S+)", CONSTRAINTS.read_text())
    assert made, "constraints.txt names no python= and platform="
    here = (f"{sys.version_info.major}.{sys.version_info.minor}", f"{sys.platform}-{platform.machine()}")
    return (made[1], made[2]) == here


def test_every_pin_is_the_version_installed_here_and_the_pins_are_the_whole_runtime_closure() -> None:
    assert drift(read_pins(), installed_closure(), same_names=_made_here()) == {}


def test_a_package_pinned_at_another_version_or_on_one_side_only_is_named() -> None:
    pins = {"redis": "8.1.0", "idna": "3.21", "gone": "1.0"}
    installed = {"redis": "8.2.0", "idna": "3.21", "new": "2.0"}
    assert drift(pins, installed, same_names=True) == {
        "gone": ("1.0", None),
        "new": (None, "2.0"),
        "redis": ("8.1.0", "8.2.0"),
    }
    assert drift(pins, installed, same_names=False) == {"redis": ("8.1.0", "8.2.0")}


def test_make_venv_installs_under_the_pins_and_again_when_they_change() -> None:
    """Without it a fresh clone's venv takes whatever the registry serves that day, and the check above
    fails for a release nobody here made; with it the venv holds the pins, and new pins reinstall."""
    makefile = (ROOT / "Makefile").read_text()
    stamp_rule = re.search(r"^\$\(STAMP\):(.*)$", makefile, re.MULTILINE)
    assert stamp_rule is not None
    assert "deploy/constraints.txt" in stamp_rule[1].split()
    installs = [line for line in makefile.splitlines() if "pip install" in line and " -e " in line]
    assert installs
    assert all("--constraint deploy/constraints.txt" in line for line in installs)
