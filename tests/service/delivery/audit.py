"""An independent audit of one schedule's raw keys: where every item is, and what was accepted.

It reads the keys directly (not through the protocol's own counters), so a protocol bug cannot hide
itself: every item must be in exactly one place that agrees with its recorded state, and the results
stream must hold at most one accepted result per item.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis

from service.delivery.keys import schedule_keys


@dataclass(frozen=True)
class Audit:
    """Where the items of one schedule are, and the two numbers every fault test reports."""

    total: int  # items published
    queued: int  # in exactly one queue
    running: int  # under a lease
    done: int  # accepted
    dead: int  # dead-lettered
    lost: int  # items in no place at all (or whose state disagrees with their place)
    accepted_twice: int  # items with more than one accepted result in the stream
    problems: list[str] = field(default_factory=list)  # what exactly is wrong, for the assert message
    counts_agree: bool = True  # the protocol's progress counters match this recount


@dataclass(frozen=True)
class _Raw:
    """One schedule's raw keys as read: every hash, list, zset and stream the audit checks, and the
    content of every queue and steal index found under its base."""

    hashes: dict[str, dict[Any, Any]]  # suffix -> HGETALL (st, counts, pace, need, grp)
    deadlines: list[tuple[Any, float]]
    dead: list[Any]
    results: list[tuple[Any, dict[Any, Any]]]
    work: list[tuple[Any, float]]
    meta: list[Any]  # HMGET meta pinq holds
    pinned: list[Any]  # HKEYS pin
    lists: dict[str, list[Any]]  # key -> LRANGE, for every q:, u: and h: key found and every pinq queue


def _read(client: redis.Redis, base: str) -> _Raw:
    """Every key the audit checks, in one walk of the key space and two pipelines (not ~20 calls and
    four walks: the state machine audits after each of its ~3,000 steps, on the worker's shared server)."""
    found = [str(n) for n in client.scan_iter(match=f"{base}:*", count=1000)]
    hashes = ("st", "counts", "pace", "need", "grp")
    first: Any = client.pipeline(transaction=False)
    for suffix in hashes:
        first.hgetall(f"{base}:{suffix}")
    first.zrange(f"{base}:deadlines", 0, -1, withscores=True)
    first.lrange(f"{base}:dead", 0, -1)
    first.xrange(f"{base}:results")
    first.zrange(f"{base}:work", 0, -1, withscores=True)
    first.hmget(f"{base}:meta", ["pinq", "holds"])
    first.hkeys(f"{base}:pin")
    read = first.execute()
    pinq = json.loads(str(read[-2][0])) if read[-2][0] else []
    names = [n for n in found if n.startswith((f"{base}:q:", f"{base}:u:", f"{base}:h:"))]
    names += [f"{base}:q:{w}" for w in pinq if f"{base}:q:{w}" not in names]
    second: Any = client.pipeline(transaction=False)
    for name in names:
        second.lrange(name, 0, -1)
    lists = dict(zip(names, second.execute(), strict=True))
    deadlines, dead, results, work, meta, pinned = read[5:]
    return _Raw(dict(zip(hashes, read[:5], strict=True)), deadlines, dead, results, work, meta, pinned, lists)


def _names(raw: _Raw, base: str, kind: str) -> list[str]:
    """The ``<base>:<kind>:*`` keys that exist (a queue ``pinq`` names but nobody filled is not one)."""
    return [n for n, items in raw.lists.items() if n.startswith(f"{base}:{kind}:") and items]


def audit(client: redis.Redis, schedule_id: str, prefix: str = "rs") -> Audit:
    """Recount one schedule from its raw keys."""
    b = schedule_keys(schedule_id, prefix).base
    raw = _read(client, b)
    records = {str(k): str(v).split("|") for k, v in raw.hashes["st"].items()}
    state = {k: r[0] for k, r in records.items()}
    where = {k: r[5] for k, r in records.items()}
    places: dict[str, list[str]] = {k: [] for k in state}
    for name in _names(raw, b, "q"):
        for key in raw.lists[name]:
            places.setdefault(str(key), []).append("q")
    deadlines = raw.deadlines
    for key, score in deadlines:
        places.setdefault(str(key), []).append("r")
        if str(key) in records and int(records[str(key)][3]) != int(score):
            places[str(key)].append("deadline index disagrees with the record")
    for key, s in state.items():  # done lives only in the record; the stream must confirm it
        if s == "d":
            places[key].append("d")
    for entry in raw.dead:
        places.setdefault(json.loads(str(entry))["key"], []).append("x")
    accepted = Counter(str(f["key"]) for _, f in raw.results)
    problems = [
        f"{k}: state {state.get(k)!r} but places {p}" for k, p in places.items() if p != _place(state.get(k))
    ]
    problems += [f"{k}: done but not in results" for k, p in places.items() if p == ["d"] and not accepted[k]]
    problems += [f"{k}: in results but not done" for k in accepted if state.get(k) != "d"]
    by_state = Counter(state.values())
    recount: Counter[str] = Counter()
    for key, s in state.items():
        recount[s] += 1
        recount[f"{s}:{where[key]}".replace("x:", "f:")] += 1
    counters = {str(k): int(v) for k, v in raw.hashes["counts"].items()}
    recount["f"] = recount.pop("x", 0)
    problems += _work_problems(raw, records)
    problems += _steal_index_problems(raw, b)
    agree = all(counters.get(k, 0) == v for k, v in recount.items()) and all(
        v == recount.get(k, 0) for k, v in counters.items()
    )
    return Audit(
        total=len(state),
        queued=by_state["q"],
        running=by_state["r"],
        done=by_state["d"],
        dead=by_state["x"],
        lost=sum(1 for k, p in places.items() if not p and state.get(k) != "c")
        + sum(1 for k in places if k not in state),
        accepted_twice=sum(1 for n in accepted.values() if n > 1),
        problems=problems,
        counts_agree=agree,
    )


def _place(state: str | None) -> list[str | None]:
    """Where an item in ``state`` must be: its own state's place, none for a cancelled item (the
    trainer cancelled the schedule: it left every queue and lease, and is nowhere by design)."""
    return [] if state == "c" else [state]


def _work_problems(raw: _Raw, records: dict[str, list[str]]) -> list[str]:
    """The steal index ``P:work`` must hold exactly the non-empty worker queues, each scored with its
    queued predicted tokens times the worker's pace (seconds per token; ``*`` = the default)."""
    paces = {str(w): float(p) for w, p in raw.hashes["pace"].items()}
    expected: dict[str, float] = {}
    for rec in records.values():
        if rec[0] == "q" and rec[5] != "*":
            pace = paces.get(rec[5], paces.get("*", 1.0))
            expected[rec[5]] = expected.get(rec[5], 0.0) + float(rec[4]) * pace
    actual = {str(w): float(s) for w, s in raw.work}
    tolerance = 1e-9 * (1.0 + sum(expected.values()))
    if set(actual) != set(expected):
        return [f"work index names {sorted(actual)}, queues with work are {sorted(expected)}"]
    return [f"work[{w}] = {actual[w]} != {v}" for w, v in expected.items() if abs(actual[w] - v) > tolerance]


def _steal_index_problems(raw: _Raw, base: str) -> list[str]:
    """Each steal index (``lua/index.lua``) must equal what it stands for, in queue order: ``P:u:<w>``,
    for a queue ``P:meta`` ``pinq`` names, its unpinned items; ``P:h:<cap>:<w>``, for every worker
    queue and each cap in ``holds``, its unpinned items that cap holds (``P:need``; under prefix
    affinity, those whose whole group it holds, recomputed here from ``P:grp``). No other index may
    exist: a steal reads the index alone, so one out of step hands out or hides items."""
    pinq, holds = (json.loads(str(v)) if v else [] for v in raw.meta)
    pinned = {str(k) for k in raw.pinned}
    needs = {str(k): int(v) for k, v in raw.hashes["need"].items()}
    groups = {str(k): str(v) for k, v in raw.hashes["grp"].items()}  # affinity only
    if groups:
        largest: dict[str, int] = {}
        for key, group in groups.items():
            largest[group] = max(largest.get(group, 0), needs.get(key, 0))
        needs = {key: largest[group] for key, group in groups.items()}
    workers = {n.removeprefix(f"{base}:q:") for n in _names(raw, base, "q")}
    workers.discard("*")
    expected: dict[str, list[str]] = {}
    for worker in set(pinq) | (workers if holds else set()):
        free = [str(k) for k in raw.lists[f"{base}:q:{worker}"] if str(k) not in pinned]
        if worker in pinq:
            expected[f"{base}:u:{worker}"] = free
        for cap in holds:
            expected[f"{base}:h:{cap}:{worker}"] = [k for k in free if needs.get(k, 0) <= cap]
    found = set(_names(raw, base, "u") + _names(raw, base, "h"))
    problems = [f"{name}: an index no queue has" for name in sorted(found - set(expected))]
    for name, members in expected.items():
        index = raw.lists.get(name, [])
        if [str(k) for k in index] != members:
            problems.append(f"{name} = {[str(k) for k in index]} != {members}")
    return problems


RecordProperty = Callable[[str, object], None]  # pytest's ``record_property`` fixture


def report(name: str, result: Audit, record_property: RecordProperty) -> None:
    """Print and record the two numbers every fault test is judged by, then check them all."""
    print(f"{name}: lost={result.lost} accepted_twice={result.accepted_twice}")
    record_property(f"{name} lost", result.lost)
    record_property(f"{name} accepted_twice", result.accepted_twice)
    assert (result.lost, result.accepted_twice, result.problems, result.counts_agree) == (0, 0, [], True)


def assert_sound(client: redis.Redis, schedule_id: str) -> None:
    """Fail unless every item of the schedule is in exactly one place and none was accepted twice."""
    result = audit(client, schedule_id)
    assert (result.lost, result.accepted_twice, result.problems, result.counts_agree) == (0, 0, [], True)
