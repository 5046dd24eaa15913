"""The calls with scripts a real client is asked to make, each as the hash slots of its scripts' keys:
a walk's or a keeper tick's calls counted, not timed (timings do not hold on a loaded host). A spy on
one client object: every call still goes to the real server, as ever; nothing is answered in its
place. A call is one ``EVAL``/``EVALSHA``, one pipeline's ``execute`` or ``send_cluster_commands``,
or a command such a cluster pipeline sends again on its own after it (its resend of each command a
stalled master timed out: review50b); on a cluster, also a pipeline's ``execute`` on one node's own
client (``get_redis_connection``: the step keeper's pipeline per master, cluster51). The client's own
retries inside a call are not counted: a stalled master's call is one, however many timeouts it
waits."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any

import redis
from redis.cluster import ClusterPipeline, RedisCluster
from redis.crc import key_slot

SCRIPTS = frozenset({"EVAL", "EVALSHA"})  # every call of the delivery protocol and the keepers
Calls = list[frozenset[int]]  # each call made, as the slots of its scripts' keys


def count_scripts(client: redis.Redis | RedisCluster) -> Calls:
    """From now on, each call with scripts ``client`` is asked to make, in order."""
    calls: Calls = []
    send: Callable[..., Any] = client.execute_command

    def sent(*args: Any, **options: Any) -> Any:
        if _script(args):
            calls.append(frozenset({_slot(args)}))
        return send(*args, **options)

    client.execute_command = sent  # type: ignore[method-assign]
    make: Callable[..., Any] = client.pipeline
    client.pipeline = lambda *args, **options: _counted(make(*args, **options), calls)  # type: ignore[method-assign]
    if isinstance(client, RedisCluster):
        _count_nodes(client, calls)
    return calls


def _count_nodes(client: RedisCluster, calls: Calls) -> None:
    """Each node client ``client`` hands out (``get_redis_connection``) counts its pipelines' calls in
    ``calls``; the cluster's own calls through it (a connection taken, not a pipeline) are not."""
    connection: Callable[..., Any] = client.get_redis_connection

    def counted_node(node: Any) -> Any:
        node_client = connection(node)
        into: set[int] = node_client.__dict__.setdefault("_counted_into", set())  # wrapped once a spy
        if id(calls) not in into:
            into.add(id(calls))
            make: Callable[..., Any] = node_client.pipeline
            node_client.pipeline = lambda *args, **options: _counted(make(*args, **options), calls)
        return node_client

    client.get_redis_connection = counted_node  # type: ignore[method-assign]


def toward(calls: Calls, slots: Collection[int]) -> int:
    """How many of ``calls`` went to ``slots`` (a master's share, a dropped range, one slot)."""
    return sum(1 for call in calls if any(slot in slots for slot in call))


def _counted(pipe: Any, calls: Calls) -> Any:
    """``pipe`` whose ``execute`` is counted as one call, with the slots of the scripts queued."""
    queued: set[int] = set()
    queue: Callable[..., Any] = pipe.execute_command
    run: Callable[..., Any] = pipe.execute

    def queue_counted(*args: Any, **options: Any) -> Any:
        if _script(args):
            queued.add(_slot(args))
        return queue(*args, **options)

    def run_counted(*args: Any, **options: Any) -> Any:
        if queued:
            calls.append(frozenset(queued))
            queued.clear()
        return run(*args, **options)

    def sent_counted(stack: Sequence[Any], *args: Any, **options: Any) -> Any:
        slots = {_slot(command.args) for command in stack if _script(command.args)}
        if slots:
            calls.append(frozenset(slots))
        return send_stack(stack, *args, **options)

    def resent_counted(*args: Any, **options: Any) -> Any:
        if _script(args):
            calls.append(frozenset({_slot(args)}))
        return resend(*args, **options)

    pipe.execute_command, pipe.execute = queue_counted, run_counted
    if isinstance(pipe, ClusterPipeline):
        send_stack: Callable[..., Any] = pipe.send_cluster_commands
        resend: Callable[..., Any] = pipe.parent_execute_command
        pipe.send_cluster_commands, pipe.parent_execute_command = sent_counted, resent_counted  # type: ignore[method-assign]
    return pipe


def _script(args: Sequence[Any]) -> bool:
    return str(args[0]).upper() in SCRIPTS and int(args[2]) > 0


def _slot(args: Sequence[Any]) -> int:
    return key_slot(str(args[3]).encode())
