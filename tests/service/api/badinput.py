"""Shared by the bad-input tests: editing a request body at a path, and the whole of Redis to compare.

Every refusal these tests state is also a promise that Redis is left exactly as it was, so they
compare ``redis_snapshot`` before and after rather than looking for one key.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis
from fastapi.testclient import TestClient

from service.delivery.keys import announcing_index, lapse_index

Body = dict[str, Any]
JSON_HEADERS = {"Content-Type": "application/json"}
Headers = dict[str, str] | None
MAX_PROBLEM_BYTES = 16_384  # a refusal of one fault names it, and a long input by its start and size


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


# Written on the reaper's own timer (a due schedule's next reap time), never by a request: the app
# under test reaps in the background, and a schedule an earlier test published comes due at any time.
# The announcing index too: a reaper drops an earlier test's announce's entry 2 s after it was written.
_BACKGROUND = {lapse_index(), announcing_index()}
Snapshot = dict[str, tuple[object, int]]  # key -> (content, absolute expiry in ms)


def redis_snapshot(client: redis.Redis) -> Snapshot:
    """Every key with its content (``DUMP``) and its absolute expiry (``PEXPIRETIME``; -1: none): a
    rejected request that rewrote a value or refreshed a TTL differs, not only one that added a key.
    What the background reaper writes whatever the requests do is left out: its lapse index, and the
    ``pulse`` field of each schedule's meta hash, which every delivery script rewrites as it runs
    (``service/delivery/keys.py``); the rest of a meta hash is compared field by field.

    The reads go in one pipeline (and the key scan in pages of 1,000), not two round trips a key: the
    fuzz tests take two snapshots per drawn body, and redis-py's CPU per command was most of theirs."""
    keys = [str(key) for key in client.scan_iter("*", count=1000) if str(key) not in _BACKGROUND]
    pipe = client.pipeline(transaction=False)
    for key in keys:
        if key.endswith(":meta"):
            pipe.hgetall(key)
        else:
            pipe.dump(key)
        pipe.pexpiretime(key)
    answers = pipe.execute()
    return {key: (_content(key, answers[2 * i]), answers[2 * i + 1]) for i, key in enumerate(keys)}


def _content(key: str, read: Any) -> object:
    """``DUMP`` of ``key`` as read, but a schedule's meta hash as its fields without ``pulse``."""
    if key.endswith(":meta"):
        fields = dict(read)
        fields.pop("pulse", None)
        return sorted(fields.items())
    return read


def refused_unchanged(
    client: TestClient,
    store: redis.Redis,
    method: str,
    url: str,
    content: bytes = b"",
    headers: Headers = None,
) -> dict[str, Any]:
    """The problem the service answered ``method url`` with, having checked that it is one (a 4xx,
    ``application/problem+json`` with its status and a ``detail``) and that Redis is as it was."""
    before = redis_snapshot(store)
    response = client.request(method, url, content=content, headers=headers)
    assert 400 <= response.status_code < 500, (response.status_code, response.text[:500])
    assert response.headers["content-type"] == "application/problem+json", response.text[:500]
    problem: dict[str, Any] = response.json()
    assert problem["status"] == response.status_code, problem
    assert isinstance(problem["detail"], str), problem
    assert problem["detail"], problem
    assert len(response.content) < MAX_PROBLEM_BYTES, problem["detail"][:300]  # no huge input sent back
    assert redis_snapshot(store) == before, problem
    return problem
