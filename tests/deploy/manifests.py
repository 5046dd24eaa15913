"""deploy/k8s read as the kubelet would see it: the documents, their pods, and each container's variables.

Shared by the manifest tests, which check the files against each other and against the code; nothing
here talks to a cluster.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

K8S = Path(__file__).resolve().parents[2] / "deploy" / "k8s"
IMAGE = "rollout-scheduler:"  # our image, whatever the tag
VARIABLE = re.compile(r"\$\(([A-Z_][A-Z0-9_]*)\)")  # a $(VAR) the kubelet expands in args and env
# The Kubernetes releases each manifest must be valid for: the oldest whose API we rely on (preStop
# sleep: 1.30) and the newest with bundled schemas (the manifest and engine options tests).
VERSIONS = ("1.30.0", "1.37.0")
Doc = dict[str, Any]


def _load() -> list[tuple[str, Doc]]:
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                docs.append((f"{path.name}:{doc['kind']}/{doc['metadata']['name']}", doc))
    return docs


DOCS = _load()


def find_one(kind: str, name: str) -> Doc:
    """The one document of ``kind`` named ``name``; fails the test when there is not exactly one."""
    found = [doc for _, doc in DOCS if doc["kind"] == kind and doc["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}"
    return found[0]


def pod_spec(doc: Doc) -> Doc:
    """The pod template's spec of a Deployment or StatefulSet."""
    spec: Doc = doc["spec"]["template"]["spec"]
    return spec


def containers_of(doc: Doc) -> dict[str, Doc]:
    """A workload's containers by name."""
    return {c["name"]: c for c in pod_spec(doc)["containers"]}


def workloads() -> list[Doc]:
    """Every document that runs pods."""
    return [doc for _, doc in DOCS if doc["kind"] in {"Deployment", "StatefulSet"}]


def container_env(container: Doc) -> set[str]:
    """The names of the variables a container gets: its ``env`` and every key of its ``envFrom`` maps."""
    names = {var["name"] for var in container.get("env", [])}
    for ref in container.get("envFrom", []):
        names |= set(find_one("ConfigMap", ref["configMapRef"]["name"])["data"])
    return names


def expanded_variables(container: Doc) -> set[str]:
    """The variables the kubelet substitutes into the container's args and ``env`` values."""
    texts = [*container.get("args", []), *(v.get("value", "") for v in container.get("env", []))]
    return {name for text in texts for name in VARIABLE.findall(text)}


def engine_flags(container: Doc) -> dict[str, str]:
    """An engine container's ``--name=value`` flags (vLLM's own, not our CLI's), by name without dashes."""
    words = [*container.get("command", []), *container.get("args", [])]
    return dict(word[2:].split("=", 1) for word in words if word.startswith("--") and "=" in word)


def container_environment(
    container: Doc, secret: Mapping[str, str], fields: Mapping[str, str] | None = None
) -> dict[str, str]:
    """A container's environment as the kubelet builds it: its ConfigMaps, then ``env`` in order,
    ``$(VAR)`` expanded; ``secret`` stands in for the Secret's keys, ``fields`` for the pod's
    fields (``metadata.name``)."""
    env: dict[str, str] = {}
    for ref in container.get("envFrom", []):
        env.update(find_one("ConfigMap", ref["configMapRef"]["name"])["data"])
    for var in container.get("env", []):
        source = var.get("valueFrom", {})
        if "value" in var:
            env[var["name"]] = expand(var["value"], env)
        elif "secretKeyRef" in source:
            env[var["name"]] = secret[source["secretKeyRef"]["key"]]
        else:
            env[var["name"]] = (fields or {})[source["fieldRef"]["fieldPath"]]
    return env


def expand(text: str, env: Mapping[str, str]) -> str:
    """``text`` with each ``$(VAR)`` replaced by its value in ``env``, as the kubelet does."""
    return VARIABLE.sub(lambda match: env[match.group(1)], text)


def expanded_args(container: Doc, env: Mapping[str, str]) -> list[str]:
    """The container's args as its process receives them."""
    args: Sequence[str] = container["args"]
    return [expand(arg, env) for arg in args]


def serve_startup_window_s() -> int:
    """How long Kubernetes lets ``serve`` start (load the predictor history) before liveness counts.

    The image's HEALTHCHECK and compose's ``start_period`` must each give it as long (the Dockerfile
    and compose tests).
    """
    probe = containers_of(find_one("Deployment", "rollout-scheduler"))["service"]["startupProbe"]
    return int(probe["periodSeconds"]) * int(probe["failureThreshold"])
