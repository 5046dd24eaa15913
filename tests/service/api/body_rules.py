"""Where a valid request body can be broken, and with what: the tables ``mutations`` draws from.

``Rules`` lists, for one route's body, its numbers with the values each refuses (docs/api.md's
ranges, NaN and infinities, strings and booleans for numbers, nesting where a number belongs), its
ids (the name rule), its names from a closed set (device, model, policy, engine, finish reason), its
required fields, its objects that take no unknown field, its ids that must be unique, its lists that
must not be empty, and its rules across fields (token ids beside a prompt or not ``prompt_tokens``
long, an engine field the sidecar sets, a pin to no worker or a drained one). ``SCHEDULE`` and
``ACTUALS`` are those of ``POST /schedule`` and ``POST /actuals``, each beside the valid body its
paths reach; the sidecar's pull API breaks reuse the values (``tests/service/sidecar/pull_mutations.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

Body = dict[str, Any]
Path = tuple[str | int, ...]


def nested(depth: int, leaf: Any = 1) -> Any:
    for _ in range(depth):
        leaf = [leaf]
    return leaf


# Bad for every count or measure a body holds, whatever its range (docs/api.md: NaN, infinities and
# strings for numbers are refused, and no range reaches 10^30 or below 0 ... except the ones below).
NON_NUMBERS = [float("nan"), float("inf"), float("-inf"), "1", True, [], {}, nested(40), "9" * 5000, [1, 2]]
NOT_A_NUMBER = [*NON_NUMBERS, 10**30, -(10**30)]
NEGATIVE = [-1, -0.5, -(2**63)]
ZERO = [0, 0.0]
NULL = [None]  # for a field with a default other than null: null is not "absent" there
# unknown names that read as a value's source or a union member's tag in pydantic's error locations
ODD_NAMES = [
    "body",
    "query",
    "path",
    "int",
    "float",
    "none",
    "str",
    "bool",
    "constrained-str",
    "x[0]",
    "n" * 100_000,
]
ODD = st.sampled_from([None, 0, -1, 1e308, "", "\ud800", [], {}, nested(30), "q" * 10_000])
BAD_NAMES = [
    "",
    " ",
    "has space",
    "x" * 257,
    "\ud800",
    "nul\x00",
    "line\nbreak",
    "é",
    7,
    ["w0"],
    {"id": "w0"},
]


@dataclass(frozen=True)
class Rules:
    """Where a body can be broken, and how: its numbers with the values each refuses, its ids (which
    refuse ``BAD_NAMES``, and null where ``required``), its names from a closed set (device, policy)
    with the values they refuse, its required fields, the objects that take no unknown field, its ids
    that must be unique in their list, its lists that must not be empty, and texts or collections
    past their bounds (where, the value, the field the refusal names)."""

    numbers: list[tuple[Path, list[Any]]]
    names: list[tuple[Path, bool]]  # (where, required: null refused too)
    kinds: list[tuple[Path, list[Any]]]
    required: list[Path]
    objects: list[Path]
    unique: list[tuple[Path, str]]
    nonempty: list[Path]
    other: list[tuple[Path, Any, Path]]


def _item(i: int, *rest: str | int) -> Path:
    return ("batch", "items", i, *rest)


def _worker(j: int, *rest: str | int) -> Path:
    return ("inventory", "workers", j, *rest)


COUNT = NOT_A_NUMBER + NULL + NEGATIVE + ZERO  # a count from 1: every one of these breaks it
BAD_KINDS = ["", "TPU-v5", "H1000", "x" * 65, 3, ["H100"], "\ud800"]
IDS = {"prompt_id": "p1", "prompt_tokens": 101, "n": 2, "max_new_tokens": 2048}  # item 1 without its prompt
SCHEDULE = Rules(
    numbers=[
        (_item(0, "prompt_tokens"), [*COUNT, 2**31]),
        (_item(1, "n"), [*COUNT, 4097]),
        (_item(2, "max_new_tokens"), [*COUNT, 2**31]),
        (_worker(0, "max_num_seqs"), [*COUNT, 65_537]),
        (_worker(1, "num_gpus"), [*COUNT, 65]),
        (("quantile",), NOT_A_NUMBER + NEGATIVE + ZERO + [1, 1.5]),
        (("time_budget_ms",), NOT_A_NUMBER + NEGATIVE + ZERO + [60_001, 0.5]),
        (("step",), NOT_A_NUMBER + NULL + NEGATIVE + [2**31, 1.5]),
        (("seed",), NOT_A_NUMBER + NULL + NEGATIVE + [2**63]),
        (("sampling", "temperature"), NOT_A_NUMBER + NEGATIVE + [101]),
        (("sampling", "top_p"), NOT_A_NUMBER + NEGATIVE + ZERO + [1.01]),
        (("sampling", "seed"), NOT_A_NUMBER + NEGATIVE + [2**62 + 1]),
    ],
    names=[
        (_item(0, "prompt_id"), True),
        (_worker(1, "worker_id"), True),
        (_item(2, "pinned_worker"), False),
        (("schedule_id",), False),
    ],
    kinds=[
        (_worker(0, "device"), BAD_KINDS),
        (("model",), BAD_KINDS),
        (("policy",), BAD_KINDS),
        (("engine",), BAD_KINDS),
    ],
    required=[
        ("batch",),
        ("inventory",),
        ("batch", "items"),
        ("inventory", "workers"),
        _item(1, "prompt_id"),
        _item(1, "prompt_tokens"),
        _item(0, "max_new_tokens"),
        _worker(0, "worker_id"),
        _worker(1, "device"),
    ],
    objects=[(), ("batch",), _item(0), ("inventory",), _worker(1), ("sampling",), _item(1, "sampling")],
    unique=[(("batch", "items"), "prompt_id"), (("inventory", "workers"), "worker_id")],
    nonempty=[("batch", "items"), ("inventory", "workers")],
    other=[
        (_item(0, "features"), {"topic": "t" * 257}, _item(0, "features", "topic")),
        (_item(1, "features"), {"f" * 65: 1.0}, _item(1, "features")),
        (_item(2, "features"), {f"f{k}": 1.0 for k in range(65)}, _item(2, "features")),
        # a trace column's name, or another tool's name for one (docs/api.md: the field to use instead)
        (_item(0, "features"), {"topic": "t", "max_tokens": 64}, _item(0, "features", "max_tokens")),
        (_item(1, "features"), {"output_tokens": 300}, _item(1, "features", "output_tokens")),
        (("sampling", "stop"), ["s"] * 33, ("sampling", "stop")),
        (("sampling", "stop"), ["s" * 257], ("sampling", "stop", 0)),
        (_item(1, "prompt"), "ok \ud800", _item(1, "prompt")),
        # docs/api.md's rules across fields: ids beside a prompt, ids not prompt_tokens long or out of
        # int32, no chat turn, an engine field the sidecar sets, a pin to no worker or a drained one
        (_item(0, "prompt_token_ids"), [1, 2], _item(0, "prompt_token_ids")),
        (_item(1), {**IDS, "prompt_token_ids": [1, 2, 3]}, _item(1, "prompt_token_ids")),  # 101 tokens
        (
            _item(1),
            {**IDS, "prompt_tokens": 2, "prompt_token_ids": [1, 2**31]},
            _item(1, "prompt_token_ids", 1),
        ),
        (_item(2, "messages"), [], _item(2, "messages")),
        (("sampling", "extra"), {"n": 2}, ("sampling", "extra")),
        (("sampling", "extra"), {"max_tokens": 5}, ("sampling", "extra")),
        (_item(2, "pinned_worker"), "w9", _item(2, "pinned_worker")),
        (_worker(1, "drain"), True, _item(2, "pinned_worker")),
        (_worker(0, "drain"), "yes", _worker(0, "drain")),
        (("publish",), "false", ("publish",)),
    ],
)


def _report(i: int, *rest: str | int) -> Path:
    return ("actuals", i, *rest)


ACTUALS = Rules(
    numbers=[
        (_report(0, "step"), NOT_A_NUMBER + NULL + NEGATIVE + [2**31, 1.5]),
        (_report(1, "sample_idx"), NOT_A_NUMBER + NULL + NEGATIVE + [2**31, 1.5]),
        (_report(0, "prompt_tokens"), [*COUNT, 2**31]),
        (_report(1, "output_tokens"), [*COUNT, 2**31]),
        (_report(0, "wall_time_s"), NON_NUMBERS + NEGATIVE + ZERO),
        (_report(1, "concurrency"), NON_NUMBERS + NEGATIVE + ZERO + [0.5]),
        (_report(0, "max_new_tokens"), NOT_A_NUMBER + NEGATIVE + ZERO + [2**31, 1]),  # 1: below its output
        (_report(1, "reward"), NON_NUMBERS),
    ],
    names=[
        (_report(0, "prompt_id"), True),
        (_report(1, "worker_id"), True),
        (_report(1, "schedule_id"), False),
    ],
    kinds=[(_report(0, "finish_reason"), ["", "abort", "STOP", 1, None, ["stop"], "\ud800"])],
    required=[
        ("actuals",),
        _report(0, "step"),
        _report(1, "prompt_id"),
        _report(0, "sample_idx"),
        _report(1, "worker_id"),
        _report(0, "prompt_tokens"),
        _report(1, "output_tokens"),
        _report(0, "finish_reason"),
    ],
    objects=[(), _report(0), _report(1)],
    unique=[],  # a report sent twice is stored once ("repeated"), not refused
    nonempty=[("actuals",)],
    other=[
        (_report(1, "features"), {"topic": "t" * 257}, _report(1, "features", "topic")),
        (_report(0, "features"), {"f" * 65: 1.0}, _report(0, "features")),
        (_report(0, "features"), {f"f{k}": 1.0 for k in range(65)}, _report(0, "features")),
        (_report(1, "features"), {"completion_tokens": 120}, _report(1, "features", "completion_tokens")),
        (_report(0, "features"), {"step": 0}, _report(0, "features", "step")),
        (("partial",), "yes", ("partial",)),
        (("partial",), None, ("partial",)),
    ],
)


def valid_schedule() -> Body:
    """A valid ``POST /schedule`` body with every part the breaks reach: three prompts, two workers
    (one pinned to), top-level and per-prompt sampling."""
    items = [
        {"prompt_id": f"p{i}", "prompt_tokens": 100 + i, "n": 2, "max_new_tokens": 2048, "prompt": f"q{i}"}
        for i in range(3)
    ]
    items[1]["sampling"] = {"temperature": 0.6}
    items[2]["pinned_worker"] = "w1"
    workers = [
        {"worker_id": f"w{j}", "device": ("H100", "Ascend910B")[j], "max_num_seqs": 64} for j in range(2)
    ]
    return {
        "batch": {"items": items},
        "inventory": {"workers": workers},
        "policy": "lpt",
        "model": "7b",
        "engine": "vllm-v1",
        "quantile": 0.5,
        "time_budget_ms": 50,
        "step": 1,
        "seed": 3,
        "sampling": {"temperature": 1.0, "top_p": 1.0, "seed": 7},
    }


def valid_actuals() -> Body:
    """A valid ``POST /actuals`` body with every part the breaks reach: two reports, one naming its
    schedule and features."""
    reports = [
        {"step": 3, "prompt_id": f"p{i}", "sample_idx": i, "worker_id": "w0", "prompt_tokens": 100,
         "output_tokens": 50 + i, "finish_reason": "stop", "wall_time_s": 2.0, "concurrency": 4.0,
         "max_new_tokens": 2048, "reward": 1.0}
        for i in range(2)
    ]  # fmt: skip
    reports[1] |= {"schedule_id": "s1", "features": {"difficulty": 2.0, "source": "gsm8k"}}
    return {"actuals": reports}
