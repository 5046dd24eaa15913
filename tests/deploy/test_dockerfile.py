"""deploy/Dockerfile, checked by reading it: this machine has a Docker client but no engine to build with.

What would break the build or the running container is checked here instead: every path it copies exists
and is not cut from the build context by .dockerignore; the packages' data files (Lua scripts) reach the
installed image; dependencies are pinned for the image's Python; the image runs the console script as a
non-root user and has a health check.
"""

from __future__ import annotations

import re
import runpy
import tomllib
from importlib import metadata
from pathlib import Path
from urllib.parse import urlsplit

import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from tests.deploy.cliargs import parse_cli
from tests.deploy.dockerfile import DockerIgnore, Instruction, read_dockerfile, stages
from tests.deploy.manifests import IMAGE, pod_spec, serve_startup_window_s, workloads
from tests.deploy.pins import CONSTRAINTS, read_pins

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
INSTRUCTIONS = read_dockerfile(DOCKERFILE)
FINAL = stages(INSTRUCTIONS)[-1]
DEV_TOOLS = {"pytest", "mypy", "ruff", "hypothesis", "kubernetes-validate", "pyyaml"}


def _one(stage: list[Instruction], keyword: str) -> Instruction:
    found = [ins for ins in stage if ins.keyword == keyword]
    assert len(found) == 1, f"expected one {keyword}, found {len(found)}"
    return found[0]


def _context_copies() -> list[tuple[str, str]]:
    """(source, destination) of every COPY that reads the build context (not another stage)."""
    pairs: list[tuple[str, str]] = []
    for ins in INSTRUCTIONS:
        if ins.keyword in {"COPY", "ADD"} and not any(f.startswith("--from") for f in ins.flags):
            pairs.extend((source, ins.args[-1]) for source in ins.args[:-1])
    return pairs


def test_the_build_is_multi_stage_and_the_runtime_only_takes_the_built_venv() -> None:
    assert len(stages(INSTRUCTIONS)) >= 2
    from_build = [ins for ins in FINAL if ins.keyword == "COPY" and ins.flags]
    assert [ins.args for ins in from_build] == [("/opt/venv", "/opt/venv")]


def test_every_copied_path_exists_and_is_in_the_build_context() -> None:
    ignore = DockerIgnore.read(ROOT / ".dockerignore")
    copies = _context_copies()
    assert copies
    for source, _ in copies:
        assert (ROOT / source).exists(), f"COPY {source}: no such path"
        assert not ignore.ignores(source), f"COPY {source}: cut by .dockerignore"


def test_the_build_context_leaves_out_local_state_but_keeps_every_package_file() -> None:
    ignore = DockerIgnore.read(ROOT / ".dockerignore")
    for local in (".venv", ".git", ".mypy_cache", "tests", "service/__pycache__/cli.cpython-311.pyc"):
        assert ignore.ignores(local), local
    for package in ("scheduler", "predictors", "service"):
        for path in (ROOT / package).rglob("*"):
            rel = path.relative_to(ROOT).as_posix()
            if path.is_file() and "__pycache__" not in rel:
                assert not ignore.ignores(rel), rel


def test_every_data_file_of_a_package_is_declared_so_the_installed_image_has_it() -> None:
    declared: dict[str, list[str]] = PYPROJECT["tool"]["setuptools"]["package-data"]
    for package in ("scheduler", "predictors", "service"):
        for path in (ROOT / package).rglob("*"):
            if not path.is_file() or path.suffix in {".py", ".pyc"} or "__pycache__" in path.parts:
                continue
            owner = next(p for p in path.parents if (p / "__init__.py").is_file())
            name = owner.relative_to(ROOT).as_posix().replace("/", ".")
            rel = path.relative_to(owner).as_posix()
            patterns = declared.get(name, [])
            assert any(Path(rel).match(pattern) for pattern in patterns), (
                f"{path.relative_to(ROOT)} would be missing from the installed package: add it to "
                f'[tool.setuptools.package-data] "{name}"'
            )


def test_the_entrypoint_is_the_console_script_and_the_default_command_is_serve() -> None:
    entrypoint = _one(FINAL, "ENTRYPOINT").args
    assert entrypoint == ("rollout-scheduler",)
    assert entrypoint[0] in PYPROJECT["project"]["scripts"]
    cmd = _one(FINAL, "CMD").args
    assert parse_cli(cmd).info_name == "serve"


def test_the_image_runs_as_a_numeric_non_root_user() -> None:
    user = _one(FINAL, "USER").args[0]
    uid = user.split(":")[0]
    assert uid.isdigit(), "numeric, so runAsNonRoot can verify it"
    assert int(uid) != 0


def test_the_health_check_runs_a_script_the_image_contains() -> None:
    check = _one(FINAL, "HEALTHCHECK").args
    assert check[0] == "CMD"
    script = next(arg for arg in check if arg.endswith(".py"))
    assert script in {dest for _, dest in _context_copies()}


def test_the_health_check_lets_serve_load_its_history_as_the_k8s_startup_probe_does() -> None:
    """``serve`` answers nothing while it loads the actuals history (~45 s at the 2 M-row default,
    docs/operations.md); failures inside ``--start-period`` do not count, so a shorter period marks a
    starting service unhealthy (and an orchestrator that acts on it, Swarm, restarts it mid-load)."""
    flags = dict(flag[2:].split("=", 1) for flag in _one(FINAL, "HEALTHCHECK").flags)
    period = re.fullmatch(r"(\d+)s", flags["start-period"])
    assert period, flags["start-period"]
    assert int(period.group(1)) >= serve_startup_window_s()


def test_the_base_image_python_is_the_one_the_pins_were_made_with() -> None:
    base = _one(INSTRUCTIONS, "ARG").args[0]
    image_python = re.search(r"python:(\d+\.\d+)", base)
    made_with = re.search(r"python=(\d+\.\d+)", CONSTRAINTS.read_text())
    assert image_python
    assert made_with
    assert image_python.group(1) == made_with.group(1)
    assert image_python.group(1) + ".0" in SpecifierSet(PYPROJECT["project"]["requires-python"])


def test_every_runtime_dependency_is_pinned_within_its_declared_range_and_no_dev_tool_is() -> None:
    pins = read_pins()
    for text in PYPROJECT["project"]["dependencies"]:
        req = Requirement(text)
        name = canonicalize_name(req.name)
        assert name in pins, f"{name} is not pinned"
        assert req.specifier.contains(pins[name], prereleases=True), (name, pins[name], str(req.specifier))
    assert not DEV_TOOLS & set(pins)


def test_the_pins_are_closed_under_their_own_requirements() -> None:
    """Each pinned package installed here at its pinned version has all its requirements pinned too.

    The image installs the pins and then the project with ``--no-deps``; a missing requirement would
    only fail at ``pip check`` in the image build. Packages installed here at another version cannot be
    checked from this venv and are skipped here; test_constraints_in_step fails on them (regenerate with
    deploy/pin_constraints.py).
    """
    pins = read_pins()
    checked = 0
    for name, version in pins.items():
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        if dist.version != version:
            continue
        checked += 1
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                assert canonicalize_name(req.name) in pins, f"{name} needs {req.name}, which is not pinned"
    assert checked, "no pinned package is installed here at its pin; regenerate the pins"


def _created_dirs() -> set[str]:
    """Directories the runtime stage creates (the operands of ``mkdir -p`` in its RUN steps)."""
    created: set[str] = set()
    for ins in FINAL:
        if ins.keyword != "RUN":
            continue
        words = list(ins.args)
        for i in range(len(words) - 1):
            if words[i : i + 2] == ["mkdir", "-p"]:
                rest = words[i + 2 :]
                created.update(rest[: rest.index("&&")] if "&&" in rest else rest)
    return created


def test_every_volume_our_containers_mount_exists_in_the_image_owned_by_its_user() -> None:
    """A named volume on a path the image lacks is created root-owned: the non-root user could not write."""
    compose = yaml.safe_load((ROOT / "deploy" / "compose.yaml").read_text())
    targets = {
        volume.split(":")[1]
        for svc in compose["services"].values()
        if svc["image"].startswith("rollout-scheduler:")
        for volume in svc.get("volumes", [])
    }
    assert targets
    created = _created_dirs()
    chowned = " ".join(" ".join(ins.args) for ins in FINAL if ins.keyword == "RUN")
    for target in targets:
        assert target in created, f"{target} is not created in the image"
        owners = [p for p in (Path(target), *Path(target).parents) if f"rollout:rollout {p}" in chowned]
        assert owners, f"{target} is not chowned to the image user"
    # and no VOLUME: Docker would give every container of the image (engines, sidecars) an anonymous one
    assert not [ins for ins in FINAL if ins.keyword == "VOLUME"]


def _image_env() -> dict[str, str]:
    """The variables the runtime stage's ``ENV`` sets."""
    words = [word for ins in FINAL if ins.keyword == "ENV" for word in ins.args]
    return dict(word.split("=", 1) for word in words)


def test_the_image_s_default_health_check_probes_serve_s_liveness_on_its_command_s_port() -> None:
    """A container of the image run as is (``docker run``, or a compose service that sets no
    ``HEALTHCHECK_URL``) is checked at the default URL: another port or path and the service is
    reported unhealthy however well it serves. The script's own fallback is the same URL."""
    from service.api.health import router

    port = parse_cli(_one(FINAL, "CMD").args).params["port"]
    url = _image_env()["HEALTHCHECK_URL"]
    parts = urlsplit(url)
    assert (parts.hostname, parts.port) == ("127.0.0.1", port)
    assert parts.path == "/healthz", "liveness, which never waits on Redis"
    assert parts.path in {getattr(route, "path", None) for route in router.routes}
    assert runpy.run_path(str(ROOT / "deploy" / "healthcheck.py"))["DEFAULT_URL"] == url
    assert _one(FINAL, "EXPOSE").args == (str(port),)


def test_the_build_command_and_every_container_of_ours_use_the_project_version_as_the_image_tag() -> None:
    """The build commands the Dockerfile and docs/operations.md give tag the image, and compose and the
    manifests run it by that tag: a version bump that misses one runs the previous image there
    (``IfNotPresent`` takes whatever a node already holds under the old tag)."""
    tag = f"{IMAGE}{PYPROJECT['project']['version']}"
    texts = [DOCKERFILE.read_text(), (ROOT / "docs" / "operations.md").read_text()]
    built = [re.findall(r"docker build .*?-t (\S+?)`? ", text) for text in texts]
    assert all(built), "each gives the build command"
    compose = yaml.safe_load((ROOT / "deploy" / "compose.yaml").read_text())["services"].values()
    run = {svc["image"] for svc in compose if svc["image"].startswith(IMAGE)}
    pods = [pod_spec(doc)["containers"] for doc in workloads()]
    run |= {c["image"] for containers in pods for c in containers if c["image"].startswith(IMAGE)}
    assert {found for tags in built for found in tags} | run == {tag}
