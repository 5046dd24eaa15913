"""The delivery Lua scripts, loaded once per client and called by SHA (EVALSHA).

Each operation is one file in ``lua/``; ``common.lua`` (key derivation, clock, lease helpers) and
``index.lua`` (the steal indexes' upkeep) are prepended to every one, so a script is a single
self-contained atomic step. ``evaluate`` sends EVALSHA and, on NOSCRIPT (what a restarted server,
or a failed-over cluster node, answers), the body, so callers never see a missing script.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from typing import Any, cast

import redis
from redis.cluster import RedisCluster
from redis.commands.core import Script

OPERATIONS = (
    "publish",
    "claim",
    "steal",
    "heartbeat",
    "complete",
    "release",
    "reap",
    "cancel",
    "reset",
    "planning",
)


@cache
def script_source(operation: str) -> str:
    """Return the full Lua text of one operation: the shared preamble, then the operation's body."""
    lua = files("service.delivery") / "lua"
    preamble = (lua / "common.lua").read_text() + "\n" + (lua / "index.lua").read_text()
    return preamble + "\n" + (lua / f"{operation}.lua").read_text()


@dataclass(frozen=True, slots=True)
class Scripts:
    """The registered scripts of one client; call them as ``scripts.claim(keys=..., args=...)``."""

    publish: Script  # write a schedule atomically and idempotently
    claim: Script  # lease from the head of the own queue, then the shared FIFO
    steal: Script  # lease from the tail of the queue with most predicted work
    heartbeat: Script  # extend current leases
    complete: Script  # accept a result once per item
    release: Script  # hand leases back (graceful) or report them failed
    reap: Script  # expire lapsed leases
    cancel: Script  # end every queued and running item of a schedule the trainer gave up
    reset: Script  # hand back what a worker's earlier process still holds (a restarted push sidecar)
    planning: Script  # mark or unmark a POST /schedule in flight under its id


def register(client: Any) -> Scripts:
    """Register every operation's script on ``client`` (a Redis or RedisCluster)."""
    return Scripts(**{op: client.register_script(script_source(op)) for op in OPERATIONS})


def evaluate(client: Any, script: Script, keys: list[Any], args: list[Any]) -> Any:
    """Run ``script`` on the node of ``keys``: by SHA, or by its body where that node has not got it.

    redis-py's ``Script`` reloads a missing script with SCRIPT LOAD, which a cluster client sends to
    every master: with one master down (its connection refused) that failed, and every script not yet
    cached on a live node failed with it, on the slots still served too (measured: helper claimslot48).
    Sent as EVAL, the body goes to the keys' node alone, which caches it as SCRIPT LOAD would."""
    try:
        return client.evalsha(script.sha, len(keys), *keys, *args)
    except redis.exceptions.NoScriptError:
        if isinstance(client, RedisCluster):
            return client.eval(cast(str, script.script), len(keys), *keys, *args)
        return script(keys=keys, args=args)
