"""The project as a user's ``pip install .`` or the image gets it: built into a wheel, not run from the tree.

The development venv holds an editable install, which reads every file from the checkout, so a data file
the wheel leaves out (a Lua script, a ``py.typed``) or a build the declared backend refuses goes unseen
there. Here the wheel is built from a copy of exactly what deploy/Dockerfile copies (pyproject.toml,
README.md and the three packages) with this venv's setuptools and no network (``--no-build-isolation``),
then unpacked and imported outside the checkout.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import tomllib
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PACKAGES = ("scheduler", "predictors", "service")
# setuptools reads ``project.license`` as an SPDX expression (PEP 639) from 77.0 on; before that a
# string there fails the build at its metadata step ("must be valid exactly by one definition").
SPDX_LICENSE_SETUPTOOLS = Version("77.0")


def _backend_requirement() -> Requirement:
    """The setuptools requirement of ``[build-system] requires``."""
    found = [Requirement(text) for text in PYPROJECT["build-system"]["requires"]]
    return next(req for req in found if req.name == "setuptools")


def _backend_floor() -> Version:
    """The lowest setuptools ``[build-system] requires`` admits (its ``>=`` bound)."""
    floors = [Version(spec.version) for spec in _backend_requirement().specifier if spec.operator == ">="]
    assert floors, f"[build-system] requires {_backend_requirement()}: no lower bound"
    return max(floors)


def _source_files() -> list[str]:
    """Every file of the three packages, as a path inside the wheel: what a run may import or open."""
    return sorted(
        path.relative_to(ROOT).as_posix()
        for package in PACKAGES
        for path in (ROOT / package).rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    )


def _copy_build_context(dest: Path) -> Path:
    """What deploy/Dockerfile copies before ``pip install .``; a copy so the build's ``build/`` and
    ``*.egg-info`` land outside the checkout (and a stale ``build/lib`` there cannot leak in)."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, dest / name)
    for package in PACKAGES:
        shutil.copytree(ROOT / package, dest / package, ignore=ignore)
    return dest


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's wheel, built offline with the installed setuptools at the declared floor or newer."""
    if importlib.util.find_spec("setuptools") is None:
        pytest.skip("setuptools, the build backend, is not importable here")
    installed = Version(metadata.version("setuptools"))
    if installed not in _backend_requirement().specifier:
        pytest.skip(f"setuptools {installed} here; the build needs {_backend_requirement()} (the dev extra)")
    source = _copy_build_context(tmp_path_factory.mktemp("context"))
    out = tmp_path_factory.mktemp("dist")
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index"]
    done = subprocess.run([*command, "-w", str(out), str(source)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (built,) = out.glob("rollout_scheduler-*.whl")
    return built


def test_the_build_backend_floor_accepts_the_license_as_an_spdx_expression() -> None:
    """``license = "Apache-2.0"`` is a PEP 639 expression; ``setuptools>=69`` let setuptools 69 to 76
    build, and each refused the project's metadata (checked with 69.5.1 and 76.1.0; 77.0.3 builds)."""
    assert isinstance(PYPROJECT["project"]["license"], str)
    assert _backend_floor() >= SPDX_LICENSE_SETUPTOOLS


def test_the_wheel_holds_every_file_of_the_packages_lua_scripts_and_py_typed_included(wheel: Path) -> None:
    listed = set(zipfile.ZipFile(wheel).namelist())
    missing = [name for name in _source_files() if name not in listed]
    assert not missing, f"not in {wheel.name}: {missing}"
    assert {f"{package}/py.typed" for package in PACKAGES} <= listed


def test_the_wheel_declares_the_console_script(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        (entry_points,) = [n for n in archive.namelist() if n.endswith(".dist-info/entry_points.txt")]
        text = archive.read(entry_points).decode()
    assert "rollout-scheduler = service.cli:main" in text


def test_the_unpacked_wheel_loads_every_delivery_script_outside_the_checkout(
    wheel: Path, tmp_path: Path
) -> None:
    """Imported from the unpacked wheel alone (``-P``: no current folder on sys.path; the editable
    install's finder comes after ``PYTHONPATH``), so the Lua files are read from the install."""
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    program = (
        "import service.delivery.scripts as s\n"
        f"assert s.__file__.startswith({str(site)!r}), s.__file__\n"
        "print(sum(len(s.script_source(op)) for op in s.OPERATIONS))\n"
    )
    env = {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-P", "-c", program], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout) > 0


def test_the_wheel_classifies_the_python_versions_requires_python_admits_from_its_floor(wheel: Path) -> None:
    """The classifiers an index shows agree with ``requires-python``: its floor is listed, none
    below it, and no License classifier beside the SPDX ``license`` (PEP 639 supersedes them)."""
    from email.parser import Parser

    from packaging.specifiers import SpecifierSet

    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        message = Parser().parsestr(archive.read(name).decode())
    classifiers = message.get_all("Classifier") or []
    prefix = "Programming Language :: Python :: "
    versions = [c.removeprefix(prefix) for c in classifiers if c.startswith(prefix) and c[-1].isdigit()]
    admitted = SpecifierSet(message["Requires-Python"])
    minors = [v for v in versions if "." in v]
    assert minors, f"no Python version among {classifiers}"
    assert all(v in admitted for v in minors), f"{minors} against Requires-Python {admitted}"
    floor = min((Version(s.version) for s in admitted if s.operator == ">="), default=None)
    assert floor is not None, f"Requires-Python {admitted}: no lower bound"
    assert f"{floor.major}.{floor.minor}" in minors
    assert not [c for c in classifiers if c.startswith("License ::")]
