"""Parse a worker SPEC like ``8xH100,8xAscend910B:128`` into an ``Inventory``.

Why a compact spec: a replay user describes a pool the way they would say it aloud ("eight H100s and
eight 910Bs"), not as JSON. Each comma-separated part is ``[COUNTx]DEVICE[:MAX_NUM_SEQS]``: COUNT
single-device engines of that kind (one vLLM/SGLang server per accelerator, the usual layout for a
7B model), optionally with the engine's ``max_num_seqs``. Device names accept the spellings of
``scheduler.devices.device_profile``. A part whose device cannot hold the model's weights (and any KV
cache beside them) is refused by its text and the model's name.

A pool holds at most ``MAX_WORKERS`` engines, the bound ``POST /schedule`` puts on an inventory
(``service.api.schemas.InventorySpec`` reads it from here): ``replay --workers 100000xH100`` was
accepted and ran for over ten minutes, every policy's plan and play scaling with the pool (4,096
H100s on a 64-trajectory step: 20 s on 2 cores; 64: 6.7 s), a pool the service would have refused.
"""

from __future__ import annotations

import re
from itertools import groupby

from scheduler.costmodel import derived_kv_capacity
from scheduler.devices import DeviceProfile, ModelPreset, device_profile, model_preset
from scheduler.errors import InvalidInputError, UnknownNameError
from scheduler.types import Inventory, Worker
from scheduler.validation import MAX_NUM_SEQS

DEFAULT_MAX_NUM_SEQS = 256  # vLLM's default max_num_seqs
MAX_WORKERS = 4_096  # engines in one pool, the replay's and POST /schedule's inventory alike
_PAST_LIMIT = f"exceed the limit of {MAX_WORKERS:,} workers (POST /schedule's too)"
FORM = "COUNTxDEVICE[:max_num_seqs], e.g. 8xH100,8xAscend910B"  # what every malformed part is told
_PART = re.compile(
    r"^\s*(?:(?P<count>\d+)\s*[xX*]\s*)?(?P<device>[A-Za-z0-9_\-]+)\s*(?::\s*(?P<seqs>\d+))?\s*$",
    re.ASCII,  # \d would match other scripts' digits, which int() then reads as ASCII ones
)
# DEVICEs that _PART read but are slips of form, not of name, each with what the user missed: "8x" (a
# count and no device) matched as a device named "8x" and was refused as an unknown device, listing
# the devices the user knew. The last two hold a known device (checked where they are used).
_SLIPS = (
    (re.compile(r"^\d+[xX]?$", re.ASCII), "a count with no device"),
    (re.compile(r"^[xX]$"), "no count and no device"),
    (re.compile(r"^[xX](?P<device>.+)$"), "an x with no count before it"),
    (re.compile(r"^(?P<device>.+?)[xX]\d+$", re.ASCII), "the count goes before the device"),
)


def parse_workers(spec: str, model: str = "7b") -> Inventory:
    """Return the inventory ``spec`` describes, serving ``model``; a bad part raises ``InvalidInputError``."""
    if not spec.strip():
        raise InvalidInputError("workers", spec, f"empty; expected {FORM}")
    workers: list[Worker] = []
    parts: list[tuple[str, Worker]] = []  # each part's text and its first worker (all alike)
    for part in spec.split(","):
        made = _part_workers(part, spec, start=len(workers))
        parts.append((part.strip(), made[0]))
        workers.extend(made)
    preset = model_preset(model)
    for text, worker in parts:
        _require_room_for_weights(text, worker, preset)
    return Inventory(workers=tuple(workers), model=preset)


def _require_room_for_weights(part: str, worker: Worker, model: ModelPreset) -> None:
    """Refuse a part whose device cannot hold ``model``'s weights with room for any KV cache. The
    cost model refused it only when the replay first planned, after the trace was read, naming a
    worker id (``ascend910b-0``) the user never wrote rather than the part of SPEC they did."""
    if derived_kv_capacity(worker, model) > 0:
        return
    device = worker.device
    usable = device.memory_gib * device.memory_utilization
    weights = model.params * model.weight_bytes_per_param / 2**30
    raise InvalidInputError(
        "workers",
        part,
        f"one {device.name} offers {usable:.1f} GiB to the engine ({device.memory_utilization:.0%} of "
        f"{device.memory_gib:g} GiB), too little for model {model.name}'s {weights:.1f} GiB of weights "
        "and any KV cache: choose a larger device or a smaller model",
    )


def _part_workers(part: str, spec: str, start: int) -> list[Worker]:
    match = _PART.match(part)
    if match is None:
        raise _malformed(part.strip() or spec, "")
    count = int(match["count"]) if match["count"] else 1
    seqs = int(match["seqs"]) if match["seqs"] else DEFAULT_MAX_NUM_SEQS
    if count < 1:
        raise InvalidInputError("workers", part.strip(), "the count must be >= 1")
    if not 1 <= seqs <= MAX_NUM_SEQS:  # the API's bound: 8xH100:99999999999999999999 was accepted
        raise InvalidInputError("workers", part.strip(), f"max_num_seqs must be 1..{MAX_NUM_SEQS:,}")
    if start + count > MAX_WORKERS:  # before the workers are made: 80000000xH100 would allocate first
        raise InvalidInputError("workers", spec, f"{start + count:,} workers {_PAST_LIMIT}")
    device = _device(match["device"], part.strip(), counted=match["count"] is not None)
    prefix = device.name.lower()
    return [Worker(worker_id=f"{prefix}-{start + i}", device=device, max_num_seqs=seqs) for i in range(count)]


def _device(name: str, part: str, *, counted: bool) -> DeviceProfile:
    """The profile of the DEVICE ``name`` read from ``part``; a name that is a slip of the spec's form
    (``8x``, ``xH100``, ``H100x8``) is refused as malformed, and only a well-formed one that names no
    device as unknown, so the user is sent to the form or to the device list, whichever they missed.
    The slip's reason reads ``name`` alone, so a part ``counted`` before it (``8xH100x8``, ``8xxH100``)
    is told only that it is malformed: "the count goes before the device" was false there."""
    try:
        return device_profile(name)
    except UnknownNameError:
        for slip, missed in _SLIPS:
            found = slip.match(name)
            if found is not None and (found.re.groups == 0 or _is_device(found["device"])):
                raise _malformed(part, "" if counted else missed) from None
        raise


def _is_device(name: str) -> bool:
    """Whether ``name`` is a device ``device_profile`` knows, by any of its spellings."""
    try:
        device_profile(name)
    except UnknownNameError:
        return False
    return True


def _malformed(part: str, why: str) -> InvalidInputError:
    """The one-line refusal of a part that is not of the form ``COUNTxDEVICE[:max_num_seqs]``."""
    return InvalidInputError("workers", part, f"malformed{f' ({why})' if why else ''}; expected {FORM}")


def pool_label(inventory: Inventory) -> str:
    """The pool as the ``--workers`` spec that gives it back (``8xH100,8xAscend910B:128``): runs of
    workers of one device and ``max_num_seqs``, the latter shown where it is not the default. It
    counted devices alone, so ``2xH100:64,2xH100`` read ``4xH100`` in every table, chart and report."""
    runs = [(k, len(list(g))) for k, g in groupby((w.device.name, w.max_num_seqs) for w in inventory.workers)]
    return ",".join(
        f"{n}x{kind}" + ("" if seqs == DEFAULT_MAX_NUM_SEQS else f":{seqs}") for (kind, seqs), n in runs
    )
