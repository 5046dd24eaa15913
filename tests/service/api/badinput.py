"""Shared by the bad-input tests: editing a request body at a path, and the whole of Redis to compare.

Every refusal these tests state is also a promise that Redis is left exactly as it was, so they
compare ``redis_snapshot`` before and after rather than looking for one key.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis

Body = dict[str, Any]
JSON_HEADERS = {"Content-Type": "application/json"}


def set_at(path: str, value: Any) -> Callable[[Body], None]:
    """Set ``value`` at a dotted path like ``batch.items.1.prompt_id`` of the body."""

    def edit(body: Body) -> None:
        *parents, last = path.split(".")
        node: Any = body
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        if last.isdigit():
            node[int(last)] = value
        else:
            node[last] = value

    return edit


def redis_snapshot(client: redis.Redis) -> dict[str, tuple[bytes | None, int]]:
    """Every key with its content (``DUMP``) and its absolute expiry (``PEXPIRETIME``; -1: none): a
    rejected request that rewrote a value or refreshed a TTL differs, not only one that added a key."""
    return {str(key): (client.dump(key), client.pexpiretime(key)) for key in client.scan_iter("*")}
