"""How the delivery API's arguments are laid out for its Lua scripts (the scripts' ARGV contract).

Kept apart from ``protocol`` so the typed API reads as one method per operation, and so the byte
layout each script parses (``lua/*.lua`` headers) is written down in one place on the Python side.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from service.delivery import keys as keyspace
from service.delivery.errors import InvalidInputError
from service.delivery.records import PublishedSchedule, TrajectoryResult


def clock(now_ms: int | None) -> str:
    """The ``now`` argument: an explicit clock (tests, simulations) or '' for the server's TIME."""
    return "" if now_ms is None else str(int(now_ms))


def strict_json(doc: Any, where: str) -> str:
    """Compact JSON that every reader can parse: no NaN/Infinity, nothing unserialisable."""
    try:
        return json.dumps(doc, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as err:
        raise InvalidInputError(where, doc, f"not JSON-serialisable: {err}") from None


def publish_args(schedule: PublishedSchedule, now_ms: int | None) -> list[Any]:
    """ARGV of ``publish.lua``: fingerprint, clock, retention, settings, then the newline-joined body.

    The fingerprint covers everything written, so a replay is recognised and a different schedule
    under a used id is refused. Per-item columns travel as one string each: a few large arguments
    parse far faster than thousands of small ones.
    """
    lease = schedule.lease
    queues = [*schedule.queues.items(), (keyspace.SHARED_QUEUE, schedule.shared)]
    items = [item for _, queue in queues for item in queue]
    body = [
        "\n".join(item.key for item in items),
        "\n".join(repr(float(item.predicted_tokens)) for item in items),
        "\n".join(str(item.reservation_tokens) for item in items),
        "\n".join(strict_json(item.to_json(), f"items[{item.key}].payload") for item in items),
    ]
    head = [
        lease.lease_ttl_ms,
        lease.max_attempts,
        int(schedule.kv_admission),
        json.dumps(sorted(schedule.queues)),
        json.dumps([name for name, _ in queues]),
        json.dumps([len(queue) for _, queue in queues]),
        json.dumps({w: repr(pace) for w, pace in sorted(schedule.paces().items())}),
    ]
    # what stealing must honour: pins (a '0'/'1' line per item) and, under prefix affinity, groups
    affinity = schedule.prefix_affinity
    steal_rules = [
        int(affinity),
        "\n".join("1" if item.pinned else "0" for item in items),
        "\n".join(item.group for item in items) if affinity else "",
        "\n".join(item.due() for item in items),  # steal deadlines ('-' for none), P:due
    ]
    fields = [lease.retention_s, *head, *body, *steal_rules]
    digest = hashlib.sha256("\x00".join(map(str, fields)).encode()).hexdigest()
    return [digest, clock(now_ms), lease.retention_s * 1000, *head, *body, *steal_rules]


def complete_args(entries: Sequence[tuple[str, int, TrajectoryResult]], now_ms: int | None) -> list[Any]:
    """ARGV of ``complete.lua``: clock, then (key, token, result JSON) per entry."""
    args: list[Any] = [clock(now_ms)]
    for key, token, result in entries:
        args += [key, token, strict_json(result.to_json(), f"results[{key}]")]
    return args
