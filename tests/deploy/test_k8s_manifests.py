"""deploy/k8s: every manifest is valid Kubernetes, and the pieces fit each other and the real CLI.

Schema validation uses kubernetes-validate's bundled (offline) OpenAPI schemas in strict mode, so an
unknown or misspelt field fails here rather than at ``kubectl apply``.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from kubernetes_validate.utils import ValidationError as SchemaError
from kubernetes_validate.utils import validate
from pydantic import ValidationError

from service.auth.worker_tokens import parse_worker_tokens
from service.settings import Settings
from tests.deploy.cliargs import parse_cli
from tests.deploy.fleetsettings import serve_settings
from tests.deploy.manifests import (
    DOCS,
    IMAGE,
    VERSIONS,
    Doc,
    container_env,
    container_environment,
    containers_of,
    expanded_variables,
    find_one,
    pod_spec,
    workloads,
)


def test_the_folder_holds_every_manifest_the_issue_asks_for() -> None:
    kinds = {doc["kind"] for _, doc in DOCS}
    assert {
        "Deployment",
        "Service",
        "HorizontalPodAutoscaler",
        "Secret",
        "PodDisruptionBudget",
        "ConfigMap",
        "StatefulSet",
    } <= kinds


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(("where", "doc"), DOCS, ids=[where for where, _ in DOCS])
def test_every_manifest_validates_against_the_kubernetes_schema(where: str, doc: Doc, version: str) -> None:
    validate(doc, version, strict=True)


def test_the_schema_check_rejects_a_misspelt_field() -> None:
    broken = copy.deepcopy(find_one("Deployment", "rollout-scheduler"))
    broken["spec"]["revisionHistoryLimt"] = broken["spec"].pop("revisionHistoryLimit")
    with pytest.raises(SchemaError):
        validate(broken, VERSIONS[-1], strict=True)


def test_all_replicas_share_one_model_store_so_a_retrained_model_reaches_everyfind_one() -> None:
    deployment = find_one("Deployment", "rollout-scheduler")
    service = containers_of(deployment)["service"]
    model_dir = find_one("ConfigMap", "rollout-scheduler")["data"]["ROLLOUT_MODEL_DIR"]
    mount = next(m for m in service["volumeMounts"] if m["mountPath"] == model_dir)
    volume = next(v for v in pod_spec(deployment)["volumes"] if v["name"] == mount["name"])
    claim = find_one("PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"])
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]


def test_the_service_deployment_probes_readiness_and_liveness_on_different_endpoints() -> None:
    service = containers_of(find_one("Deployment", "rollout-scheduler"))["service"]
    assert service["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert service["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert {"cpu", "memory"} <= set(service["resources"]["requests"])


def test_the_service_listens_on_the_port_its_probes_and_its_service_reach_at_paths_it_serves() -> None:
    """serve's ``--port`` is the container's ``http`` port, which the probes and the Service target:
    one moved alone and every probe fails (the pods restart for ever) or the Service routes nowhere."""
    from service.api.health import router

    container = containers_of(find_one("Deployment", "rollout-scheduler"))["service"]
    port = parse_cli(container["args"]).params["port"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["http"] == port
    paths = {getattr(route, "path", None) for route in router.routes}
    for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
        probe = container[kind]["httpGet"]
        assert ports.get(probe["port"], probe["port"]) == port, kind
        assert probe["path"] in paths, kind
    for service_port in find_one("Service", "rollout-scheduler")["spec"]["ports"]:
        assert ports.get(service_port["targetPort"], service_port["targetPort"]) == port


def test_every_container_of_our_image_runs_as_the_image_non_root_user() -> None:
    for doc in workloads():
        pod = pod_spec(doc)
        for container in pod["containers"]:
            if not container["image"].startswith(IMAGE):
                continue
            context = {**pod.get("securityContext", {}), **container.get("securityContext", {})}
            assert context.get("runAsNonRoot") is True, container["name"]
            assert context.get("runAsUser") == 10001, container["name"]
            assert context.get("readOnlyRootFilesystem") is True, container["name"]
            mounts = {m["mountPath"] for m in container.get("volumeMounts", [])}
            assert "/tmp" in mounts, f"{container['name']}: a read-only root needs a writable /tmp"


def test_service_hpa_and_pdb_all_select_the_service_pods() -> None:
    deployment = find_one("Deployment", "rollout-scheduler")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    selectors = [
        find_one("Service", "rollout-scheduler")["spec"]["selector"],
        find_one("PodDisruptionBudget", "rollout-scheduler")["spec"]["selector"]["matchLabels"],
        deployment["spec"]["selector"]["matchLabels"],
    ]
    for selector in selectors:
        assert selector.items() <= labels.items()
    target = find_one("HorizontalPodAutoscaler", "rollout-scheduler")["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", "rollout-scheduler")


def test_every_secret_configmap_and_volume_claim_reference_resolves() -> None:
    secret_keys = set(find_one("Secret", "rollout-scheduler")["stringData"])
    configmaps = {doc["metadata"]["name"] for _, doc in DOCS if doc["kind"] == "ConfigMap"}
    claims = {doc["metadata"]["name"] for _, doc in DOCS if doc["kind"] == "PersistentVolumeClaim"}
    for doc in workloads():
        for volume in pod_spec(doc).get("volumes", []):
            if "persistentVolumeClaim" in volume:
                assert volume["persistentVolumeClaim"]["claimName"] in claims
        for container in pod_spec(doc)["containers"]:
            for ref in container.get("envFrom", []):
                assert ref["configMapRef"]["name"] in configmaps
            for var in container.get("env", []):
                secret_ref = var.get("valueFrom", {}).get("secretKeyRef")
                if secret_ref:
                    assert secret_ref["key"] in secret_keys, (container["name"], var["name"])


def test_every_variable_expanded_in_args_or_env_is_defined_in_that_container() -> None:
    for doc in workloads():
        for container in pod_spec(doc)["containers"]:
            used = expanded_variables(container)
            assert used <= container_env(container), (container["name"], used - container_env(container))


def test_every_rollout_setting_the_manifests_set_is_a_setting_the_service_knows() -> None:
    known = {f"ROLLOUT_{name.upper()}" for name in Settings.model_fields}
    service = containers_of(find_one("Deployment", "rollout-scheduler"))["service"]
    given = {name for name in container_env(service) if name.startswith("ROLLOUT_")}
    assert given, "the service is configured through ROLLOUT_* variables"
    assert given <= known, given - known
    assert "REDIS_URL" in container_env(service)


@pytest.mark.parametrize(
    ("statefulset", "engine", "resource", "selector_key"),
    [
        ("rollout-worker-h100", "vllm", "nvidia.com/gpu", "nvidia.com/gpu.product"),
        ("rollout-worker-ascend", "vllm-ascend", "huawei.com/Ascend910", "accelerator"),
    ],
)
def test_a_worker_pod_runs_the_sidecar_beside_its_engine_on_an_accelerator_node(
    statefulset: str, engine: str, resource: str, selector_key: str
) -> None:
    doc = find_one("StatefulSet", statefulset)
    containers = containers_of(doc)
    assert set(containers) == {engine, "sidecar"}
    limits = containers[engine]["resources"]["limits"]
    assert limits[resource] == "1"
    assert selector_key in pod_spec(doc)["nodeSelector"]
    sidecar = parse_cli(containers["sidecar"]["args"])
    engine_port = containers[engine]["ports"][0]["containerPort"]
    assert sidecar.params["engine_url"] == f"http://127.0.0.1:{engine_port}"
    assert sidecar.params["worker_id"] == "$(POD_NAME)", "worker ids are the stable StatefulSet pod names"
    probe = containers["sidecar"]["livenessProbe"]["httpGet"]  # a stuck push loop gets restarted
    ports = {p["name"]: p["containerPort"] for p in containers["sidecar"]["ports"]}
    assert (probe["path"], ports[probe["port"]]) == ("/health", sidecar.params["health_port"])
    ready = containers["sidecar"]["readinessProbe"]["httpGet"]  # not ready until Redis answered
    assert (ready["path"], ports[ready["port"]]) == ("/ready", sidecar.params["health_port"])
    assert sidecar.params["health_host"] == "0.0.0.0"


def test_every_command_of_our_image_parses_against_the_real_cli() -> None:
    checked = 0
    for doc in workloads():
        for container in pod_spec(doc)["containers"]:
            if container["image"].startswith(IMAGE):
                parse_cli(container["args"])
                checked += 1
    assert checked >= 3


def test_a_stopping_service_pod_keeps_serving_until_it_leaves_the_endpoints_then_finishes_in_time() -> None:
    """SIGTERM and the endpoint removal race: uvicorn stops accepting at once (measured: exit in 0.6 s),
    while kube-proxy and ingresses route new connections to the pod for a few more seconds, so every
    roll and HPA scale-down would refuse some trainers' ``POST /schedule``. A preStop sleep holds the
    SIGTERM back until the pod is out of the Service; then uvicorn's graceful wait, and the app's stop
    and the exit on a stalled Redis (``STOP_TIMEOUTS`` command timeouts; whatever still runs then, a
    planning thread inside a Redis call, is ended at ``EXIT_TIMEOUTS``, ``MIN_BOUND_S`` at least:
    ``service/api/exit_guard.py``, and its last acts, ``LAST_ACTS_S``), must end before the kubelet's
    SIGKILL."""
    from service.api.exit_guard import LAST_ACTS_S, MIN_BOUND_S
    from service.app import EXIT_TIMEOUTS

    pod = pod_spec(find_one("Deployment", "rollout-scheduler"))
    service = containers_of(find_one("Deployment", "rollout-scheduler"))["service"]
    pre_stop = service.get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds", 0)
    assert pre_stop >= 5, "no preStop sleep: new connections are refused while the endpoints update"
    config = find_one("ConfigMap", "rollout-scheduler")["data"]
    timeout_s = float(config["ROLLOUT_REDIS_TIMEOUT_S"])
    graceful_s = int(config["ROLLOUT_GRACEFUL_SHUTDOWN_S"])
    stop_s = max(EXIT_TIMEOUTS * timeout_s, MIN_BOUND_S) + LAST_ACTS_S
    assert pre_stop + graceful_s + stop_s < pod["terminationGracePeriodSeconds"]


@pytest.mark.parametrize(
    ("statefulset", "engine"), [("rollout-worker-h100", "vllm"), ("rollout-worker-ascend", "vllm-ascend")]
)
def test_a_stopping_worker_pod_lets_the_sidecar_drain_into_the_engine_kept_serving_for_it(
    statefulset: str, engine: str
) -> None:
    """On SIGTERM the sidecar finishes running trajectories for ``--drain-timeout`` and releases the rest
    (re-run elsewhere from scratch); the engine's preStop sleep keeps it serving meanwhile. The engine
    must outlive the drain, the whole must fit the grace period, and the engine window should be the
    drain's: held much longer, nobody uses it and every node drain waits for nothing."""
    from service.sidecar.session import RELEASE_GRACE_S

    doc = find_one("StatefulSet", statefulset)
    containers = containers_of(doc)
    drain_s = parse_cli(containers["sidecar"]["args"]).params["drain_timeout"] + RELEASE_GRACE_S
    engine_s = containers[engine]["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert drain_s <= engine_s < pod_spec(doc)["terminationGracePeriodSeconds"]
    assert engine_s - drain_s <= 10, f"the engine idles {engine_s - drain_s:.0f} s after the sidecar is gone"


def _service_environment(secret: dict[str, str]) -> dict[str, str]:
    """The service container's environment, ``secret`` standing in for the Secret's keys."""
    return container_environment(
        containers_of(find_one("Deployment", "rollout-scheduler"))["service"], secret
    )


def _serve_settings(env: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Settings:
    """What ``serve`` builds from ``env`` and the service container's args."""
    args = containers_of(find_one("Deployment", "rollout-scheduler"))["service"]["args"]
    return serve_settings(env, args, monkeypatch, tmp_path)


def test_the_service_container_environment_is_one_serve_accepts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Names alone are not enough: a value serve refuses (an unknown policy, a log level it does not
    know, a Redis URL it cannot parse) stops every replica at start."""
    secret = {"trainer-tokens": "t" * 64, "worker-tokens": "w" * 64, "redis-service-password": "p/w@#?"}
    env = _service_environment(secret)
    settings = _serve_settings(env, monkeypatch, tmp_path)
    assert settings.redis_url == "redis://" + env["REDIS_ADDRESS"]
    assert settings.auth_enabled
    assert settings.redis_password is not None


def test_the_secret_placeholders_stop_serve_so_an_unedited_apply_never_serves_known_tokens(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The placeholders are in the repository for anyone to read: applied unedited, the service must
    refuse them rather than accept callers who know them."""
    env = _service_environment(find_one("Secret", "rollout-scheduler")["stringData"])
    with pytest.raises(ValidationError, match="in both"):
        _serve_settings(env, monkeypatch, tmp_path)


def test_the_secret_shows_worker_tokens_bound_to_a_worker() -> None:
    """The placeholder is the form to copy: an unbound one would teach the form serve warns about."""
    entries = parse_worker_tokens(find_one("Secret", "rollout-scheduler")["stringData"]["worker-tokens"])
    assert entries
    assert all(entry.worker_id is not None for entry in entries)


@pytest.mark.parametrize("statefulset", ["rollout-worker-h100", "rollout-worker-ascend"])
@pytest.mark.parametrize("cluster", ["true", "false"])
def test_one_configmap_switch_puts_the_service_and_the_sidecars_in_cluster_mode(
    statefulset: str, cluster: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ConfigMap's ``ROLLOUT_REDIS_CLUSTER`` reaches the sidecars too (``envFrom``); a sidecar left
    on a single-node client while the service speaks cluster would have most of its calls answered
    MOVED. The switch must move both."""
    sidecar = containers_of(find_one("StatefulSet", statefulset))["sidecar"]
    assert "ROLLOUT_REDIS_CLUSTER" in container_env(sidecar)
    monkeypatch.setenv("ROLLOUT_REDIS_CLUSTER", cluster)
    assert parse_cli(sidecar["args"]).params["cluster"] is (cluster == "true")
