"""deploy/k8s against the code and the engines beside it: what a schema check cannot see.

Each test names a way a valid manifest still goes wrong on the day it is applied: a variable nobody
reads, a secret in a ConfigMap, a sidecar that believes its engine holds more than it does, a
re-apply that scales the service back down, a node drain that takes most replicas at once.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from scheduler.devices import device_profile
from service.delivery.acl import SERVICE, SIDECAR
from service.settings import SIDECAR_ONLY_VARIABLES, Settings
from tests.deploy.cliargs import option_envvars, parse_cli
from tests.deploy.fleetsettings import clear_settings, not_the_default, serve_settings, undecided
from tests.deploy.manifests import (
    DOCS,
    IMAGE,
    K8S,
    Doc,
    container_env,
    container_environment,
    containers_of,
    engine_flags,
    expanded_args,
    expanded_variables,
    find_one,
    pod_spec,
    workloads,
)

WORKERS = [("rollout-worker-h100", "vllm"), ("rollout-worker-ascend", "vllm-ascend")]
# Variables the image's libraries read, not our code: matplotlib's cache folder (the root is read-only).
LIBRARY_VARIABLES = frozenset({"MPLCONFIGDIR"})


def _read_by(args: list[str]) -> set[str]:
    """The variables the command ``args`` runs reads: serve's settings, or the CLI options' ``envvar``."""
    if args[0] == "serve":
        return _settings_variables()
    return {name for param in parse_cli(args).command.params for name in option_envvars(param)}


def _settings_variables() -> set[str]:
    names = {f"ROLLOUT_{name.upper()}" for name in Settings.model_fields}
    return names | {"REDIS_URL"}  # the one setting outside the prefix (service/settings.py)


def _secret_variables() -> set[str]:
    """Variables that carry a credential: the service's ``SecretStr`` settings and the sidecar's own."""
    fields = Settings.model_fields.items()
    secret = {f"ROLLOUT_{name.upper()}" for name, field in fields if "SecretStr" in str(field.annotation)}
    return secret | SIDECAR_ONLY_VARIABLES


def _ours() -> list[Doc]:
    return [c for doc in workloads() for c in pod_spec(doc)["containers"] if c["image"].startswith(IMAGE)]


def test_every_variable_a_container_of_our_image_gets_is_read_by_something() -> None:
    """A variable nobody reads is a setting the operator believes in and the process never saw. The
    sidecars share the service's ConfigMap, so a service setting reaching a sidecar is expected."""
    for container in _ours():
        read = _read_by(container["args"]) | expanded_variables(container) | LIBRARY_VARIABLES
        if container["args"][0] == "sidecar":
            read |= _settings_variables()
        assert container_env(container) <= read, (container["name"], container_env(container) - read)


@pytest.mark.parametrize("statefulset", [statefulset for statefulset, _ in WORKERS])
def test_a_configmap_setting_the_sidecar_has_a_flag_for_reaches_that_flag(statefulset: str) -> None:
    """``ROLLOUT_LOG_LEVEL=DEBUG`` in the shared ConfigMap must debug the sidecars too, as
    ``ROLLOUT_REDIS_CLUSTER`` switches them: a flag of the same name that ignores it leaves the
    operator reading INFO lines from the very processes they meant to debug."""
    sidecar = containers_of(find_one("StatefulSet", statefulset))["sidecar"]
    params = {param.name: param for param in parse_cli(sidecar["args"]).command.params}
    given = {name for name in container_env(sidecar) if name.startswith("ROLLOUT_")}
    for name in given:
        param = params.get(name.removeprefix("ROLLOUT_").lower())
        if param is not None:
            assert name in option_envvars(param), f"the sidecar's --{param.name} ignores {name}"


def test_the_configmap_log_level_sets_the_sidecar_log_level(monkeypatch: pytest.MonkeyPatch) -> None:
    sidecar = containers_of(find_one("StatefulSet", "rollout-worker-h100"))["sidecar"]
    monkeypatch.setenv("ROLLOUT_LOG_LEVEL", "DEBUG")
    assert parse_cli(sidecar["args"]).params["log_level"] == "DEBUG"


def test_no_credential_is_in_a_configmap_and_each_one_comes_from_the_secret() -> None:
    """ConfigMaps are readable by anyone who may read the namespace's configuration and land in
    ``kubectl describe`` output; a token or password there is published."""
    secret = _secret_variables()
    for _, doc in DOCS:
        if doc["kind"] != "ConfigMap":
            continue
        assert not set(doc["data"]) & secret, doc["metadata"]["name"]
        for key, value in doc["data"].items():
            assert not re.search(r"://[^/@\s]*@", value), f"{key}: a URL with credentials"
    for doc in workloads():
        for container in pod_spec(doc)["containers"]:
            for var in container.get("env", []):
                if var["name"] in secret:
                    assert "secretKeyRef" in var.get("valueFrom", {}), (container["name"], var["name"])


def _secret_key(container: Doc, variable: str) -> str | None:
    """The key of the Secret that ``variable`` comes from in ``container``; None if it is not given so."""
    for var in container.get("env", []):
        if var["name"] == variable:
            return str(var.get("valueFrom", {}).get("secretKeyRef", {}).get("key")) or None
    return None


@pytest.mark.parametrize(("statefulset", "engine"), WORKERS)
def test_an_engine_serves_only_callers_with_the_key_its_sidecar_sends(statefulset: str, engine: str) -> None:
    """The headless Service makes every engine's port reachable from any pod of the cluster: vLLM
    without ``--api-key`` would generate for any of them. Its key (``VLLM_API_KEY``, which guards
    ``/v1`` and leaves the probes' ``/health`` open) must be the one the sidecar sends, or every
    request of the sidecar is a 401."""
    containers = containers_of(find_one("StatefulSet", statefulset))
    engine_key = _secret_key(containers[engine], "VLLM_API_KEY")
    assert engine_key is not None, f"{engine} starts without an API key"
    assert _secret_key(containers["sidecar"], "ROLLOUT_ENGINE_API_KEY") == engine_key
    assert engine_key in find_one("Secret", "rollout-scheduler")["stringData"]


def _engine_model(engine: Doc) -> str:
    """The model id the engine serves: ``--model=`` or ``vllm serve MODEL``'s positional argument."""
    flags = engine_flags(engine)
    if "model" in flags:
        return flags["model"]
    command = engine["command"]
    return str(command[command.index("serve") + 1])


@pytest.mark.parametrize(("statefulset", "engine"), WORKERS)
def test_the_sidecar_believes_what_its_engine_was_started_with(statefulset: str, engine: str) -> None:
    """The sidecar keeps the engine at ``--max-num-seqs`` and plans KV admission on the capacity it
    derives from ``--device``, ``--model`` and ``--num-gpus`` at the profile's memory share. Each must
    be the engine's own: more slots than the engine has queue inside it, unseen by the plan; a larger
    KV budget than it allocated gets admitted work preempted."""
    containers = containers_of(find_one("StatefulSet", statefulset))
    params = parse_cli(containers["sidecar"]["args"]).params
    vllm = containers[engine]
    assert int(engine_flags(vllm).get("max-num-seqs", "256")) == params["max_num_seqs"]
    utilization = float(engine_flags(vllm).get("gpu-memory-utilization", "0.9"))
    assert utilization == device_profile(params["device"]).memory_utilization
    size = re.search(r"(\d+(?:\.\d+)?)B\b", _engine_model(vllm))
    assert size, _engine_model(vllm)
    assert f"{size.group(1)}b" == params["model"], (_engine_model(vllm), params["model"])
    devices = next(int(v) for k, v in vllm["resources"]["limits"].items() if "/" in k)
    assert int(engine_flags(vllm).get("tensor-parallel-size", "1")) == params["num_gpus"] == devices


def test_the_hpa_alone_sets_the_service_replica_count_so_a_re_apply_never_scales_it_down() -> None:
    """With ``spec.replicas`` in the Deployment, every ``kubectl apply`` of it (an image bump) resets
    the count the HPA chose: 8 replicas busy with a burst of trainers drop to 2 at once."""
    hpa = find_one("HorizontalPodAutoscaler", "rollout-scheduler")["spec"]["scaleTargetRef"]
    deployment = find_one(hpa["kind"], hpa["name"])
    assert "replicas" not in deployment["spec"]


def _evictable(pdb: Doc, replicas: int) -> int:
    """How many healthy pods of ``replicas`` the budget lets a drain evict at once (integers only)."""
    spec = pdb["spec"]
    if "maxUnavailable" in spec:
        return int(spec["maxUnavailable"])
    return replicas - int(spec["minAvailable"])


def test_a_drain_takes_one_service_replica_at_a_time_at_every_size_the_hpa_may_pick() -> None:
    """At least one, or a drain blocks for ever; at most one, or a node-pool upgrade while the HPA
    holds 8 replicas for a burst may leave one replica to plan for every trainer."""
    hpa = find_one("HorizontalPodAutoscaler", "rollout-scheduler")["spec"]
    pdb = find_one("PodDisruptionBudget", "rollout-scheduler")
    for replicas in range(hpa["minReplicas"], hpa["maxReplicas"] + 1):
        assert _evictable(pdb, replicas) == 1, f"{_evictable(pdb, replicas)} of {replicas} at once"


def test_a_drain_during_a_redis_outage_may_evict_the_replicas_it_made_unready() -> None:
    """Every replica is unready while Redis is down; under the default policy the budget then counts
    them all as disrupted and refuses each eviction, so a node drain would wait for Redis to return."""
    pdb = find_one("PodDisruptionBudget", "rollout-scheduler")["spec"]
    assert pdb.get("unhealthyPodEvictionPolicy") == "AlwaysAllow"


def test_no_pod_mounts_a_service_account_token_it_never_uses() -> None:
    """Neither the service, the sidecars nor the engines call the Kubernetes API; a token mounted
    anyway gives whoever takes over a pod (a prompt that exploits the engine, a bad dependency)
    whatever the namespace's default service account may do."""
    for doc in workloads():
        assert pod_spec(doc).get("automountServiceAccountToken") is False, doc["metadata"]["name"]


def test_every_container_of_our_image_runs_under_the_runtimes_default_seccomp_profile() -> None:
    """The restricted Pod Security Standard asks it of every container, beside non-root and no
    capabilities; the service sets it pod-wide, and the sidecars, whose pods the engines (root, the
    node's default profile) share, on their own container, or they run without any filter."""
    for doc in workloads():
        pod = pod_spec(doc)
        for container in _ours():
            if container not in pod["containers"]:
                continue
            context = {**pod.get("securityContext", {}), **container.get("securityContext", {})}
            assert context.get("seccompProfile") == {"type": "RuntimeDefault"}, container["name"]


def test_a_service_replica_plans_once_per_core_it_requests() -> None:
    """``ROLLOUT_MAX_CONCURRENT_PLANS`` above the CPU request makes every plan of a burst share the
    cores and miss its time budget; below it leaves requested cores idle while plans wait in line."""
    deployment = find_one("Deployment", "rollout-scheduler")
    service = containers_of(deployment)["service"]
    plans = int(find_one("ConfigMap", "rollout-scheduler")["data"]["ROLLOUT_MAX_CONCURRENT_PLANS"])
    assert float(service["resources"]["requests"]["cpu"]) == plans


def test_the_configmap_plans_a_request_naming_no_engine_for_the_engine_the_worker_pods_run() -> None:
    """Every worker pod runs vLLM 0.11 or later, where V1 is the only engine (an evicted sequence
    keeps its output), so ``vllm-v1``. Listed, not left to the default: an operator who swaps in a
    V0-like engine finds the setting beside the others the service plans by."""
    for statefulset, engine in WORKERS:
        image = containers_of(find_one("StatefulSet", statefulset))[engine]["image"]
        tag = re.search(r":v(\d+)\.(\d+)\.", image)
        assert tag, image
        assert (int(tag.group(1)), int(tag.group(2))) >= (0, 11), image
    assert find_one("ConfigMap", "rollout-scheduler")["data"].get("ROLLOUT_DEFAULT_ENGINE") == "vllm-v1"


def _service() -> Doc:
    return containers_of(find_one("Deployment", "rollout-scheduler"))["service"]


def test_the_configmap_decides_every_setting_of_the_service_or_says_why_it_leaves_one_out() -> None:
    """An operator tunes a fleet from the ConfigMap: a setting missing there is one they may not know
    exists (the plan queue's timeout, the retention that sizes Redis), and one added to the code later
    would reach every replica as a default nobody chose. The Secret's are set in the Deployment's env,
    the bind address by its args; a setting left out on purpose has a ``# not set:`` line saying why."""
    service = _service()
    text = (K8S / "configmap.yaml").read_text()
    assert undecided(container_env(service), service["args"], text) == []


def test_a_setting_neither_given_nor_explained_is_caught() -> None:
    service = _service()
    given = container_env(service) - {"ROLLOUT_DEFAULT_ENGINE"}
    text = (K8S / "configmap.yaml").read_text()
    assert undecided(given, service["args"], text) == ["ROLLOUT_DEFAULT_ENGINE"]


def test_a_setting_named_only_in_another_s_reason_is_not_explained() -> None:
    """A ``# not set:`` line explains the variables it lists before its reason, not every one its
    reason mentions: the reason may name a setting given elsewhere, or one taken out later."""
    service = _service()
    given = container_env(service) - {"ROLLOUT_DEFAULT_ENGINE"}
    text = (K8S / "configmap.yaml").read_text()
    text += "# not set: ROLLOUT_REDIS_USERNAME: unlike ROLLOUT_DEFAULT_ENGINE, no default fits\n"
    assert undecided(given, service["args"], text) == ["ROLLOUT_DEFAULT_ENGINE"]


def test_the_configmap_gives_each_setting_the_code_s_default_unless_it_says_why_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The ConfigMap reads as the defaults an operator may change: a default changed in the code (a
    longer plan budget, a larger history cap) must not stay pinned at its old value in every cluster
    that applies the file, unnoticed."""
    assert not_the_default(find_one("ConfigMap", "rollout-scheduler")["data"], monkeypatch) == {}


# Stand-ins for the Secret's keys: the placeholders themselves are refused by serve (the same token in
# both scopes), as test_k8s_manifests checks.
SECRET = {
    "trainer-tokens": "t" * 64,
    "worker-tokens": "w" * 64,
    "redis-service-password": "service-p@ss",
    "redis-sidecar-password": "sidecar-p@ss",
    "engine-api-key": "k",
}


@pytest.mark.parametrize("statefulset", [statefulset for statefulset, _ in WORKERS])
def test_each_sidecar_claims_from_the_redis_and_key_space_the_service_publishes_to(
    statefulset: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The sidecar is told its Redis by flag (``--redis-url``) and the rest by the ConfigMap and the
    Secret; the service by ``REDIS_URL`` and the same maps. Any of them apart (another database in the
    URL, a prefix set in one place, cluster mode) and the sidecars claim from a key space nobody
    publishes to, every step waiting out its timeout with its items queued. Each logs in as its own
    user: the sidecar never with the service's password."""
    service = serve_settings(_service_environment(), _service()["args"], monkeypatch, tmp_path)
    sidecar = containers_of(find_one("StatefulSet", statefulset))["sidecar"]
    env = container_environment(sidecar, SECRET, {"metadata.name": f"{statefulset}-0"})
    clear_settings(monkeypatch)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    params = parse_cli(expanded_args(sidecar, env)).params
    assert service.redis_password is not None
    assert params["redis_url"] == service.redis_url
    assert (service.redis_username, service.redis_password.get_secret_value()) == (
        SERVICE.default_user,
        SECRET["redis-service-password"],
    )
    assert (params["redis_username"], params["redis_password"]) == (
        SIDECAR.default_user,
        SECRET["redis-sidecar-password"],
    )
    assert (params["prefix"], params["cluster"]) == (service.key_prefix, service.redis_cluster)
    assert params["worker_id"] == f"{statefulset}-0", "the stable pod name the trainer's inventory lists"


def _service_environment() -> dict[str, str]:
    return container_environment(_service(), SECRET)


@pytest.mark.parametrize("statefulset", [statefulset for statefulset, _ in WORKERS])
def test_a_request_naming_no_model_is_planned_for_the_model_the_worker_pods_serve(statefulset: str) -> None:
    """``ROLLOUT_DEFAULT_MODEL`` prices every request that names no model: left at 7b while the
    workers serve a 14b, each trajectory would be planned at twice its real speed. The sidecar's
    ``--model`` is checked against the engine's served model above."""
    sidecar = containers_of(find_one("StatefulSet", statefulset))["sidecar"]
    default_model = find_one("ConfigMap", "rollout-scheduler")["data"]["ROLLOUT_DEFAULT_MODEL"]
    assert parse_cli(sidecar["args"]).params["model"] == default_model
