"""The client's checks of what a caller passed, before anything is sent: a ``TypeError`` naming the
argument and the type it got.

A trainer that passed the wrong thing met Python's error from deep inside the client, naming neither
the argument nor the method: ``schedule(None)`` (a body read from a missing file) raised
``AttributeError: 'NoneType' object has no attribute 'get'``, ``schedule('{"batch": ...}')`` (the
JSON text rather than the object) the same of ``str``, ``report_actuals(report)`` (one report, not a
list of them) a ``ValueError`` of ``dict()``, ``report_results(step, progress)`` an
``AttributeError`` of ``.progress``, and a ``timeout_s`` of ``"60"`` was multiplied into a deadline
header of a thousand digits. Found walking the client as a new user would (user65).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel

# The longest HTTP timeout a client takes (31 years): a socket's timeout, and a lock's, is held in
# nanoseconds in 64 bits (2^63 ns, about 9.2e9 s: ``threading.TIMEOUT_MAX``), with a long poll's wait
# added to it (30 s at most, ``SchedulerClient._timeout_until``). Past it every request raised the
# socket's ``OverflowError`` (review67).
MAX_TIMEOUT_S = 1e9


def kind(value: object) -> str:
    """The name of ``value``'s type, as a ``TypeError`` says what it got."""
    return type(value).__name__


def refused(name: str, wanted: str, value: object, hint: str = "") -> TypeError:
    """The ``TypeError`` for argument ``name``: what it takes and the type it got (and ``hint``)."""
    return TypeError(f"{name}: expected {wanted}, got {kind(value)}{hint}")


def _an(noun: str) -> str:
    """``noun`` after its article: "an ActualReport", "a ScheduleRequest"."""
    return f"an {noun}" if noun[:1] in "AEIOU" else f"a {noun}"


def _json_hint(value: object) -> str:
    """What a refusal of a body adds when it was given the JSON text rather than the object."""
    return "; decode a JSON text first (json.loads)" if isinstance(value, (str, bytes)) else ""


def body_of(name: str, value: object, model: type[BaseModel]) -> dict[str, Any]:
    """The JSON object a body argument stands for: a ``model`` instance dumped (fields left unset
    sent as absent), a mapping as a dict; ``TypeError`` for anything else (a list, a text, None)."""
    if isinstance(value, model):
        return value.model_dump(exclude_none=True)
    if isinstance(value, Mapping):
        return dict(value)
    raise refused(name, f"{_an(model.__name__)} or a mapping", value, _json_hint(value))


def bodies_of(name: str, values: object, model: type[BaseModel]) -> list[dict[str, Any]]:
    """Each of a sequence of bodies (``body_of``, named ``name[i]``); ``TypeError`` for one body
    alone (a mapping), a text, or anything else that is no sequence of them."""
    if isinstance(values, (Mapping, str, bytes, BaseModel)) or not isinstance(values, Iterable):
        raise refused(name, f"a sequence of {model.__name__} or mappings", values, _json_hint(values))
    return [body_of(f"{name}[{i}]", value, model) for i, value in enumerate(values)]


def whole(name: str, value: object) -> int:
    """``value`` as an ``int`` if it is an integer (a numpy one too, as a trainer's counts often are;
    not a boolean, a float or a text), else ``TypeError``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise refused(name, "an int", value)
    return int(value)


def seconds(name: str, value: object) -> float:
    """``value`` as a ``float`` if it is a real number of seconds (not a boolean, not a text), else
    ``TypeError``; a NaN is a ``ValueError``: every comparison with it is false, so a ``wait`` or an
    ``outage_s`` of NaN never ran out, and a client's ``timeout_s`` failed each ``schedule``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise refused(name, "a number of seconds", value)
    if math.isnan(as_float := float(value)):
        raise ValueError(f"{name}=nan: expected a number of seconds")
    return as_float


def http_timeout(name: str, value: object) -> float:
    """``seconds``, above 0 and at most ``MAX_TIMEOUT_S``: the client's HTTP timeout, which each
    ``schedule`` also sends in milliseconds as its deadline (``DEADLINE_HEADER``). An infinite one
    was taken, and every ``schedule`` then raised ``OverflowError`` converting it to an integer; one
    past what a socket can be given (``1e10``) raised the socket's ``OverflowError`` on every request.
    ``wait``'s own ``timeout_s`` may be infinite (``None`` says so too): it bounds no socket."""
    if not 0 < (as_float := seconds(name, value)) <= MAX_TIMEOUT_S:
        raise ValueError(f"{name}={as_float!r}: expected a number of seconds above 0, at most 1e9 (31 years)")
    return as_float


def flag(name: str, value: object) -> bool:
    """``value`` as a ``bool`` if it is one (numpy's too, as ``mask.any()`` gives), else ``TypeError``:
    ``partial`` was read by its truth, so ``partial="no"`` reported a cut step (nits67). An int is no
    flag, 0 and 1 included: ``partial`` follows ``chunk`` in ``report_results``' positions, so a count
    shifted one place would report a cut step silently, and ``whole`` refuses a boolean likewise."""
    if isinstance(value, bool) or (type(value).__module__ == "numpy" and kind(value) in ("bool", "bool_")):
        return bool(value)
    raise refused(name, "a bool", value)


def text(name: str, value: object) -> str:
    """``value`` if it is a ``str``, else ``TypeError``."""
    if not isinstance(value, str):
        raise refused(name, "a str", value)
    return value


def per_request(name: str, value: object) -> int:
    """``whole``, and at least 1 (``ValueError`` below it): reports a request, ``chunk``. A 0 failed
    ``range()``, and a negative one sent nothing at all."""
    if (count := whole(name, value)) < 1:
        raise ValueError(f"{name}={count!r}: reports per request must be at least 1")
    return count


def sizes(name: str, value: object) -> int | Mapping[str, int] | None:
    """``value`` if it is an int, a mapping of them or None (``report_results``'s ``group_sizes``),
    else ``TypeError``; a size below 1 is a ``ValueError``. Each is checked here, not where a result
    of its group is counted: a step of no result (or every one aborted) returned without a word,
    and a text in the mapping was a ``TypeError`` of ``<`` naming nothing (user67)."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        for prompt, size in value.items():
            _size(f"{name}[{prompt!r}]", size)
        return value
    return _size(name, value)


def _size(name: str, value: object) -> int:
    """One group's size: ``whole``, at least 1."""
    if (size := whole(name, value)) < 1:
        raise ValueError(f"{name}={size!r}: a group holds at least 1 sample")
    return size


def mapping(name: str, value: object) -> Mapping[Any, Any]:
    """``value`` if it is a mapping or None (as an empty one), else ``TypeError``."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise refused(name, "a mapping or None", value)
    return value
