"""The engines' own options in deploy/k8s: a vLLM that answers what the sidecar asks of it, started
the same way whatever its image's entrypoint, request logging silenced the way the pinned vLLM takes
it, and the optional model cache (deploy/k8s/optional) patching the worker StatefulSets into valid ones.

vLLM logs every request's prompt by default up to 0.10.0 (``--disable-log-requests`` silences it);
0.10.1 turned that default off, added ``--enable-log-requests`` and deprecated the old flag
(vllm-project/vllm#21739); vllm-project/vllm#29402 removed it (0.12), where ``vllm serve`` refuses it
and the engine never starts. No one flag is right for every version, so the flag follows the tag.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
import yaml
from kubernetes_validate.utils import validate

from tests.deploy.manifests import DOCS, K8S, VERSIONS, Doc, containers_of, find_one, pod_spec

WORKERS = [
    ("rollout-worker-h100", "vllm", "hf-cache"),
    ("rollout-worker-ascend", "vllm-ascend", "model-cache"),
]
OPTIONAL = K8S / "optional"
DEFAULT_OFF = (0, 10, 1)  # request logging off by default, --enable-log-requests added
TOKEN_IDS = (0, 10, 2)  # return_token_ids answered with the choice's token_ids (vllm-project/vllm#22587)
REMOVED = (0, 12, 0)  # --disable-log-requests refused


def vllm_version(image: str) -> tuple[int, int, int]:
    """The vLLM release an engine image carries, from its tag (``v0.8.5``, vllm-ascend's ``v0.8.5rc1``:
    vllm-ascend numbers its releases after the vLLM they run on)."""
    found = re.search(r":v?(\d+)\.(\d+)\.(\d+)", image)
    assert found, f"an engine image pinned to a release: {image}"
    major, minor, patch = (int(part) for part in found.groups())
    return major, minor, patch


def request_logging_problem(engine: Doc) -> str | None:
    """Why the engine's request logging options do not fit its vLLM, or None when they do: before
    0.10.1 it needs ``--disable-log-requests`` (every prompt in the pod's log otherwise); from 0.10.1
    it needs nothing, and the deprecated flag is refused from 0.12."""
    words = {word.split("=", 1)[0] for word in [*engine.get("command", []), *engine.get("args", [])]}
    version = vllm_version(engine["image"])
    if "--enable-log-requests" in words:
        return "--enable-log-requests logs every prompt"
    if version < DEFAULT_OFF and "--disable-log-requests" not in words:
        return f"vLLM {version} logs every prompt without --disable-log-requests"
    if version >= DEFAULT_OFF and "--disable-log-requests" in words:
        return f"vLLM {version} no longer needs --disable-log-requests (refused from {REMOVED})"
    return None


@pytest.mark.parametrize(("statefulset", "engine", "cache"), WORKERS)
def test_the_pinned_engines_answer_the_token_ids_the_sidecar_forwards(
    statefulset: str, engine: str, cache: str
) -> None:
    """An RL trainer asks for the sampled tokens (``return_token_ids``, docs/sidecar.md); a vLLM before
    0.10.2 ignores the field and answers text alone, so the trainer re-tokenizes, which does not always
    give the sampled tokens back."""
    image = containers_of(find_one("StatefulSet", statefulset))[engine]["image"]
    assert vllm_version(image) >= TOKEN_IDS, image


@pytest.mark.parametrize(("statefulset", "engine", "cache"), WORKERS)
def test_each_engine_is_started_as_vllm_serve_of_its_model_whatever_its_image_entrypoint(
    statefulset: str, engine: str, cache: str
) -> None:
    """vllm/vllm-openai's entrypoint was the API server module (0.8.5) and later ``vllm serve``, which
    refused a ``--model`` flag (vllm-project/vllm#16691, #17944) and since warns it will go: args
    written for one entrypoint break on an image bump. Naming the command keeps one form for all."""
    container = containers_of(find_one("StatefulSet", statefulset))[engine]
    command = container.get("command", [])
    assert command[:2] == ["vllm", "serve"], command
    assert len(command) == 3, f"the model, and only it, follows vllm serve: {command}"
    assert not any(word.split("=", 1)[0] == "--model" for word in container.get("args", []))


@pytest.mark.parametrize(("statefulset", "engine", "cache"), WORKERS)
def test_an_engine_whose_health_fails_for_a_minute_is_restarted_not_left_unready_for_good(
    statefulset: str, engine: str, cache: str
) -> None:
    """vLLM's ``/health`` answers 5xx once its engine core died, and nothing when the server hangs;
    the process may live on. Readiness alone leaves such a pod unready for ever: its sidecar stops
    claiming and the worker is lost until someone deletes the pod. Liveness restarts it, after the
    startup probe let the model load, and not for the slow answers of a server busy with a batch."""
    container = containers_of(find_one("StatefulSet", statefulset))[engine]
    ports = {port["name"] for port in container["ports"]}
    live = container.get("livenessProbe")
    assert live is not None, f"{engine}: a dead engine is never restarted"
    assert live["httpGet"]["path"] == "/health"
    assert live["httpGet"]["port"] in ports
    assert live["periodSeconds"] * live["failureThreshold"] >= 60
    assert live["timeoutSeconds"] >= 3
    assert container["readinessProbe"].get("timeoutSeconds", 1) >= 3
    startup = container["startupProbe"]  # liveness waits for it: a model load is minutes
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 600


@pytest.mark.parametrize(("statefulset", "engine", "cache"), WORKERS)
def test_each_engine_silences_request_logging_as_its_pinned_vllm_takes_it(
    statefulset: str, engine: str, cache: str
) -> None:
    assert request_logging_problem(containers_of(find_one("StatefulSet", statefulset))[engine]) is None


@pytest.mark.parametrize(
    ("image", "args", "problem"),
    [
        ("vllm/vllm-openai:v0.8.5", [], "logs every prompt without --disable-log-requests"),
        ("vllm/vllm-openai:v0.12.0", ["--disable-log-requests"], "no longer needs --disable-log-requests"),
        ("quay.io/ascend/vllm-ascend:v0.10.1rc1", ["--disable-log-requests"], "no longer needs"),
        ("vllm/vllm-openai:v0.11.0", ["--enable-log-requests"], "logs every prompt"),
    ],
)
def test_bumping_an_engine_image_without_its_logging_flag_is_caught(
    image: str, args: list[str], problem: str
) -> None:
    engine = {"image": image, "args": ["--port=8001", *args]}
    assert problem in (request_logging_problem(engine) or "")


@pytest.mark.parametrize(
    ("image", "args"), [("vllm/vllm-openai:v0.10.1", []), ("vllm/vllm-openai:v0.12.0", [])]
)
def test_from_vllm_0_10_1_an_engine_needs_no_logging_flag(image: str, args: list[str]) -> None:
    assert request_logging_problem({"image": image, "args": args}) is None


def _load(name: str) -> Doc:
    doc: Doc = yaml.safe_load((OPTIONAL / name).read_text())
    return doc


def _merge(base: Any, patch: Any) -> Any:
    """``kubectl patch``'s strategic merge, as far as these patches use it: maps merge key by key, a
    null deletes its key, and a list of named items (volumes) merges item by item on ``name``."""
    if isinstance(base, dict) and isinstance(patch, dict):
        merged = dict(base)
        for key, value in patch.items():
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = _merge(base.get(key), value)
        return merged
    if isinstance(base, list) and isinstance(patch, list) and all("name" in item for item in patch):
        by_name = {item["name"]: item for item in patch}
        merged_list = [
            _merge(item, by_name.pop(item["name"])) if item["name"] in by_name else item for item in base
        ]
        return merged_list + list(by_name.values())
    return patch


def _patched(statefulset: str) -> Doc:
    kind = statefulset.removeprefix("rollout-worker-")
    patched: Doc = _merge(
        copy.deepcopy(find_one("StatefulSet", statefulset)), _load(f"model-cache-{kind}.patch.yaml")
    )
    return patched


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(("statefulset", "engine", "cache"), WORKERS)
def test_the_model_cache_patch_gives_a_valid_statefulset(
    statefulset: str, engine: str, cache: str, version: str
) -> None:
    validate(_patched(statefulset), version, strict=True)
    validate(_load("model-cache.yaml"), version, strict=True)


@pytest.mark.parametrize(("statefulset", "engine", "cache"), WORKERS)
def test_the_model_cache_patch_puts_the_engines_cache_on_the_shared_claim(
    statefulset: str, engine: str, cache: str
) -> None:
    """The patch replaces the volume the engine mounts, not a new one beside it (a renamed volume
    would have left the engine on its emptyDir), and names the claim model-cache.yaml creates."""
    patched = _patched(statefulset)
    volumes = {volume["name"]: volume for volume in pod_spec(patched)["volumes"]}
    assert set(volumes) == {
        volume["name"] for volume in pod_spec(find_one("StatefulSet", statefulset))["volumes"]
    }
    assert volumes[cache] == {
        "name": cache,
        "persistentVolumeClaim": {"claimName": "rollout-worker-model-cache"},
    }
    assert cache in {mount["name"] for mount in containers_of(patched)[engine]["volumeMounts"]}
    claim = _load("model-cache.yaml")
    assert claim["metadata"]["name"] == "rollout-worker-model-cache"
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]  # one claim for every worker pod


@pytest.mark.parametrize(("statefulset", "engine", "cache"), WORKERS)
def test_without_the_optional_patch_a_worker_needs_no_claim(
    statefulset: str, engine: str, cache: str
) -> None:
    volumes = {volume["name"]: volume for volume in pod_spec(find_one("StatefulSet", statefulset))["volumes"]}
    assert volumes[cache] == {"name": cache, "emptyDir": {}}


def test_the_optional_folder_is_not_applied_with_the_manifests() -> None:
    """``kubectl apply -f deploy/k8s/`` reads that folder's own files only (no ``-R``): the claim and
    the patches stay opt-in, and a patch (no kind) never reaches the API server as a manifest."""
    assert "rollout-worker-model-cache" not in {doc["metadata"]["name"] for _, doc in DOCS}
    assert sorted(path.name for path in OPTIONAL.glob("*.yaml")) == [
        "model-cache-ascend.patch.yaml",
        "model-cache-h100.patch.yaml",
        "model-cache.yaml",
    ]
