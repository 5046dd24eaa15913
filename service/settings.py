"""Service settings: one pydantic-settings object, built by ``serve`` (or a test) and injected into the app.

Nothing reads the environment at import time: ``Settings()`` reads it when called, and keyword
arguments (the CLI flags of ``serve``) take precedence over environment variables. Every variable is
``ROLLOUT_<FIELD>`` except ``REDIS_URL``, which keeps the name every Redis tool already uses.
README.md ("Settings") lists them all.
"""

from __future__ import annotations

import difflib
import ipaddress
import os
import pathlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pydantic import AliasChoices, Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from predictors.quantiles import PLANNING_QUANTILE
from scheduler.errors import InvalidInputError
from service.api.schemas import MAX_TIME_BUDGET_MS
from service.auth.tokens import check_token
from service.auth.worker_tokens import WorkerToken, parse_worker_tokens
from service.delivery.key_prefix import PrefixError, check_prefix
from service.delivery.keys import (
    DEFAULT_LEASE_TTL_MS,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_PREFIX,
    DEFAULT_RETENTION_S,
)
from service.engines import SERVICE_ENGINE
from service.hosts.names import check_host_names
from service.logs import LOG_LEVELS
from service.problems.details import own_words
from service.redis_conn import check_redis_url, describe

HOUR_S = 3_600
DAY_S = 86_400
YEAR_S = 365 * DAY_S  # bounds past any real setting, inside what Redis EXPIRE and socket timeouts take
MAX_REDIS_INTEGER = 2**63 - 1  # the largest count Redis takes (a C long long): XADD's MAXLEN
SIDECAR_ONLY_VARIABLES = frozenset({"ROLLOUT_ENGINE_API_KEY"})  # read by the sidecar, not a setting
# ``redis-acl``'s inputs, not settings (``service/delivery/acl.py`` reads them; a test holds the two
# equal): deploy/compose exports them for its one-shot, and a shell that ran it warned at ``serve``.
REDIS_ACL_VARIABLES = frozenset(
    {"ROLLOUT_ACL_SERVICE_PASSWORD", "ROLLOUT_ACL_SIDECAR_PASSWORD", "ROLLOUT_ACL_DEFAULT_PASSWORD"}
)
# Names a user may guess for a setting that spelling alone would match with another: ROLLOUT_ENGINE
# (the engine the fleet runs) is closest to the sidecar's ROLLOUT_ENGINE_API_KEY, a secret.
MEANT = {"ROLLOUT_ENGINE": "ROLLOUT_DEFAULT_ENGINE"}


class AcrossSettingsError(ValueError):
    """A check across settings failed. Its words name the settings by field (``{}`` in ``template``),
    so that ``invalid_setting`` can name each as the user set it, a flag or a variable; ``str()``
    names them by their variables."""

    def __init__(self, template: str, *fields: str) -> None:
        self.template = template
        self.fields = fields
        super().__init__(self.words(variable_name))

    def words(self, name_of: Callable[[str], str]) -> str:
        """The message with each setting named by ``name_of(field)``."""
        return self.template.format(*(name_of(field) for field in self.fields))


class Settings(BaseSettings):
    """Everything the service can be told; defaults are for a single-node development run."""

    # protected_namespaces: pydantic-settings 2.3 (the floor) reserved "model_" as well, and warned on
    # model_dir and model_keep at every start; only BaseSettings' own "settings_" names are kept here.
    model_config = SettingsConfigDict(
        env_prefix="ROLLOUT_", extra="forbid", frozen=True, protected_namespaces=("settings_",)
    )

    # --- network -------------------------------------------------------------------------------------
    host: str = "127.0.0.1"  # bind address; a non-loopback one needs a token
    port: int = Field(default=8000, ge=0, le=65535)  # 0 picks a free port
    # uvicorn's wait for the requests in flight after SIGTERM before it cuts them (a 503, cut_answer.py);
    # the deploy files' grace periods cover it (docs/operations.md, "Shutdown")
    graceful_shutdown_s: int = Field(default=10, ge=1, le=HOUR_S)

    # --- Redis ---------------------------------------------------------------------------------------
    redis_url: str | None = Field(
        default=None, validation_alias=AliasChoices("REDIS_URL", "ROLLOUT_REDIS_URL", "redis_url")
    )  # redis://, rediss:// (TLS) or unix:// (a socket); None: `serve` starts an embedded valkey-server
    redis_cluster: bool = False  # the URL names a node of a Redis Cluster (every schedule is in one slot)
    redis_username: str | None = None  # ACL user, when not given in the URL
    redis_password: SecretStr | None = None  # ACL password, when not given in the URL
    redis_tls_ca_file: str | None = None  # CA bundle to verify a rediss:// server against
    redis_timeout_s: float = Field(
        default=1.0, gt=0, le=HOUR_S
    )  # connect and command timeout; a silent Redis costs 3 of them per call (retries), a refusing one none
    key_prefix: str = DEFAULT_PREFIX  # namespace of every key; the sidecars' --prefix must equal it

    # --- security ------------------------------------------------------------------------------------
    trainer_tokens: SecretStr | None = None  # comma-separated bearer tokens with the trainer scope
    # comma-separated bearer tokens with the worker scope: worker_id=token binds one to the worker it
    # may report actuals for; a plain token is unbound (service/auth/worker_tokens.py)
    worker_tokens: SecretStr | None = None
    # comma-separated host names a service without tokens answers to besides localhost, 127.0.0.1 and
    # [::1] (any port); other Host headers get 421: a guard against DNS rebinding
    # (service/hosts/allow_list.py)
    allowed_hosts: str | None = None
    max_body_bytes: int = Field(default=32 * 1024 * 1024, gt=0)  # larger request bodies get 413 unread
    max_trajectories: int = Field(default=65_536, gt=0)  # more trajectories (sum of n) in one batch get 413

    max_concurrent_plans: int = Field(default=2, ge=1)  # plans computed at once; more wait in line
    plan_queue_timeout_s: float = Field(default=30.0, gt=0, le=HOUR_S)  # longest wait in line before a 503

    # --- planning ------------------------------------------------------------------------------------
    default_policy: str = "cpsat"  # policy when the request names none
    default_model: str = "7b"  # model preset when the request names none
    default_quantile: float = Field(default=PLANNING_QUANTILE, gt=0, lt=1)  # length quantile to plan on
    # engine the workers run when the request names none (``scheduler.sim_rules.ENGINES``): a fleet of
    # vLLM V0 (or of engines that evict like it) says so once here, not in every request
    default_engine: str = SERVICE_ENGINE
    # solver budget when the request gives none: a plan never runs past it (cpsat cuts a round short),
    # and 80 ms leaves POST /schedule p50 under 150 ms at 1,024 x 16 on 2 cores with ~45 ms of publish
    default_time_budget_ms: int = Field(default=80, gt=0, le=MAX_TIME_BUDGET_MS)  # a request's own ceiling

    # --- delivery (leases the sidecars hold; see service/delivery/keys.py) ------------------------------
    lease_ttl_ms: int = Field(
        default=DEFAULT_LEASE_TTL_MS, ge=100, le=DAY_S * 1000
    )  # a lease lapses this long after a heartbeat
    max_attempts: int = Field(default=DEFAULT_MAX_ATTEMPTS, ge=1)  # leases of one item before dead-lettering
    retention_s: int = Field(
        default=DEFAULT_RETENTION_S, ge=60, le=YEAR_S
    )  # a schedule's keys and results live this long

    # --- learning ------------------------------------------------------------------------------------
    model_dir: str = "var/models"  # the predictor's versioned model store
    model_keep: int = Field(default=20, ge=1)  # versions kept in the store after a retrain (older pruned)
    retrain_every_steps: int = Field(
        default=0, ge=0
    )  # retrain when a batch's step is this far past the last; 0=off
    actuals_maxlen: int = Field(
        default=2_000_000, gt=0, le=MAX_REDIS_INTEGER
    )  # approximate cap on the actuals stream (oldest trimmed); past int64 every append was refused
    actuals_follow_s: float = Field(
        default=0.25, ge=0
    )  # how often a replica folds actuals other replicas took, off the request path; 0=off
    speed_ewma_alpha: float = Field(
        default=0.2, gt=0, le=1
    )  # weight of the newest /actuals batch (its mean) in a worker's speed

    # --- observability -------------------------------------------------------------------------------
    log_level: str = "INFO"

    @field_validator("default_policy")
    @classmethod
    def _known_policy(cls, value: str) -> str:
        from scheduler.policies import POLICY_NAMES

        if value not in POLICY_NAMES:
            raise ValueError(f"unknown policy {value!r}; expected one of {', '.join(POLICY_NAMES)}")
        return value

    @field_validator("default_model")
    @classmethod
    def _known_model(cls, value: str) -> str:
        from scheduler.devices import model_preset
        from scheduler.errors import UnknownNameError

        try:
            model_preset(value)
        except UnknownNameError as error:
            raise ValueError(str(error)) from None
        return value

    @field_validator("default_engine")
    @classmethod
    def _known_engine(cls, value: str) -> str:
        """Refused later, every request naming no engine would get a 422 blaming ``engine``, a field
        it never sent; the line names the setting and the value, the reason the known engines."""
        from scheduler.errors import UnknownNameError
        from scheduler.sim_rules import engine_rules

        try:
            engine_rules(value)
        except UnknownNameError as error:
            raise ValueError(f"engine {value!r} {error.reason}") from None
        return value

    @field_validator("redis_url")
    @classmethod
    def _redis_url(cls, value: str | None) -> str | None:
        return None if value is None else check_redis_url(value)

    @field_validator("trainer_tokens")
    @classmethod
    def _usable_tokens(cls, value: SecretStr | None) -> SecretStr | None:
        """A token that can never match is a setting mistake to report at start: the header is read
        as latin-1, so only printable ASCII compares equal."""
        for token in _split(value):
            check_token(token)
        return value

    @field_validator("worker_tokens")
    @classmethod
    def _usable_worker_tokens(cls, value: SecretStr | None) -> SecretStr | None:
        """The trainer tokens' rule, and each entry a plain token or ``worker_id=token``."""
        parse_worker_tokens("" if value is None else value.get_secret_value())
        return value

    @model_validator(mode="after")
    def _scopes_apart(self) -> Settings:
        """One token in both lists would silently have the trainer scope: say so."""
        if set(self.trainer_token_list()) & set(self.worker_token_list()):
            raise AcrossSettingsError("a token is in both {} and {}", "trainer_tokens", "worker_tokens")
        return self

    @field_validator("allowed_hosts")
    @classmethod
    def _host_names(cls, value: str | None) -> str | None:
        """An entry that can never equal a ``Host`` (a port, a scheme, a wildcard) is a mistake to
        report at start, not a name silently refused."""
        check_host_names(value or "")
        return value

    @field_validator("key_prefix")
    @classmethod
    def _key_prefix(cls, value: str) -> str:
        """The sidecars' ``--prefix`` rule; the line already shows the value, so the reason does not."""
        try:
            return check_prefix(value)
        except PrefixError as exc:
            raise ValueError(exc.reason) from None

    @field_validator("model_dir")
    @classmethod
    def _usable_dir(cls, value: str) -> str:
        """A store that is a file, or under a file or a folder this process may not write, fails its first
        retrain (in the background, with ``ROLLOUT_RETRAIN_EVERY_STEPS``): say so at start instead, in
        ``predictor train --out``'s words; the line already shows the value, so the reason does not."""
        from service.outpaths import check_folder_path

        try:
            check_folder_path("model_dir", pathlib.Path(value))
        except InvalidInputError as exc:
            raise ValueError(exc.reason) from None
        return value

    @field_validator("log_level")
    @classmethod
    def _known_level(cls, value: str) -> str:
        level = value.upper()
        if level not in LOG_LEVELS:
            raise ValueError(f"must be one of {', '.join(LOG_LEVELS)}")
        return level

    def __repr_args__(self) -> Iterable[tuple[str | None, Any]]:
        """The fields as ``repr`` and ``str`` show them, the Redis URL without its password
        (``describe``): pydantic masks the ``SecretStr`` settings, but the URL may carry a password
        too, and a settings object printed to a log or a debugger showed it whole."""
        for name, value in super().__repr_args__():
            yield name, (describe(value) if name == "redis_url" and value else value)

    def allowed_host_names(self) -> list[str]:
        """The names of ``allowed_hosts``, as ``Host`` headers are compared (``hosts.host_name``)."""
        return check_host_names(self.allowed_hosts or "")

    def trainer_token_list(self) -> list[str]:
        """The trainer tokens; several allow rotation without downtime."""
        return _split(self.trainer_tokens)

    def worker_token_list(self) -> list[str]:
        """The worker tokens, bound or not."""
        return [entry.token for entry in self.worker_token_entries()]

    def worker_token_entries(self) -> list[WorkerToken]:
        """The worker tokens with the worker each is bound to (None: unbound)."""
        if self.worker_tokens is None:
            return []
        return parse_worker_tokens(self.worker_tokens.get_secret_value())

    @property
    def auth_enabled(self) -> bool:
        """Whether any token is configured; without one every caller is trusted (loopback only)."""
        return bool(self.trainer_token_list() or self.worker_token_list())

    @property
    def binds_loopback_only(self) -> bool:
        """Whether ``host`` is reachable from this machine only."""
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False  # a host name other than localhost may resolve to anything


def unknown_variables(environ: Mapping[str, str] | None = None) -> list[str]:
    """One line per ``ROLLOUT_*`` variable that no setting reads, naming the setting it resembles.
    pydantic-settings ignores such variables, so a misspelt one left the service on its default
    without a word: ``ROLLOUT_TRAINER_TOKEN`` (the singular a trainer's own code may
    use for its token) for ``ROLLOUT_TRAINER_TOKENS`` served a loopback service open to all."""
    known = (
        {f"ROLLOUT_{name.upper()}" for name in Settings.model_fields}
        | SIDECAR_ONLY_VARIABLES
        | REDIS_ACL_VARIABLES
    )
    names = os.environ if environ is None else environ
    lines = []
    for name in sorted(n for n in names if n.startswith("ROLLOUT_") and n not in known):
        close = [MEANT[name]] if name in MEANT else difflib.get_close_matches(name, sorted(known), n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        lines.append(f"{name} is not a setting and is ignored{hint}")
    return lines


def invalid_setting(
    error: ValidationError, flags: Mapping[str, str] | None = None, environ: Mapping[str, str] | None = None
) -> str:
    """The one line ``serve`` prints for a refused setting: where, the value given, and the rule broken.

    The setting is named as the user set it: by its command-line option when ``flags`` (field ->
    option, what the caller passed as keyword arguments) has it, else by the environment variable
    set in ``environ`` (default ``os.environ``, which ``Settings()`` read); pydantic's location is the
    field name, which the user typed nowhere. pydantic's message names the rule (``Input should be
    less than 1``) but not what broke it (``nan``, a typo's extra digit). The value is shown except
    where it may hold a credential: a ``SecretStr`` setting (tokens, the Redis password) and a check
    across settings show none, the Redis URL is shown with its password masked."""
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"])

    def name_of(field: str) -> str:
        return (flags or {}).get(field) or variable_name(field, environ)

    cause = first.get("ctx", {}).get("error")
    why = cause.words(name_of) if isinstance(cause, AcrossSettingsError) else own_words(first["msg"])
    if not where:
        return f"invalid settings: {why}"
    name = _setting_named(where)
    if name is None:  # a keyword no setting has: only a caller's mistake, never the user's
        return f"invalid setting {where}: {why}"
    shown = _shown_value(name, first["input"])
    return f"invalid setting {name_of(name)}{'' if shown is None else '=' + shown}: {why}"


def variable_name(field: str, environ: Mapping[str, str] | None = None) -> str:
    """The environment variable that sets ``field``, spelt as in ``environ`` (default ``os.environ``)
    when one is set there, the first a field reads (``REDIS_URL`` before ``ROLLOUT_REDIS_URL``)
    when several are, and its usual name when none is (the value came from elsewhere)."""
    names = _variable_names(field)
    given = {key.upper(): key for key in (os.environ if environ is None else environ)}
    return next((given[name.upper()] for name in names if name.upper() in given), names[0])


def _variable_names(field: str) -> list[str]:
    """The variables ``field`` is read from, in pydantic-settings' order: its alias choices (their
    field-name choice, for keyword arguments, left out) or ``ROLLOUT_<FIELD>``."""
    alias = Settings.model_fields[field].validation_alias
    if isinstance(alias, AliasChoices):
        return [str(choice) for choice in alias.choices if choice != field]
    return [f"ROLLOUT_{field.upper()}"]


def _shown_value(name: str, value: object) -> str | None:
    """``value`` of setting ``name`` as the error line shows it, or None when it must not be shown
    (see ``invalid_setting``)."""
    if "SecretStr" in str(Settings.model_fields[name].annotation):
        return None
    if name == "redis_url":
        return repr(describe(str(value)))
    return repr(value)


def _setting_named(where: str) -> str | None:
    """The setting an error's location names, by field name or by one of its variable names (pydantic
    reports ``REDIS_URL`` for either of its variables); None for a name no setting has."""
    for name, field in Settings.model_fields.items():
        alias = field.validation_alias
        names = alias.choices if isinstance(alias, AliasChoices) else [alias]
        if where == name or where in names:
            return name
    return None


def _split(secret: SecretStr | None) -> list[str]:
    if secret is None:
        return []
    return [token.strip() for token in secret.get_secret_value().split(",") if token.strip()]
