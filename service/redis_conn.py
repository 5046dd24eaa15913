"""The service's Redis connection: any real server by ``REDIS_URL``, or an embedded one for ``serve``.

``redis://``, ``rediss://`` (TLS) and ``unix://`` (a socket path) URLs are accepted
(``check_redis_url``), with ACL user and password in the URL or in settings. Timeouts are short on
purpose: when Redis is down a request should fail fast with 503 (see ``service.problems.table``) rather than
hang, and redis-py's pool reconnects on the next command, so the service recovers by itself when
Redis returns; no restart, no background reconnect loop.
"""

from __future__ import annotations

import logging
import re
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, TypeVar, cast

import redis
from redis.cluster import ClusterNode, RedisCluster

from service.delivery.errors import REDIS_FAILED
from service.delivery.retries import short_retry
from service.delivery.stored import REPLY_DECODING
from service.embedded import EmbeddedServer

if TYPE_CHECKING:  # pydantic-settings loads in ~0.1 s: a sidecar, which has no Settings, need not
    from service.settings import Settings

_log = logging.getLogger("service.redis")


RedisClient = redis.Redis | RedisCluster  # what every Redis-facing module of the service accepts
Client = TypeVar("Client", bound=RedisClient)
Sleep = Callable[[float], None]


def connect(settings: Settings) -> RedisClient:
    """A pooled client for ``settings.redis_url`` (strings decoded, ``REPLY_DECODING``); connects
    lazily on first use.

    With ``redis_cluster`` the client discovers the cluster from that node and follows MOVED/ASK;
    every multi-key step of the service touches one key (or one schedule's slot), so nothing else
    changes.
    """
    if not settings.redis_url:
        raise ValueError("redis_url is not set; `serve` starts an embedded server when it is absent")
    options: dict[str, Any] = {
        **REPLY_DECODING,  # a stored byte that is not UTF-8 fails no reply (service/delivery/stored.py)
        "socket_connect_timeout": settings.redis_timeout_s,
        "socket_timeout": settings.redis_timeout_s,
        "health_check_interval": 15,
        "retry": short_retry(),
        "retry_on_error": [redis.ConnectionError, redis.TimeoutError],
    }
    if settings.redis_username:
        options["username"] = settings.redis_username
    if settings.redis_password is not None:
        options["password"] = settings.redis_password.get_secret_value()
    if settings.redis_url.startswith("rediss://") and settings.redis_tls_ca_file:
        options["ssl_ca_certs"] = settings.redis_tls_ca_file
    if settings.redis_cluster:
        return RedisCluster.from_url(settings.redis_url, **options)
    return redis.Redis.from_url(settings.redis_url, **options)


class RedisRefusedError(RuntimeError):
    """Redis refused the configured user or password: an operator must fix it, waiting will not."""


_REFUSALS = ("WRONGPASS", "NOAUTH", "username-password", "NOPERM")  # as cluster discovery words them


def refused(error: Exception) -> bool:
    """Whether ``error`` is Redis refusing the credentials (also inside a cluster client's error)."""
    if isinstance(error, redis.exceptions.AuthenticationError | redis.exceptions.NoPermissionError):
        return True
    return any(word in str(error) for word in _REFUSALS)


# The oldest Redis the service runs on: the actuals log numbers its entries by XINFO STREAM's
# entries-added (service/learning/actuals.py), new in 7.0. Valkey reports the Redis level it matches as
# ``redis_version`` (7.2.4 for Valkey 7.2 and 8), so that is the field compared.
MIN_REDIS_VERSION = (7, 0)


class RedisTooOldError(RuntimeError):
    """The server is older than ``MIN_REDIS_VERSION``: an operator must upgrade it, waiting will not."""


def version_refusal(info: Mapping[str, Any], where: str) -> str | None:
    """One line saying why the server at ``where`` cannot serve, from its ``INFO server`` reply; None
    when it can. Without it an old server failed later, on the first reported actual, with an error
    that named neither the version nor the fix."""
    found = str(info.get("redis_version", ""))
    parts = re.match(r"(\d+)\.(\d+)", found)
    if parts is not None and (int(parts[1]), int(parts[2])) >= MIN_REDIS_VERSION:
        return None
    needed = ".".join(map(str, MIN_REDIS_VERSION))
    found = found or "(no redis_version in INFO)"
    return f"Redis {found} at {where} is too old: the service needs Redis {needed} or later, or Valkey"


def require_version(client: RedisClient, url: str) -> None:
    """``RedisTooOldError`` naming the first server (every node of a cluster) below the minimum."""
    if isinstance(client, RedisCluster):
        every = cast(list[ClusterNode], client.get_nodes())  # type: ignore[no-untyped-call]
        nodes = [(node.name, client.get_redis_connection(node)) for node in every]
    else:
        nodes = [(describe(url), client)]
    for where, node_client in nodes:
        refusal = version_refusal(node_client.info("server"), where)
        if refusal is not None:
            raise RedisTooOldError(refusal)


VERSION_WAIT_S = 1.0  # how long a request waits for another's version check before meeting Redis itself


@dataclass
class VersionCheck:
    """``require_version`` once the server answers: at start-up, or, when Redis was down then, on the
    first request that reaches it (``/readyz``, or any route through ``context.context_of``; a
    single-node client connects lazily; the app starts anyway). Requests run on many threads: one
    checks, the others wait for its answer (up to ``VERSION_WAIT_S``: behind a frozen server they
    would queue for its timeouts one after another), so the refusal is logged once. A check that
    failed while others waited is their answer too: each asked the server again, on a connection of
    its own, one more socket timeout behind a frozen server; and at a push sidecar's exit, after its
    connections were closed (``sidecar.hang_up``), that new one held the exit one socket timeout
    (5 s) past the promised drain."""

    client: RedisClient
    url: str
    refusal: str | None = None  # the one-line refusal once checked and too old
    done: bool = False  # checked (a server that answered once is not asked again)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _ended: int = field(default=0, repr=False)  # checks ended (a waiter sees whether one failed meanwhile)

    def check(self) -> str | None:
        """The refusal, or None when new enough; ``redis.RedisError`` while the server is unreachable."""
        ended = self._ended
        if not self._lock.acquire(timeout=VERSION_WAIT_S):  # a server that accepts and does not answer
            raise redis.TimeoutError("another request is still asking the server's version")
        try:
            if not self.done and self._ended != ended:  # failed while this one waited: its answer
                raise redis.ConnectionError("the server did not answer another request's version check")
            return self._check()
        finally:
            self._ended += 1
            self._lock.release()

    def _check(self) -> str | None:
        if not self.done:
            try:
                require_version(self.client, self.url)
            except RedisTooOldError as error:
                self.refusal = str(error)
                _log.error("%s", self.refusal)
            self.done = True
        return self.refusal


def version_known(check: VersionCheck) -> bool:
    """Whether ``check``'s server answered with a version the service runs on; False while it does
    not answer, ``RedisTooOldError`` when it is too old. What a push-mode sidecar that started while
    its plain Redis was down asks before it claims (``service.sidecar.runner``)."""
    try:
        refusal = check.check()
    except REDIS_FAILED:
        return False
    if refusal is not None:
        raise RedisTooOldError(refusal)
    return True


def built_when_reachable(
    build: Callable[[], Client], url: str, interval_s: float = 2.0, sleep: Sleep = time.sleep
) -> Client:
    """``build()``, tried again every ``interval_s`` while the server does not answer (logged)."""
    while True:
        try:
            return build()
        except REDIS_FAILED as error:
            if refused(error):  # waiting will not fix credentials
                message = f"Redis at {describe(url)} refused our credentials: {error}"
                raise RedisRefusedError(message) from None
            _log.warning(
                "Redis at %s unreachable (%s); waiting for it, next try in %.0f s",
                describe(url),
                error,
                interval_s,
            )
            sleep(interval_s)


def describe(url: str) -> str:
    """The URL without its password (``user:pass@`` or a ``password=`` query), for logs and errors.

    Everything before the last ``@`` is credentials, even past a ``?`` or ``/``: a password with an
    unescaped one splits the URL there, and its tail must not be shown as a query or database. A URL
    with no scheme (``user:pass@host``, a refused one) is all ``rest``: its credentials are masked too."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    if "@" in rest:
        credentials, _, rest = rest.rpartition("@")
        user = credentials.split(":", 1)[0]
        shown = user + ":***@" if user and re.fullmatch(r"[A-Za-z0-9_.-]+", user) else "***@"
    else:
        shown = ""
    rest, qmark, query = rest.partition("?")
    if query:
        fields = [f.split("=", 1) for f in query.split("&")]
        query = "&".join(f"{f[0]}=***" if f[0] == "password" else "=".join(f) for f in fields)
    return f"{scheme}{sep}{shown}{rest}{qmark}{query}"


def masked_repr(options: Any, *urls: str) -> str:
    """``repr`` of the dataclass ``options`` without a credential: a field declared ``repr=False`` (a
    password, a key) left out, and the fields ``urls`` as ``describe`` shows them. An options object
    printed to a log or a debugger showed every one whole."""
    shown = []
    for spec in fields(options):
        value = getattr(options, spec.name)
        if spec.repr:
            shown.append(f"{spec.name}={describe(value) if spec.name in urls and value else value!r}")
    return f"{type(options).__name__}({', '.join(shown)})"


def check_redis_url(value: str) -> str:
    """``value`` if redis-py can connect by it; ``ValueError`` saying why not (the service's setting
    and the sidecar's flag both check here, before a connection would fail with a traceback). An
    empty one is refused as such, not read as unset: a variable set to nothing is a mistake in a
    manifest, and the service and its sidecars must not read it two ways."""
    if not value:
        raise ValueError("set but empty; expected a redis://, rediss:// or unix:// URL")
    parsed = urllib.parse.urlsplit(value)
    if parsed.scheme not in ("redis", "rediss", "unix"):
        raise ValueError("expected redis://, rediss:// or unix:// (an http URL or a bare host is not one)")
    try:
        parsed.port  # noqa: B018  # raises ValueError for a port past 65535 or not a number
    except ValueError:  # its message quotes the text, which holds the password when one is unescaped
        raise ValueError(
            "the port is not a number up to 65535 (a password with / # ? @ must be percent-encoded,"
            " or given apart: ROLLOUT_REDIS_PASSWORD)"
        ) from None
    database = parsed.path.strip("/")
    if parsed.scheme != "unix" and database and not database.isdigit():
        if "@" in database:  # a password's '/' split the URL: what follows it is part of the password
            raise ValueError(
                "the database (after the host) is not a number: a password with / # ? @ must be"
                " percent-encoded, or given apart: ROLLOUT_REDIS_PASSWORD"
            )
        raise ValueError(f"database {database!r} is not a number")
    return value


def check_redis_url_flag(value: str) -> str:
    """``check_redis_url`` for a command-line flag: its ``ValueError`` names the flag and the URL
    with its password masked, as every command that takes ``--redis-url`` reports it."""
    try:
        return check_redis_url(value)
    except ValueError as error:
        raise ValueError(f"redis_url={describe(value)!r}: {error}") from None


@contextmanager
def redis_for(
    settings: Settings, stop_at: Callable[[Callable[[], None]], None] | None = None
) -> Iterator[Settings]:
    """Yield settings with a usable ``redis_url``: as given, or an embedded server's, stopped as the
    block ends, or, where ``stop_at`` is given, by ``stop_at``'s call of the stop it is handed: the
    process's owner (``serve``) stops it after the exit's waits, which still write to it."""
    if settings.redis_url:
        yield settings
        return
    server = EmbeddedServer().start()  # a start that fails ends what it started

    def stop() -> None:
        server.stop()
        _log.info("embedded valkey-server stopped")

    try:
        _log.info("no REDIS_URL: started an embedded valkey-server", extra={"redis_url": server.url})
        yield settings.model_copy(update={"redis_url": server.url})
    finally:
        if stop_at is None:
            stop()
        else:
            server.keep_through_exit()
            stop_at(stop)
