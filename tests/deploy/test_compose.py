"""deploy/compose.yaml: the whole loop on one machine, checked by parsing it (no container engine here).

The checks are the ones that would otherwise fail only at ``docker compose up``: every service has an
image, a command the real CLI accepts, a health check and the environment it needs; every sidecar points
at an engine that exists and logs in to the Redis as the sidecar user, the service as the service user,
with the passwords the aclfile Redis starts with was written from; Redis persists with AOF.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from scheduler.devices import device_profile
from service.api.schemas import ScheduleRequest
from service.auth.worker_tokens import parse_worker_tokens
from service.delivery.acl import DEFAULT_PASSWORD_ENV, SERVICE, SIDECAR, Role
from service.settings import unknown_variables
from tests.deploy.cliargs import CommandLineError, option_envvars, parse_cli
from tests.deploy.fleetsettings import not_the_default, serve_settings, undecided
from tests.deploy.manifests import serve_startup_window_s

COMPOSE = Path(__file__).resolve().parents[2] / "deploy" / "compose.yaml"
EXAMPLE_BATCH = COMPOSE.with_name("example-batch.json")  # the batch README "Deploy" posts
OUR_IMAGE = "rollout-scheduler:"
OWN_LOGIN = {"ROLLOUT_REDIS_USERNAME", "ROLLOUT_REDIS_PASSWORD"}  # each side's own Redis user
Service = dict[str, Any]


def _interpolate(text: str) -> str:
    """Apply compose's ``${VAR:-default}`` with an empty environment, as a fresh ``up`` would."""
    return re.sub(r"\$\{[A-Z_][A-Z0-9_]*:-([^}]*)\}", r"\1", text)


def _resolved(value: Any) -> Any:
    if isinstance(value, str):
        return _interpolate(value)
    if isinstance(value, list):
        return [_resolved(v) for v in value]
    if isinstance(value, dict):
        return {k: _resolved(v) for k, v in value.items()}
    return value


@pytest.fixture(scope="module")
def services() -> dict[str, Service]:
    compose = yaml.safe_load(COMPOSE.read_text())
    found: dict[str, Service] = _resolved(compose["services"])
    return found


def _ours(services: dict[str, Service], command: str) -> dict[str, Service]:
    return {
        name: svc
        for name, svc in services.items()
        if svc["image"].startswith(OUR_IMAGE) and svc["command"][0] == command
    }


def test_every_service_has_an_image_a_command_and_a_health_check(services: dict[str, Service]) -> None:
    for name, svc in services.items():
        assert svc.get("image"), name
        assert svc.get("command"), name
        assert svc.get("healthcheck", {}).get("test"), name


def test_redis_persists_every_write_never_evicts_and_starts_with_the_users_the_one_shot_wrote(
    services: dict[str, Service],
) -> None:
    redis_svc = services["redis"]
    command = redis_svc["command"]
    assert command[command.index("--appendonly") + 1] == "yes"
    assert command[command.index("--appendfsync") + 1] == "always", "an accepted result must survive a crash"
    assert command[command.index("--maxmemory-policy") + 1] == "noeviction", "eviction loses schedule keys"
    assert "--requirepass" not in command, "ignored beside an aclfile: the file's default user decides"
    assert any(volume.endswith(":/data") for volume in redis_svc["volumes"] if isinstance(volume, str))
    assert redis_svc["depends_on"]["redis-users"]["condition"] == "service_completed_successfully"
    assert Path(_aclfile_on_redis(services)).name == Path(_aclfile_written(services)).name


def _mounts(svc: Service) -> dict[str, str]:
    """Each named volume ``svc`` mounts, by its path in the container."""
    found = {}
    for volume in svc.get("volumes", []):
        if isinstance(volume, str):
            source, target = volume.split(":")[:2]
        else:
            source, target = volume["source"], volume["target"]
        found[target] = source
    return found


def _aclfile_on_redis(services: dict[str, Service]) -> str:
    """The volume and path inside it of the aclfile Redis starts with (``volume:path``)."""
    command = services["redis"]["command"]
    path = Path(command[command.index("--aclfile") + 1])
    return f"{_mounts(services['redis'])[str(path.parent)]}:{path.name}"


def _aclfile_written(services: dict[str, Service]) -> str:
    """The volume and path inside it of the aclfile the ``redis-users`` one-shot writes."""
    path = Path(parse_cli(services["redis-users"]["command"]).params["output"])
    return f"{_mounts(services['redis-users'])[str(path.parent)]}:{path.name}"


def test_redis_reads_the_aclfile_the_one_shot_writes_for_the_services_key_space(
    services: dict[str, Service],
) -> None:
    """Another volume, another name, or users for another prefix or mode, and the service and the
    sidecars are refused every command (or every key) at ``up``."""
    users = services["redis-users"]
    assert _aclfile_on_redis(services) == _aclfile_written(services)
    assert users["restart"] == "no", "a one-shot restarted unless stopped would rerun forever"
    params = parse_cli(users["command"]).params
    shared = services["scheduler"]["environment"]
    assert params["aclfile"]
    assert users["environment"]["ROLLOUT_KEY_PREFIX"] == shared["ROLLOUT_KEY_PREFIX"]
    assert users["environment"]["ROLLOUT_REDIS_CLUSTER"] == shared["ROLLOUT_REDIS_CLUSTER"]


def test_the_loop_has_four_engines_of_two_device_kinds(services: dict[str, Service]) -> None:
    engines = _ours(services, "engine-sim")
    assert len(engines) == 4
    kinds = [device_profile(parse_cli(e["command"]).params["device"]).name for e in engines.values()]
    assert sorted(set(kinds)) == ["Ascend910B", "H100"]
    assert kinds.count("H100") == 2


def test_every_command_of_our_image_parses_against_the_real_cli(services: dict[str, Service]) -> None:
    ours = [svc for svc in services.values() if svc["image"].startswith(OUR_IMAGE)]
    assert len(ours) == 10
    for svc in ours:
        parse_cli(svc["command"])


def test_a_misspelt_flag_is_refused_by_the_cli_check() -> None:
    with pytest.raises(CommandLineError, match="devcie"):
        parse_cli(["engine-sim", "--port", "8001", "--devcie", "H100"])


def _user(services: dict[str, Service], role: Role) -> tuple[str, str]:
    """(user, password) of ``role`` as the ``redis-users`` one-shot writes it into the aclfile."""
    return role.default_user, str(services["redis-users"]["environment"][role.password_env])


def _redis_target(svc: Service, argv_params: dict[str, Any]) -> tuple[str | None, str | None, str | None]:
    """(host, user, password) the process logs in with: the URL's, or those given apart from it."""
    env = svc.get("environment", {})
    url = argv_params.get("redis_url") or env.get("REDIS_URL")
    assert url, "no Redis URL: the process would start its own private Redis"
    parts = urlsplit(str(url))
    user = parts.username or argv_params.get("redis_username") or env.get("ROLLOUT_REDIS_USERNAME")
    password = parts.password or argv_params.get("redis_password") or env.get("ROLLOUT_REDIS_PASSWORD")
    return parts.hostname, user, password


def test_each_sidecar_drives_its_own_existing_engine_through_the_shared_redis(
    services: dict[str, Service],
) -> None:
    sidecars = _ours(services, "sidecar")
    engines = _ours(services, "engine-sim")
    assert len(sidecars) == len(engines)
    targets, worker_ids = set(), set()
    for name, svc in sidecars.items():
        params = parse_cli(svc["command"]).params
        engine_url = urlsplit(params["engine_url"])
        assert engine_url.hostname in engines, f"{name} points at {engine_url.hostname}"
        engine_port = parse_cli(engines[engine_url.hostname]["command"]).params["port"]
        assert engine_url.port == engine_port, name
        assert engine_url.hostname in svc["depends_on"], f"{name} starts before its engine"
        engine = parse_cli(engines[engine_url.hostname]["command"]).params
        assert device_profile(params["device"]) == device_profile(engine["device"]), name
        # the slots and the KV budget the sidecar fills are the ones the engine simulates
        for same in ("max_num_seqs", "model", "num_gpus", "kv_capacity_tokens"):
            assert params[same] == engine[same], (name, same)
        assert _redis_target(svc, params) == ("redis", *_user(services, SIDECAR)), name
        targets.add(engine_url.hostname)
        worker_ids.add(params["worker_id"])
    assert len(targets) == len(worker_ids) == len(sidecars), "one sidecar per engine, ids unique"


def test_the_service_uses_the_shared_redis_and_refuses_anonymous_callers(
    services: dict[str, Service],
) -> None:
    svc = services["scheduler"]
    params = parse_cli(svc["command"]).params
    assert _redis_target(svc, params) == ("redis", *_user(services, SERVICE))
    env = svc["environment"]
    assert env["ROLLOUT_TRAINER_TOKENS"]
    assert env["ROLLOUT_WORKER_TOKENS"]
    assert svc["depends_on"]["redis"]["condition"] == "service_healthy"
    assert any(str(port).endswith(":8000") for port in svc["ports"])


def test_every_service_variable_a_sidecar_reads_too_reaches_each_sidecar_with_the_same_value(
    services: dict[str, Service],
) -> None:
    """The sidecars read the service's own variables for what they must share with it: the Redis, its
    key prefix and cluster mode, and the log level (their ``--prefix``, ``--cluster``, ``--log-level``
    fall back to them). Set on the service alone, ``ROLLOUT_LOG_LEVEL=DEBUG`` left the sidecars on INFO,
    and a ``ROLLOUT_KEY_PREFIX`` would have left them claiming from a namespace nobody publishes to."""
    service_env = services["scheduler"]["environment"]
    for name, svc in _ours(services, "sidecar").items():
        read = {var for param in parse_cli(svc["command"]).command.params for var in option_envvars(param)}
        shared = {var: value for var, value in service_env.items() if var in read - OWN_LOGIN}
        missing = shared.items() - svc["environment"].items()
        assert not missing, f"{name} lacks {sorted(missing)}"


def test_no_sidecar_gets_the_service_s_redis_password_or_the_default_user_s(
    services: dict[str, Service],
) -> None:
    """A compromised worker container reads its own environment: with the service's password it could
    publish, cancel and read every result; with the default user's, anything at all."""
    service_password = services["scheduler"]["environment"]["ROLLOUT_REDIS_PASSWORD"]
    default_password = services["redis-users"]["environment"][DEFAULT_PASSWORD_ENV]
    assert service_password != default_password
    for name, svc in _ours(services, "sidecar").items():
        values = {str(value) for value in svc["environment"].values()} | set(map(str, svc["command"]))
        assert not values & {service_password, default_password}, name
        assert svc["environment"]["ROLLOUT_REDIS_PASSWORD"] != service_password, name


def _service_env(services: dict[str, Service]) -> dict[str, str]:
    return {name: str(value) for name, value in services["scheduler"]["environment"].items()}


def test_the_service_environment_is_one_serve_accepts_and_names_no_unknown_variable(
    services: dict[str, Service], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A misspelt variable is ignored with a warning, and the loop runs on the default it meant to
    change; a value serve refuses stops the service at ``up``."""
    env = _service_env(services)
    assert unknown_variables(env) == []
    settings = serve_settings(env, services["scheduler"]["command"], monkeypatch, tmp_path)
    assert settings.auth_enabled


def test_the_service_decides_every_setting_or_says_why_it_leaves_one_out(
    services: dict[str, Service],
) -> None:
    """The compose file is where a user of the loop tunes it, and the model of a fleet's: a setting
    missing here (the plan budget, the planning slots, the engine requests name none for) is one they
    may not know exists. A setting left out on purpose has a ``# not set:`` line saying why."""
    svc = services["scheduler"]
    assert undecided(_service_env(services), svc["command"], COMPOSE.read_text()) == []


def test_the_service_gets_each_setting_at_the_code_s_default_unless_the_file_says_why_not(
    services: dict[str, Service], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file reads as the defaults a user may change, and as the Kubernetes ConfigMap does: a
    default changed in the code must not stay pinned at its old value here, unnoticed."""
    assert not_the_default(_service_env(services), monkeypatch) == {}


def test_a_request_naming_no_model_or_engine_is_planned_for_what_the_loop_s_engines_simulate(
    services: dict[str, Service],
) -> None:
    """``ROLLOUT_DEFAULT_MODEL`` and ``ROLLOUT_DEFAULT_ENGINE`` price every request that names
    neither (the README's example batch names no engine): planned for another model or engine than
    engine-sim plays, the demo's planned makespan is not the one it shows."""
    env = services["scheduler"]["environment"]
    for name, svc in _ours(services, "engine-sim").items():
        params = parse_cli(svc["command"]).params
        assert params["model"] == env["ROLLOUT_DEFAULT_MODEL"], name
        assert params["engine"] == env["ROLLOUT_DEFAULT_ENGINE"], name


def test_the_demo_worker_token_is_bound_to_one_of_the_loop_s_workers(services: dict[str, Service]) -> None:
    """An unbound default would teach every user the form serve warns about at start."""
    entries = parse_worker_tokens(services["scheduler"]["environment"]["ROLLOUT_WORKER_TOKENS"])
    sidecars = [svc["command"] for svc in _ours(services, "sidecar").values()]
    worker_ids = {command[command.index("--worker-id") + 1] for command in sidecars}
    assert entries
    assert {entry.worker_id for entry in entries} <= worker_ids


def test_each_health_check_probes_its_own_port(services: dict[str, Service]) -> None:
    """The service and the engines their listening port; a sidecar its --health-port liveness."""
    for name, svc in services.items():
        url = svc.get("environment", {}).get("HEALTHCHECK_URL")
        if svc["healthcheck"]["test"] == ["NONE"]:  # a one-shot: the image's check is off
            assert svc["restart"] == "no", name
            continue
        if url is None:
            assert not svc["image"].startswith(OUR_IMAGE), f"{name} would probe the image default :8000"
            continue
        params = parse_cli(svc["command"]).params
        port = params["health_port"] if svc["command"][0] == "sidecar" else params["port"]
        assert urlsplit(url).hostname == "127.0.0.1", name
        assert urlsplit(url).port == port, name


def test_the_readme_example_batch_is_a_valid_request_for_exactly_the_compose_workers(
    services: dict[str, Service],
) -> None:
    request = ScheduleRequest.model_validate_json(EXAMPLE_BATCH.read_text())
    sidecars = [parse_cli(svc["command"]).params for svc in _ours(services, "sidecar").values()]
    in_compose = {p["worker_id"]: device_profile(p["device"]) for p in sidecars}
    in_batch = {w.worker_id: device_profile(w.device) for w in request.inventory.workers}
    assert in_batch == in_compose


def _seconds(duration: str) -> float:
    """Compose's duration (``30s``, ``1m30s``) in seconds."""
    units = {"h": 3600, "m": 60, "s": 1}
    return sum(float(n) * units[u] for n, u in re.findall(r"(\d+(?:\.\d+)?)([hms])", duration))


def test_the_service_health_check_lets_it_load_its_history_as_the_k8s_startup_probe_does(
    services: dict[str, Service],
) -> None:
    """A check failed inside ``start_period`` does not count; past it, serve still loading its
    history would be marked unhealthy and ``docker compose up --wait`` would give up on it."""
    for name, svc in _ours(services, "serve").items():
        assert _seconds(svc["healthcheck"]["start_period"]) >= serve_startup_window_s(), name


def test_each_process_of_ours_gets_time_to_stop_before_docker_kills_it(
    services: dict[str, Service], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``docker compose stop``/``down`` sends SIGTERM, then SIGKILL after ``stop_grace_period`` (10 s
    unless set). serve waits up to its graceful-shutdown timeout for requests in flight, then the app's
    stop and the exit on a stalled Redis, ended at ``EXIT_TIMEOUTS`` command timeouts (``MIN_BOUND_S``
    at least: ``service/api/exit_guard.py``) and its last acts (``LAST_ACTS_S``), at the timeout the
    service's environment sets, as the Kubernetes test reads its ConfigMap's; a sidecar drains for
    ``--drain-timeout`` plus its last releases. Killed sooner, serve's status is 137 where the guard's
    says what hung, and a sidecar leaves its leases to lapse instead of handing them back."""
    from service.api.exit_guard import LAST_ACTS_S, MIN_BOUND_S
    from service.app import EXIT_TIMEOUTS
    from service.sidecar.session import RELEASE_GRACE_S

    for name, svc in services.items():
        if not svc["image"].startswith(OUR_IMAGE) or svc["command"][0] in ("engine-sim", "redis-acl"):
            continue
        if svc["command"][0] == "serve":
            env = {key: str(value) for key, value in svc["environment"].items()}
            settings = serve_settings(env, svc["command"], monkeypatch, tmp_path)
            timeout_s, graceful_s = settings.redis_timeout_s, settings.graceful_shutdown_s
            needed = graceful_s + max(EXIT_TIMEOUTS * timeout_s, MIN_BOUND_S) + LAST_ACTS_S
        else:
            needed = parse_cli(svc["command"]).params["drain_timeout"] + RELEASE_GRACE_S
        assert _seconds(svc.get("stop_grace_period", "10s")) > needed, name
