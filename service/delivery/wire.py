"""How the delivery API's arguments are laid out for its Lua scripts (the scripts' ARGV contract).

Kept apart from ``protocol`` so the typed API reads as one method per operation, and so the byte
layout each script parses (``lua/*.lua`` headers) is written down in one place on the Python side.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from json.encoder import encode_basestring_ascii
from typing import Any

from scheduler.stealguard import LENGTH_MARGIN
from scheduler.trace import output_length
from service.delivery import keys as keyspace
from service.delivery.errors import InvalidInputError
from service.delivery.records import DeliveryItem, PublishedSchedule, TrajectoryResult


def clock(now_ms: int | None) -> str:
    """The ``now`` argument: an explicit clock (tests, simulations) or '' for the server's TIME."""
    return "" if now_ms is None else str(int(now_ms))


# One encoder for every call: ``json.dumps`` given any argument builds a new ``JSONEncoder`` each time,
# half the client's cost of encoding a one-item completion's result (~8 of ~16 us; docs/experiments.md,
# "Delivery", helper delspeed). The same settings as that call, so the same bytes.
_STRICT = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


def strict_json(doc: Any, where: str) -> str:
    """Compact JSON that every reader can parse: no NaN/Infinity, nothing unserialisable."""
    try:
        return _STRICT.encode(doc)
    except (TypeError, ValueError) as err:
        raise InvalidInputError(where, doc, f"not JSON-serialisable: {err}") from None


def publish_args(
    schedule: PublishedSchedule,
    now_ms: int | None,
    nonce: str,
    work: str = "",
    answer: str = "",
    mark: str = "",
) -> list[Any]:
    """ARGV of ``publish.lua``: fingerprint, clock, retention, settings, then the newline-joined body,
    the steal rules, the caches, the plan's predicted times, the drained workers, the digest of the
    request's ``work``, the service's ``answer`` and the plan's engine ('' for none; none of the three
    fingerprinted: they describe the request, not what the workers get; the engine's rules are in the
    steal deadlines, which are), the nonce of the request's in-flight ``mark`` ('' for none: not
    checked), and last ``nonce``, unique to this call.

    The mark's nonce comes before the call's, which stays last: an older replica's script (its own
    copy, by SHA) reads the call's as the last argument whatever comes before, and this release's
    reads the mark's only from 29 arguments (``lua/publish.lua``). A mark named that ``P:planning``
    no longer holds refuses the publish (``MarkLapsedError``), once a replay or a conflict is ruled out.

    The fingerprint covers everything written, so a replay is recognised and a different schedule
    under a used id is refused. The nonce tells a replay from the same call re-sent by the client
    after a timeout (redis-py retries one): the script ran, and it answers 'created' again. Per-item
    columns travel as one string each: a few large arguments parse far faster than thousands of
    small ones. Each stored string (a ``P:st`` record, a ``P:need`` pair) is built here, where
    formatting is cheap, so the script only splits and writes; the fingerprint is still taken over
    the columns earlier releases sent (``_fingerprint``), so a replay across an upgrade is a replay.
    """
    lease = schedule.lease
    queues = [*schedule.queues.items(), (keyspace.SHARED_QUEUE, schedule.shared)]
    items = [item for _, queue in queues for item in queue]
    stored, payloads = stored_items(items)
    keys = "\n".join(item.key for item in items)
    preds, reserves, records, scores = _queue_columns(queues)
    jsons = "\n".join(stored)
    head = _settings(schedule, queues)
    # what stealing must honour: pins and, under prefix affinity, groups
    affinity = schedule.prefix_affinity
    groups = "\n".join(item.group for item in items) if affinity else ""
    dues = "\n".join(item.due() for item in items)  # 'start|end' or '-' per item (P:due)
    caps, needs, need_pairs = capacity_args(schedule, items)
    columns = [keys, "\n".join(preds), "\n".join(reserves), jsons]
    pins = "\n".join("1" if item.pinned else "0" for item in items)
    rules = [int(affinity), pins, groups, dues]
    digest = _fingerprint(lease.retention_s, head, columns, rules, payloads, [caps, needs], schedule)
    return [
        digest,
        clock(now_ms),
        lease.retention_s * 1000,
        *head[:3],
        # meta 'workers', the announced ones: a drained worker is left out, so a re-announce from an
        # older replica (which announces 'workers' whole) cannot reach it; it is fingerprinted as before
        json.dumps(sorted(set(schedule.queues) - schedule.drained)),
        *head[4:],
        keys,
        "\n".join(records),
        json.dumps(scores),
        jsons,
        int(affinity),
        "\n".join(item.key for item in items if item.pinned),
        groups,
        dues.replace("|", "\n"),  # 'start\nend', or '-'
        payloads,
        caps,
        need_pairs,
        *_predicted(schedule),
        json.dumps(sorted(schedule.drained)),
        work,
        answer,
        schedule.engine or "",
        mark,
        nonce,
    ]


def _settings(schedule: PublishedSchedule, queues: Sequence[tuple[str, Sequence[DeliveryItem]]]) -> list[Any]:
    """The schedule's settings as ``publish.lua`` takes them (and the fingerprint covers them): lease
    TTL, attempts, KV admission, the planned workers, the queues' names and lengths, the paces."""
    lease = schedule.lease
    return [
        lease.lease_ttl_ms,
        lease.max_attempts,
        int(schedule.kv_admission),
        json.dumps(sorted(schedule.queues)),
        json.dumps([name for name, _ in queues]),
        json.dumps([len(queue) for _, queue in queues]),
        json.dumps({w: repr(pace) for w, pace in sorted(schedule.paces().items())}),
    ]


def _predicted(schedule: PublishedSchedule) -> list[str]:
    """What the plan predicts (its makespan, each worker's finish): read by GET /schedule/{id}, not by
    any worker, so not fingerprinted (a replay is told from a different schedule by what the workers
    get, as before these existed)."""
    makespan = schedule.predicted_makespan_s
    return [
        "" if makespan is None else repr(float(makespan)),
        json.dumps({w: float(s) for w, s in sorted(schedule.planned_finish_s.items())}),
    ]


def _queue_columns(
    queues: Sequence[tuple[str, Sequence[DeliveryItem]]],
) -> tuple[list[str], list[str], list[str], list[str]]:
    """Per item, in queue order: its predicted tokens, its reservation and its ``P:st`` record
    (queued, on its queue); per queue, its predicted work (``P:work``)."""
    preds: list[str] = []
    reserves: list[str] = []
    records: list[str] = []
    scores: list[str] = []
    for name, queue in queues:
        total = 0.0  # summed in item order, as the script did: the same double, so the same P:work
        for item in queue:
            tokens = float(item.predicted_tokens)
            total += tokens
            pred, reserve = repr(tokens), str(item.reservation_tokens)
            preds.append(pred)
            reserves.append(reserve)
            records.append(f"q|0|0|0|{pred}|{name}|{reserve}")
        scores.append(repr(total))
    return preds, reserves, records, scores


def _fingerprint(
    retention_s: int,
    head: Sequence[Any],
    columns: Sequence[str],
    rules: Sequence[Any],
    payloads: str,
    holding: Sequence[str],
    schedule: PublishedSchedule,
) -> str:
    """SHA-256 over what earlier releases sent as publish.lua's ARGV, in their layout (newline-joined
    predicted tokens, reservations, '0'/'1' pins, 'start|end' dues, '-' needs), so that the same
    schedule keeps the fingerprint ``P:meta`` holds whichever release published it."""
    fields = [retention_s, *head, *columns, *rules, payloads]
    if schedule.kv_capacity_tokens:  # hashed only when given: the same fingerprint as before they existed
        fields += holding
    if schedule.drained:  # likewise; a drain changes what a worker may take: another schedule
        fields.append(json.dumps(sorted(schedule.drained)))
    return hashlib.sha256("\x00".join(map(str, fields)).encode()).hexdigest()


def capacity_args(schedule: PublishedSchedule, items: Sequence[DeliveryItem]) -> tuple[str, str, str]:
    """The workers' KV capacities (JSON, ``P:cap``); per item, its ``need_tokens`` where some of
    those caches cannot hold it, '-' elsewhere (the fingerprinted column); and ``key\nneed`` of
    just those items (``P:need``'s fields and values): what claims and steals check, so that no
    worker gets an item it cannot hold (the simulator's ``can_hold``). Items every published cache
    holds get no entry, so a schedule without small caches costs nothing more to claim."""
    caps = schedule.kv_capacity_tokens
    smallest = min(caps.values(), default=None)
    needs: list[str] = []
    pairs: list[str] = []
    for item in items:
        need = item.need_tokens
        if smallest is None or need <= smallest:
            needs.append("-")
        else:
            needs.append(str(need))
            pairs += (item.key, str(need))
    return json.dumps({w: int(c) for w, c in sorted(caps.items())}), "\n".join(needs), "\n".join(pairs)


def stored_items(items: Sequence[DeliveryItem]) -> tuple[list[str], str]:
    """Each item's ``P:items`` value, and the newline-joined distinct payloads for ``P:prompts``.

    The samples of one prompt carry the same payload (its text or chat messages), so it is stored
    once: an item's value is ``<ref>\t<its JSON without the payload>``, where ``ref`` is the 1-based
    line of its payload in ``P:prompts`` ('' for an empty payload), and the claim scripts put the
    payload back (``common.lua``, ``lease_all``), so a claimer receives the whole item JSON. Compact
    JSON never holds a raw tab or newline, which makes both separators safe. With 800-character
    prompts and 16 samples a prompt, a 1,024-trajectory schedule went from 1,185 to 366 bytes of
    Redis per trajectory once published, and from 83 to 50 ms to build and publish
    (docs/benchmarks.md, "Service").
    """
    refs: dict[str, int] = {}  # payload JSON -> its line in P:prompts
    by_prompt: dict[str, tuple[Mapping[str, Any], str]] = {}  # prompt id -> (payload, its JSON)
    stored = []
    for item in items:
        payload = item.payload
        ref = ""
        if payload:
            seen = by_prompt.get(item.prompt_id)
            if seen is None or seen[0] != payload:  # samples of a prompt share it: encoded once
                seen = (payload, strict_json(payload, f"items[{item.key}].payload"))
                by_prompt[item.prompt_id] = seen
            ref = str(refs.setdefault(seen[1], len(refs) + 1))
        stored.append(ref + "\t" + item_json(item))
    return stored, "\n".join(refs)


# What ``json.JSONEncoder().encode(a_str)`` returns (ensure_ascii), called without that method's
# Python frame: its C fast path directly, ~0.15 us a string against ~0.35 us.
_text = encode_basestring_ascii


def item_json(item: DeliveryItem) -> str:
    """``item.to_json()`` without its payload, as compact JSON.

    Written out field by field because ``json.dumps`` builds a new C encoder on every call: ~10 us
    for this small object, 10 ms of a 1,024-item publish, against ~2 us here. Strings go through
    the JSON encoder's own escaping, numbers as ``json`` writes them (``float.__repr__``);
    ``tests/service/delivery/test_wire.py`` checks it decodes to exactly what ``to_json`` holds.
    """
    predicted = float(item.predicted_tokens)
    if not math.isfinite(predicted):
        raise InvalidInputError(f"items[{item.key}].predicted_tokens", predicted, "must be finite")
    start, deadline = item.planned_start_ms, item.deadline_ms
    return (
        f'{{"key":{_text(item.key)},"prompt_id":{_text(item.prompt_id)},"sample_idx":{int(item.sample_idx)},'
        f'"prompt_tokens":{int(item.prompt_tokens)},"max_new_tokens":{int(item.max_new_tokens)},'
        f'"predicted_tokens":{predicted!r},"group_id":{_text(item.group_id)},'
        f'"pinned":{"true" if item.pinned else "false"},'
        f'"planned_start_ms":{"null" if start is None else int(start)},'
        f'"deadline_ms":{"null" if deadline is None else int(deadline)}}}'
    )


def complete_args(
    entries: Sequence[tuple[str, int, TrajectoryResult]], now_ms: int | None, holder: str | None = None
) -> list[Any]:
    """ARGV of ``complete.lua``: clock, the reporting worker ('' = not checked), then (key, token,
    result JSON) per entry. A result saying a length below a generation's least is refused here, as
    the sidecar's ``/done`` and ``POST /actuals`` refuse it (``scheduler.trace.output_length``)."""
    args: list[Any] = [clock(now_ms), holder or ""]
    for key, token, result in entries:
        try:
            output_length(result.output_tokens, result.finish_reason)
        except ValueError as err:
            raise InvalidInputError(f"results[{key}].output_tokens", result.output_tokens, str(err)) from None
        args += [key, token, strict_json(result.to_json(), f"results[{key}]")]
    return args


def steal_args(
    worker_id: str,
    max_items: int,
    now_ms: int | None,
    budget_tokens: int | None,
    rate_tokens_per_s: float | None,
    busy_ms: int,
    call_id: str,
) -> list[Any]:
    """ARGV of ``steal.lua`` (``Delivery.steal``'s arguments): thief, max, clock, the KV gate's budget
    and the deadline guard's rate ('' = none; a rate that is not a positive finite number is none),
    the thief's busy time (at least 0), the length margin, and the call id."""
    budget = "" if budget_tokens is None else str(int(budget_tokens))
    rate = ""
    if rate_tokens_per_s is not None and math.isfinite(rate_tokens_per_s) and rate_tokens_per_s > 0:
        rate = repr(float(rate_tokens_per_s))
    margin = repr(LENGTH_MARGIN)  # the simulator's: a steal must pay off at that many times the length
    return [worker_id, max_items, clock(now_ms), budget, rate, max(0, int(busy_ms)), margin, call_id]
