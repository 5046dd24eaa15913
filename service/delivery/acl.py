"""Least-privilege Redis ACL users for the service and the sidecars: ONE definition of what each may run.

Every sidecar used to hold the service's Redis credentials, so one compromised worker pod could run
FLUSHALL, CONFIG SET, KEYS, SHUTDOWN or DEBUG and touch any key of any tenant. Here are the commands
each role needs and the keys it may touch (``<prefix>:*``: every key of ``keys.py`` starts so), from
which ``rollout-scheduler redis-acl`` prints ``ACL SETUSER`` lines or an aclfile.

How the lists were found (docs/experiments.md, "Redis ACL users"): the whole loop ran under users
holding them, and Redis's ``ACL LOG`` named each refusal; each command was then dropped in turn to
see which the loop sends. A command left off either list shows up there again
(``tests/deploy/test_redis_acl_loop.py``, on one server and on a Redis Cluster). Commands our Lua
scripts run are checked against the calling user too (Redis 7), so a role also holds every command
the text of each script it calls names, rare branches included (``test_redis_acl_definition.py``).
Scripts run by EVALSHA; redis-py's ``Script`` loads a body on NOSCRIPT (``SCRIPT LOAD``), which a
restarted or failed-over server answers, so both roles hold it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

# Sent on every connection by redis-py (its library name and version; a refusal is ignored by the
# client, yet logged by ACL LOG), the version check at start (``INFO server``) and health (``PING``).
_CONNECTION = ("client|setinfo", "info", "ping")

# Scripts: the delivery's by EVALSHA (loaded on NOSCRIPT), a few one-line ones by EVAL (the sidecar's
# presence release at stop, ``service/sidecar/takeover.py``). SCRIPT LOAD with EVALSHA can run any
# script already, so EVAL widens nothing: what a script runs is checked against the caller's ACL.
_SCRIPTS_RUN = ("evalsha", "eval", "script|load")

# The delivery scripts a sidecar runs (``SIDECAR_SCRIPTS``: each with ``common.lua`` and ``index.lua``
# before it) name these, and so do its one-line scripts (``sidecar/takeover.py``, the lease clock of
# ``delivery/views.py``); its Python-side calls are among them too: its inbox (ZRANGE), a schedule's
# settings (HMGET), a cancel (HEXISTS), its presence key (SET, GET), a settled schedule's retire (ZREM).
SIDECAR_SCRIPTS = ("claim", "steal", "heartbeat", "complete", "release", "reap", "reset")
_DELIVERY = (
    "time",
    "get",
    "set",
    "del",
    "exists",
    "pexpireat",
    "pttl",
    "hget",
    "hmget",
    "hset",
    "hdel",
    "hexists",
    "hgetall",
    "hincrby",
    "lrange",
    "llen",
    "lindex",
    "lpop",
    "lpush",
    "rpush",
    "lrem",
    "ltrim",
    "zadd",
    "zrem",
    "zscore",
    "zrange",
    "zrevrange",
    "zrangebyscore",
    "zincrby",
    "xadd",
)

# The service's alone: what its other scripts name (publish, cancel and planning marks: HVALS;
# the announce and step indexes: SADD, ZCOUNT, ZREMRANGEBYSCORE, PEXPIRE; the actuals append: XINFO
# STREAM, XLEN; the retrain lock and fence: EXPIRE, INCR), its reads of results and actuals (XRANGE,
# XREVRANGE, XREAD), of a step's schedules (SMEMBERS) and of the speed store (HKEYS), and transactions.
_SERVICE_ONLY = (
    "hvals",
    "sadd",
    "zcount",
    "zremrangebyscore",
    "pexpire",
    "expire",
    "incr",
    "xlen",
    "xinfo|stream",
    "xrange",
    "xrevrange",
    "xread",
    "smembers",
    "hkeys",
    "multi",
    "exec",
)

# On Redis Cluster only, what a cluster client reads when built: the slot map and the command table
# (redis-py finds each command's keys from it), and ``/readyz``'s ``cluster_state`` (CLUSTER INFO:
# without it the probe falls back to PING and stays 200 while the cluster is down). Read-only metadata.
# And ASKING, which redis-py sends before retrying a command an ASK redirect sent to the importing
# master while a slot moves (an operator's reshard): without it every call on a key of that slot is
# refused until the move ends. The loop never reshards (``test_redis_acl_cluster.py`` does).
CLUSTER_COMMANDS: tuple[str, ...] = ("cluster|slots", "cluster|info", "command", "asking")

SIDECAR_COMMANDS: tuple[str, ...] = (*_CONNECTION, *_SCRIPTS_RUN, *_DELIVERY)
SERVICE_COMMANDS: tuple[str, ...] = (*SIDECAR_COMMANDS, *_SERVICE_ONLY)


@dataclass(frozen=True, slots=True)
class Role:
    """One kind of Redis client of a deployment: the user it connects as and what it may run."""

    name: str  # "service" or "sidecar"
    default_user: str  # the ACL user name ``redis-acl`` prints unless told another
    commands: tuple[str, ...]  # lower case, ``container|sub`` for a subcommand
    password_env: str  # where ``redis-acl`` reads this user's password from


SERVICE = Role("service", "rollout-service", SERVICE_COMMANDS, "ROLLOUT_ACL_SERVICE_PASSWORD")
SIDECAR = Role("sidecar", "rollout-sidecar", SIDECAR_COMMANDS, "ROLLOUT_ACL_SIDECAR_PASSWORD")
ROLES = (SERVICE, SIDECAR)


def key_pattern(prefix: str) -> str:
    """The one key glob a role may touch: every key ``keys.py`` builds on ``prefix`` (``check_prefix``
    keeps globs and braces out of a prefix, so this matches nothing else but a longer prefix's keys)."""
    return f"~{prefix}:*"


@dataclass(frozen=True, slots=True)
class Grant:
    """What one printed user is: its role, name and password (None: printed off), and where."""

    role: Role
    user: str
    prefix: str
    password: str | None
    cluster: bool = False  # add ``CLUSTER_COMMANDS`` (a Redis Cluster deployment)


def rules(grant: Grant) -> list[str]:
    """The ACL rules of the grant's user: reset, then on with the password's SHA-256 (never the plain
    text: the lines end up in shells and files), or off when no password is given, so a printed
    placeholder user can log no one in; the key pattern; no Pub/Sub channel; no command but its own."""
    password = grant.password
    login = ["on", f"#{hashlib.sha256(password.encode()).hexdigest()}"] if password else ["off"]
    granted = (*grant.role.commands, *(CLUSTER_COMMANDS if grant.cluster else ()))
    commands = [f"+{command}" for command in granted]
    return ["reset", *login, key_pattern(grant.prefix), "resetchannels", "-@all", *commands]


def setuser_line(grant: Grant) -> str:
    """``ACL SETUSER <user> <rules>``: one line ``redis-cli`` runs as it is."""
    return " ".join(["ACL", "SETUSER", grant.user, *rules(grant)])


def aclfile_line(grant: Grant) -> str:
    """``user <user> <rules>``: one line of an aclfile (``aclfile`` in redis.conf, ``ACL LOAD``)."""
    return " ".join(["user", grant.user, *rules(grant)])


# Where ``redis-acl --aclfile`` reads the password of Redis's own ``default`` user.
DEFAULT_PASSWORD_ENV = "ROLLOUT_ACL_DEFAULT_PASSWORD"


def default_aclfile_line(password: str | None) -> str:
    """The aclfile line of Redis's own ``default`` user (the operator's, the health check's). A server
    started with an aclfile ignores ``requirepass`` (valkey 8, Redis 7): a file without this line leaves
    ``default`` on with no password and every right, open to whoever reaches the port. On with the
    password's SHA-256 and every key, channel and command; off when no password is given."""
    login = ["on", f"#{hashlib.sha256(password.encode()).hexdigest()}"] if password else ["off"]
    return " ".join(["user", "default", "reset", *login, "~*", "&*", "+@all"])
