"""deploy/ walked as a new operator reads it: each probe reaches a route its process serves, each variable
a compose container of our image gets is one its process reads, and each page a deploy file sends the
reader to has the section it names (user65, docs/experiments.md).

The Kubernetes manifests' variables and the service's probes have their checks (test_k8s_crosschecks,
test_k8s_manifests); a compose container's variables, the probe paths of the engines and the sidecars,
and the deploy files' own references to the docs had none: a misspelt variable on a sidecar is read by
nothing and ignored without a word (only ``serve`` warns of one), a probe of a path the process does
not serve restarts it for ever, and ``deploy/k8s/optional/model-cache.yaml`` sent the reader to
``docs/operations.md, "Engine model cache"``, a paragraph no heading or lead began.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from service.delivery.acl import DEFAULT_PASSWORD_ENV, ROLES
from service.settings import Settings
from tests.deploy.cliargs import option_envvars, parse_cli
from tests.deploy.dockerfile import read_dockerfile, stages
from tests.deploy.manifests import IMAGE, containers_of, find_one, pod_spec, workloads
from tests.deploy.test_compose import COMPOSE, _resolved
from tests.doc_refs import ROOT
from tests.test_doc_sections import _CONTINUATION, _QUOTED, _REFERENCE, Reference, _broken

HEALTH_CHECK_VARIABLES = frozenset({"HEALTHCHECK_URL", "HEALTHCHECK_TIMEOUT_S"})  # deploy/healthcheck.py's
PROBES = ("startupProbe", "readinessProbe", "livenessProbe")


def _compose_services() -> dict[str, dict[str, Any]]:
    """compose's services of our image, defaults applied as a fresh ``up`` would."""
    services: dict[str, dict[str, Any]] = _resolved(yaml.safe_load(COMPOSE.read_text())["services"])
    return {name: svc for name, svc in services.items() if svc["image"].startswith(IMAGE)}


def _serves(args: list[str], path: str) -> bool:
    """Whether the process ``rollout-scheduler <args>`` runs answers ``GET path`` with a route of its
    own (its status aside: a sidecar still connecting is alive, not ready)."""
    if args[0] == "serve":
        from service.api.health import router

        return path in {getattr(route, "path", None) for route in router.routes}
    if args[0] == "engine-sim":
        from service.engine_sim.app import build_config, create_app

        app = create_app(build_config(parse_cli(args).params["device"]))
        return path in {getattr(route, "path", None) for route in app.routes}
    if args[0] == "sidecar":
        from service.sidecar.health import Probes

        return Probes(None, "w").get(path).status != 404
    raise AssertionError(f"no probe expected of {args[0]}")


def _read_by(args: list[str]) -> set[str]:
    """The variables ``rollout-scheduler <args>`` reads: serve's settings, the CLI options' ``envvar``,
    and ``redis-acl``'s passwords (read from the environment, not by an option)."""
    if args[0] == "serve":
        return {f"ROLLOUT_{name.upper()}" for name in Settings.model_fields} | {"REDIS_URL"}
    read = {name for param in parse_cli(args).command.params for name in option_envvars(param)}
    if args[0] == "redis-acl":
        read |= {role.password_env for role in ROLES} | {DEFAULT_PASSWORD_ENV}
    return read


@pytest.mark.parametrize("name", sorted(_compose_services()))
def test_each_compose_health_check_reaches_a_route_its_process_serves(name: str) -> None:
    """The port is checked already (test_compose): the path too, or the container is unhealthy however
    well it serves, and everything that ``depends_on`` it never starts."""
    svc = _compose_services()[name]
    url = svc.get("environment", {}).get("HEALTHCHECK_URL")
    if svc["healthcheck"]["test"] == ["NONE"]:
        return  # a one-shot: nothing to probe
    assert url is not None, f"{name} would probe the image's default, serve's port"
    assert _serves(svc["command"], urlsplit(url).path), (name, url)


def test_each_kubernetes_probe_of_our_image_reaches_a_route_its_process_serves() -> None:
    """The service's probes have their check (test_k8s_manifests); the sidecars' ``/health`` and
    ``/ready`` were compared with the same words written in the test, not with what the sidecar
    answers."""
    probed = 0
    for doc in workloads():
        for container in pod_spec(doc)["containers"]:
            if not container["image"].startswith(IMAGE):
                continue
            for kind in PROBES:
                if kind in container:
                    path = container[kind]["httpGet"]["path"]
                    assert _serves(container["args"], path), (
                        doc["metadata"]["name"],
                        container["name"],
                        kind,
                    )
                    probed += 1
    sidecars = sum("sidecar" in containers_of(doc) for doc in workloads())
    assert probed >= 3 + 2 * sidecars  # the service's three, two per sidecar


@pytest.mark.parametrize("name", sorted(_compose_services()))
def test_every_variable_a_compose_container_of_our_image_gets_is_read_by_something(name: str) -> None:
    """As the manifests' (test_k8s_crosschecks): a variable nobody reads is a setting the user
    believes in that the process never saw. The image's health check reads its own two."""
    svc = _compose_services()[name]
    given = set(svc.get("environment", {}))
    unread = given - _read_by(svc["command"]) - HEALTH_CHECK_VARIABLES
    assert not unread, f"{name}: nothing reads {sorted(unread)}"


def test_a_variable_nothing_reads_is_caught() -> None:
    assert "ROLLOUT_REDIS_USER" not in _read_by(["sidecar", "--worker-id", "w", "--engine-url", "http://e:1"])
    assert "ROLLOUT_ACL_SIDECAR_PASSWORD" in _read_by(["redis-acl"])


def test_each_setting_the_image_sets_is_a_setting_and_the_deploy_files_give_it_the_same_value() -> None:
    """The image's ``ENV`` reaches every container of it (``ROLLOUT_MODEL_DIR``, the store the image
    creates for its user): a name serve does not read is one the operator trusts in vain, and a compose
    file or ConfigMap that moved the store elsewhere would write to a folder the user may not own."""
    final = stages(read_dockerfile(ROOT / "deploy" / "Dockerfile"))[-1]
    words = [word for ins in final if ins.keyword == "ENV" for word in ins.args]
    settings = {k: v for k, v in (word.split("=", 1) for word in words) if k.startswith("ROLLOUT_")}
    assert settings, "the image sets its model store"
    assert set(settings) <= _read_by(["serve"])
    configmap = find_one("ConfigMap", "rollout-scheduler")["data"]
    compose = _compose_services()["scheduler"]["environment"]
    for name, value in settings.items():
        assert configmap.get(name, value) == value, name
        assert compose.get(name, value) == value, name


def _deploy_references() -> tuple[Reference, ...]:
    """Each ``docs/<page>.md, "Section"`` the files under deploy/ name (comments and prose alike)."""
    found: list[Reference] = []
    for path in sorted(p for p in (ROOT / "deploy").rglob("*") if p.is_file()):
        text = _CONTINUATION.sub(" ", path.read_text())
        for match in _REFERENCE.finditer(text):
            page, first, last, section, names = match.groups()
            steps = (int(first) if first else None, int(last) if last else None)
            found.append((str(path.relative_to(ROOT)), page, *steps, section, tuple(_QUOTED.findall(names))))
    return tuple(found)


def test_every_docs_section_a_deploy_file_names_is_on_its_page() -> None:
    """test_doc_sections holds the docs and the modules to the rule; the deploy files, which an
    operator reads first, were not read by it."""
    references = _deploy_references()
    assert len([names for *_, names in references if names]) > 10
    assert _broken(references) == []
