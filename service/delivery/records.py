"""The plain frozen dataclasses written to and leased from the delivery protocol.

The vocabulary shared by the publisher (service), the sidecar (workers) and the trainer (results):
an item to run, a lease on it, a result for it. What readers of a schedule see (progress, dead
letters, its settings) is in ``progress``; what each operation answers (outcomes, reap and cancel
reports) in ``outcomes``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler.errors import InvalidInputError
from service.delivery.keys import (
    DEFAULT_LEASE_TTL_MS,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_RETENTION_S,
    SHARED_QUEUE,
)
from service.names import NAME_MAX_LENGTH


@dataclass(frozen=True, slots=True)
class DeliveryItem:
    """One trajectory to generate, as a worker receives it."""

    key: str  # trajectory key ``prompt_id#sample_idx``; unique within the schedule
    prompt_id: str  # the prompt this sample answers
    sample_idx: int  # 0..n-1 within the prompt's group
    prompt_tokens: int  # prompt length, tokens
    max_new_tokens: int  # generation cap (the engine's ``max_tokens``)
    predicted_tokens: float  # planned output length; drives steal choice and KV admission
    payload: Mapping[str, Any] = field(default_factory=dict)  # JSON-safe: prompt text, messages...
    group_id: str = ""  # prefix-sharing group (Trajectory.group_id); empty: the prompt id
    pinned: bool = False  # only its planned worker may run it: never stolen (Trajectory.pinned_worker)
    # when the plan predicts its planned worker starts and finishes it, ms after publication
    # (scheduler.deadlines); the steal script leaves it to its owner unless the thief would finish it
    # by then (keys.py, P:due). None: no deadline (shared FIFO, or a publisher without an inventory)
    planned_start_ms: int | None = None
    deadline_ms: int | None = None

    @property
    def group(self) -> str:
        """The prefix-sharing group a steal keeps together under prefix affinity (as ``Trajectory.group``)."""
        return self.group_id or self.prompt_id

    def to_json(self) -> dict[str, Any]:
        """The JSON object stored in Redis and handed to the claimer."""
        return {
            "key": self.key,
            "prompt_id": self.prompt_id,
            "sample_idx": self.sample_idx,
            "prompt_tokens": self.prompt_tokens,
            "max_new_tokens": self.max_new_tokens,
            "predicted_tokens": self.predicted_tokens,
            "payload": dict(self.payload),
            "group_id": self.group_id,
            "pinned": self.pinned,
            "planned_start_ms": self.planned_start_ms,
            "deadline_ms": self.deadline_ms,
        }

    @property
    def reservation_tokens(self) -> int:
        """KV tokens the item will hold at its PREDICTED final length: prompt + min(predicted, cap).

        The one formula behind KV admission (the sidecar's ``holdings``) and the KV steal gate (the
        steal script), so both judge an item by the same number, as the simulator does.
        """
        return self.prompt_tokens + math.ceil(min(self.predicted_tokens, float(self.max_new_tokens)))

    @property
    def need_tokens(self) -> int:
        """KV tokens a worker must hold to run the item at its cap, prompt + max_new_tokens: an engine
        refuses a request past its context, so no claim or steal gives it to a smaller cache."""
        return self.prompt_tokens + self.max_new_tokens

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DeliveryItem:
        """Rebuild an item from its stored JSON object."""
        return cls(
            key=str(data["key"]),
            prompt_id=str(data["prompt_id"]),
            sample_idx=int(data["sample_idx"]),
            prompt_tokens=int(data["prompt_tokens"]),
            max_new_tokens=int(data["max_new_tokens"]),
            predicted_tokens=float(data["predicted_tokens"]),
            payload=dict(data.get("payload") or {}),
            group_id=str(data.get("group_id", "")),
            pinned=bool(data.get("pinned", False)),
            planned_start_ms=_optional_int(data.get("planned_start_ms")),
            deadline_ms=_optional_int(data.get("deadline_ms")),
        )

    def due(self) -> str:
        """The item's ``P:due`` line for publish.lua: ``start|end`` in ms after publication, or ``-``."""
        if self.deadline_ms is None:
            return "-"
        start = self.deadline_ms if self.planned_start_ms is None else self.planned_start_ms
        return f"{int(start)}|{int(self.deadline_ms)}"


@dataclass(frozen=True, slots=True)
class LeaseSettings:
    """How long a lease lives without a heartbeat, and how often an item may be retried."""

    lease_ttl_ms: int = DEFAULT_LEASE_TTL_MS  # deadline = last heartbeat + this
    max_attempts: int = DEFAULT_MAX_ATTEMPTS  # leases that lapse or fail before dead-lettering
    retention_s: int = DEFAULT_RETENTION_S  # the schedule's keys (and results) expire after this

    def validate(self) -> None:
        """Reject settings that would make leases or retention meaningless."""
        if self.lease_ttl_ms < 1:
            raise InvalidInputError("lease.lease_ttl_ms", self.lease_ttl_ms, "must be >= 1")
        if self.max_attempts < 1:
            raise InvalidInputError("lease.max_attempts", self.max_attempts, "must be >= 1")
        if self.retention_s < 1:
            raise InvalidInputError("lease.retention_s", self.retention_s, "must be >= 1")


@dataclass(frozen=True, slots=True)
class PublishedSchedule:
    """Everything the publisher writes for one schedule."""

    schedule_id: str  # globally unique; the hash tag of every key of this schedule
    queues: Mapping[str, tuple[DeliveryItem, ...]]  # worker id -> ordered items (head first)
    kv_admission: bool = False  # the sidecar should admit by KV reserved at predicted length
    lease: LeaseSettings = LeaseSettings()  # lease ttl, attempts, retention
    shared: tuple[DeliveryItem, ...] = ()  # shared FIFO any worker pulls once its own queue drains
    # worker id -> predicted seconds per predicted token (from the plan): the steal victim is the
    # queue with the most predicted SECONDS left; workers not named get the median (all absent: 1.0)
    seconds_per_token: Mapping[str, float] = field(default_factory=dict)
    # the request's prefix affinity: a steal then moves a whole unstarted group or nothing
    prefix_affinity: bool = False
    # worker id -> its KV cache in tokens: no claim or steal hands it an item whose need_tokens
    # exceed it (the simulator's can_hold); workers not named are not limited
    kv_capacity_tokens: Mapping[str, int] = field(default_factory=dict)
    # what the plan predicts, in seconds after publication: the step's makespan and each worker's
    # finish; stored for GET /schedule/{id} to tell a late step from one on plan (None/absent: unknown)
    predicted_makespan_s: float | None = None
    planned_finish_s: Mapping[str, float] = field(default_factory=dict)
    # the request's drained workers (``drain: true``): not announced, and no claim, steal or failed
    # item's retry hands them anything (the simulator's excluded workers)
    drained: frozenset[str] = frozenset()
    # the engine whose rules the plan was made for (``scheduler.sim_rules``), stored for what reads the
    # schedule later on any replica (``keys.ENGINE``); None: not stored, readers assume their default
    engine: str | None = None

    def validate(self) -> None:
        """Raise ``InvalidInputError`` naming the first bad field; called before anything is written."""
        check_name("schedule_id", self.schedule_id)
        if self.engine is not None:
            check_name("engine", self.engine)
        self.lease.validate()
        for worker, pace in self.seconds_per_token.items():
            if worker not in self.queues:
                raise InvalidInputError("seconds_per_token", worker, "names a worker without a queue")
            if not math.isfinite(pace) or pace <= 0:
                raise InvalidInputError(f"seconds_per_token[{worker}]", pace, "must be finite, > 0")
        for worker, tokens in self.kv_capacity_tokens.items():
            if worker not in self.queues:
                raise InvalidInputError("kv_capacity_tokens", worker, "names a worker without a queue")
            if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
                raise InvalidInputError(f"kv_capacity_tokens[{worker}]", tokens, "must be an integer >= 1")
        seen: set[str] = set()
        for worker, items in self.queues.items():
            check_name("queues", worker)
            if worker == SHARED_QUEUE:
                raise InvalidInputError("queues", worker, "reserved for the shared queue")
            for item in items:
                _check_item(f"queues[{worker}]", item, seen)
        for item in self.shared:
            _check_item("shared", item, seen)
            if item.pinned:
                raise InvalidInputError(
                    f"shared[{item.key}].pinned", True, "a pinned item needs its worker's queue"
                )
        if self.prefix_affinity:
            self._check_groups()
        self._check_plan_times()
        self._check_drained()

    def _check_drained(self) -> None:
        """A drained worker has a valid name and nothing queued (it takes nothing: its queue would
        wait forever), and some worker not drained is left to take the shared FIFO."""
        for worker in sorted(self.drained):
            check_name("drained", worker)
            if self.queues.get(worker):
                raise InvalidInputError(f"queues[{worker}]", "items", "a drained worker takes nothing")
        if self.shared and self.drained and self.drained.issuperset(self.queues):
            raise InvalidInputError("drained", sorted(self.drained), "every worker is drained")

    def _check_plan_times(self) -> None:
        """The plan's predicted times are finite seconds >= 0, each of a worker with a queue."""
        times = {f"planned_finish_s[{w}]": s for w, s in self.planned_finish_s.items()}
        if self.predicted_makespan_s is not None:
            times["predicted_makespan_s"] = self.predicted_makespan_s
        for where, seconds in times.items():
            if isinstance(seconds, bool) or not math.isfinite(seconds) or seconds < 0:
                raise InvalidInputError(where, seconds, "must be finite seconds >= 0")
        for worker in self.planned_finish_s:
            if worker not in self.queues:
                raise InvalidInputError("planned_finish_s", worker, "names a worker without a queue")

    def _check_groups(self) -> None:
        """Under prefix affinity: one group per line (publish.lua's format), and no sample of a pinned
        group in the shared FIFO, since a pin on one sample binds the whole group to its worker
        (``publisher.pinned_workers``); a claimer would take it from the FIFO and split the group."""
        pinned = {item.group for item in self.items() if item.pinned}
        for item in self.items():
            if not item.group or any(c in item.group for c in "\n\r"):
                raise InvalidInputError(
                    f"items[{item.key}].group_id", item.group, "must be one non-empty line"
                )
        for item in self.shared:
            if item.group in pinned:
                raise InvalidInputError(
                    f"shared[{item.key}].group_id", item.group, "its group is pinned: queue it on that worker"
                )

    def items(self) -> list[DeliveryItem]:
        """Every item, in publish order: each worker's queue, then the shared FIFO."""
        return [item for queue in (*self.queues.values(), self.shared) for item in queue]

    @property
    def total(self) -> int:
        """Number of items in the schedule."""
        return sum(len(items) for items in self.queues.values()) + len(self.shared)

    def paces(self) -> dict[str, float]:
        """Seconds per predicted token of every worker, plus the default under ``SHARED_QUEUE``.

        The default (the median of the stated paces, 1.0 when none is stated) scores the queue of a
        worker the plan did not describe, e.g. a thief outside the plan whose lease was requeued.
        """
        stated = sorted(self.seconds_per_token.values())
        default = stated[len(stated) // 2] if stated else 1.0
        paces = {w: float(self.seconds_per_token.get(w, default)) for w in self.queues}
        paces[SHARED_QUEUE] = default
        return paces


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


def check_name(field_name: str, value: str) -> None:
    """A schedule or worker id fit for key names and records; as long as the API lets one be
    (``NAME_MAX_LENGTH``), so a step the API accepted is never refused here. A publish checks its
    ids by it, and ``Delivery`` each worker id a claim, steal, heartbeat, report or hand-back names:
    a ``|`` in one would split the '|'-joined ``P:st`` record of every item it leased (lua/common.lua),
    and an empty one means "any holder" to heartbeat, release and fail."""
    if not value or any(c in value for c in "{}|\n\r\t ") or len(value) > NAME_MAX_LENGTH:
        why = f"must be 1-{NAME_MAX_LENGTH} chars without braces, '|' or whitespace"
        raise InvalidInputError(field_name, value, why)


def _check_item(where: str, item: DeliveryItem, seen: set[str]) -> None:
    key = item.key  # called per item of a publish: two ``in`` tests, not a generator per key
    if not key or "\n" in key or "\r" in key:
        raise InvalidInputError(f"{where}.key", key, "must be non-empty, without line breaks")
    if key in seen:
        raise InvalidInputError(f"{where}.key", key, "appears twice in the schedule")
    seen.add(key)
    if not math.isfinite(item.predicted_tokens) or item.predicted_tokens < 0:
        raise InvalidInputError(f"{where}.predicted_tokens", item.predicted_tokens, "must be finite, >= 0")
    if item.max_new_tokens < 1:
        raise InvalidInputError(f"{where}.max_new_tokens", item.max_new_tokens, "must be >= 1")
    if item.prompt_tokens < 0:
        raise InvalidInputError(f"{where}.prompt_tokens", item.prompt_tokens, "must be >= 0")
    for name, ms in (("planned_start_ms", item.planned_start_ms), ("deadline_ms", item.deadline_ms)):
        if ms is not None and (isinstance(ms, bool) or not isinstance(ms, int) or ms < 0):
            raise InvalidInputError(f"{where}.{name}", ms, "must be an integer >= 0 or None")


@dataclass(frozen=True, slots=True)
class Lease:
    """The right to run one item until ``deadline_ms``; only ``token`` can complete it."""

    schedule_id: str  # schedule the item belongs to
    worker_id: str  # the worker holding the lease
    item: DeliveryItem  # what to run
    token: int  # fencing token: unique per lease, increasing within the schedule
    deadline_ms: int  # server-clock ms; extended by each heartbeat
    attempt: int  # 1 for the first lease of this item, +1 per retry

    @property
    def key(self) -> str:
        """The leased item's key."""
        return self.item.key


# Deepest nesting of a result's ``extra`` accepted from a worker: the service renders every result it
# serves, and one nested a few hundred levels deep failed each results page holding it (500), so the
# trainer could never read past it. Real extras (tool calls, reasoning, rewards) are a few levels deep.
MAX_EXTRA_DEPTH = 32


def json_depth(value: Any) -> int:
    """How deeply ``value`` nests lists and objects (a scalar: 0), without recursing."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        node, level = stack.pop()
        members = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        if members is not None:
            deepest = max(deepest, level + 1)
            stack += [(member, level + 1) for member in members]
    return deepest


def bounded_extra(extra: Mapping[str, Any]) -> dict[str, Any]:
    """``extra`` without the entries that nest past ``MAX_EXTRA_DEPTH``, named in ``extra_dropped``.

    For what an engine answered (push mode), which nobody can be asked to fix: the trajectory's
    output still counts, only the unservable part of its extras is left out, visibly."""
    kept = {name: value for name, value in extra.items() if json_depth(value) < MAX_EXTRA_DEPTH}
    dropped = sorted(name for name in extra if name not in kept)
    return {**kept, "extra_dropped": dropped} if dropped else kept


@dataclass(frozen=True, slots=True)
class TrajectoryResult:
    """A worker's report of one finished trajectory: the output and the actuals the predictor learns."""

    output_tokens: int  # actual generated length
    finish_reason: str = "stop"  # "stop" | "length" | engine-specific
    wall_time_s: float = 0.0  # time from engine request to last token
    output: str = ""  # the generated text (or token ids serialised by the caller)
    reward: float | None = None  # when the worker knows it
    extra: Mapping[str, Any] = field(default_factory=dict)  # anything else JSON-safe

    def to_json(self) -> dict[str, Any]:
        """The JSON object stored in the results stream."""
        return {
            "output_tokens": self.output_tokens,
            "finish_reason": self.finish_reason,
            "wall_time_s": self.wall_time_s,
            "output": self.output,
            "reward": self.reward,
            "extra": dict(self.extra),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TrajectoryResult:
        """Rebuild a result from its stored JSON object."""
        reward = data.get("reward")
        return cls(
            output_tokens=int(data["output_tokens"]),
            finish_reason=str(data.get("finish_reason", "stop")),
            wall_time_s=float(data.get("wall_time_s", 0.0)),
            output=str(data.get("output", "")),
            reward=None if reward is None else float(reward),
            extra=dict(data.get("extra") or {}),
        )


@dataclass(frozen=True, slots=True)
class ResultRecord:
    """One accepted result as the trainer reads it from the stream."""

    stream_id: str  # pass as ``after_id`` to read on from here
    schedule_id: str  # the schedule it belongs to
    key: str  # trajectory key
    worker_id: str  # the worker whose completion was accepted
    token: int  # the lease token it was accepted with
    attempt: int  # which attempt produced it
    result: TrajectoryResult  # output and actuals
