"""What a problem response says of the input at fault: its field's path, and its value cut short.

``service.problems.table`` maps each error to a status; this module renders the part a client reads to fix
its request. pydantic locates an error by a tuple (``("body", "batch", "items", 3, "n")``) that
names union members' tags among the fields, and reports every member of a union; a client wants the
one path (``batch.items[3].n``) and the one message that names the fault. An echoed value is cut to
its start and its size where it is long, so a 422 never sends a huge input back.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from service.names import chars_error
from service.problems.hints import hint

_UNION_TAGS = frozenset({"float", "str", "int", "bool", "none"})
MAX_ECHO = 256  # longest text input echoed back whole as a 422's ``value``
ECHO_DIGITS = 20  # longest integer echoed whole: 2^64 has 20 digits, so any count or id a field holds
ECHO_HEAD = 32  # characters of a longer text kept in its echo
PATH_HEAD = 8  # parts kept at the start of a field path past MAX_ECHO characters
PATH_TAIL = 2  # and at its end
# What pydantic puts before the words of a validator's own ``ValueError`` or ``assert`` (error types
# ``value_error`` and ``assertion_error``): the message is the project's, and reads as it alone
VALIDATOR_PREFIXES = ("Value error, ", "Assertion failed, ")
ECHOED = (int, float, str)  # inputs a 422 names (``bool`` is an ``int``); an object or a list is not
# errors whose fault is the field itself, not its value: a detail names no value for them (a missing
# query parameter's input is None, which no one sent; an unknown field's value is not what is wrong),
# nor for a refused name of a map (a feature's: located at ``(..., name, "[key]")``, the name its input)
FIELD_FAULTS = frozenset({"missing", "extra_forbidden"})


def field_path(loc: Sequence[int | str], tagged: bool = True) -> str:
    """Turn a pydantic location ``("body", "batch", "items", 3, "n")`` into ``batch.items[3].n``
    (``("query", "wait_ms")`` into ``wait_ms``). Only the first part may be the source and, where
    ``tagged``, only the last a union member's tag: an unknown field's own name ends its location
    (``extra_forbidden``, not ``tagged``) and may read as either (``float``, ``x[0]``, ``query``),
    which was dropped, naming the parent (``body`` for one at the top) instead of the field to remove.
    A name is the caller's text, so a long one is cut as a value is (``clipped``): a megabyte-long
    unknown field was sent back whole in ``field``, ``detail`` and ``errors[]``, a 3 MB 422."""
    parts = list(loc)
    if parts and parts[0] in ("body", "path", "query"):  # where it came from, not its name
        parts = parts[1:]
    if tagged and parts and isinstance(parts[-1], str) and _is_member_tag(parts[-1]):
        parts = parts[:-1]  # a union member's tag (``float``, ``function-after[...]``), not a field
    return _compact([f"[{part}]" if isinstance(part, int) else f".{clipped(str(part))}" for part in parts])


def _compact(segments: list[str]) -> str:
    """The path of ``segments`` (``.name`` or ``[index]`` each), whole where it is short; past
    ``MAX_ECHO`` characters, its first ``PATH_HEAD`` parts and its last ``PATH_TAIL`` around an
    ellipsis, and its length in parts. A ``sampling.extra`` nested past the validation depth is
    located 513 parts deep (``sampling.extra.a.dict.a.dict...``, pydantic's member tags among the
    keys): its ``field`` was 1.8 KB, written three times in a 3.7 KB answer and in the message of
    the client's ``SchedulerAPIError``; the start says which field, the end where in it."""
    whole = _joined(segments)
    if len(whole) <= MAX_ECHO or len(segments) <= PATH_HEAD + PATH_TAIL:
        return whole
    return f"{_joined(segments[:PATH_HEAD])}...{_joined(segments[-PATH_TAIL:])} ({len(segments)} parts)"


def _joined(segments: list[str]) -> str:
    """``segments`` as one path: a name leads without its dot."""
    return "".join(segments).removeprefix(".")


def _is_member_tag(part: str) -> bool:
    """A union member's tag in a location: a plain type, a validator (``function-after[...]``) or a
    constrained one (``constrained-str``, pydantic's tag for ``Annotated[str, Field(max_length=...)]``)."""
    return part in _UNION_TAGS or "[" in part or part.startswith("constrained-")


def validation_details(raw: Sequence[Any]) -> tuple[str, dict[str, Any]]:
    """Pydantic's errors, one per field (a union reports each member), the first one leading.

    A body that is not JSON at all has no field: pydantic locates it at a character offset, which is
    reported as ``body`` with the offset in the message. The first error's ``value`` is its input
    where that is a scalar (a whole object would repeat the request back), a long one cut short
    (``echo``), and the detail names it after the field (``named``); ``errors[]`` carries no inputs."""
    unique: dict[str, dict[str, Any]] = {}
    for err in reversed(raw):
        path = field_path(err["loc"], err["type"] != "extra_forbidden") or "body"
        message = error_words(err)
        if err["type"] == "json_invalid":
            path, message = "body", f"{message} at character {err['loc'][-1]}: {err['ctx']['error']}"
        if err["type"] == "extra_forbidden" and (where := hint(path)) is not None:
            message = f"{message}: {where}"  # "not permitted" alone says nothing of what to send
        entry = {"field": path, "message": message, "type": err["type"], "input": err.get("input")}
        entry["named"] = err["type"] not in FIELD_FAULTS and tuple(err["loc"][-1:]) != ("[key]",)
        if path not in unique or not _wrong_member(entry) or _wrong_member(unique[path]):
            unique[path] = entry
    errors = list(reversed(unique.values()))
    errors.sort(key=_unhinted)  # a misplaced field first: it is the fault, and the "Field required"
    # it leaves (``max_tokens`` sent for ``max_new_tokens``) follows
    nothing: dict[str, Any] = {"field": "body", "message": "invalid", "input": None, "named": False}
    first = errors[0] if errors else nothing
    value = first.pop("input")
    lead = named(first["field"], value) if first.pop("named") else first["field"]
    for err in errors:
        err.pop("input", None)
        err.pop("named", None)
    extra: dict[str, Any] = {"field": first["field"], "errors": errors}
    if isinstance(value, ECHOED):
        extra["value"] = echo(value)
    detail = f"{lead}: {first['message']}"
    if len(errors) > 1:
        detail += f" (and {len(errors) - 1} more)"
    return detail, extra


def named(field: str, value: object) -> str:
    """How a detail leads: ``field=value`` where the input at fault is a number, a text, a boolean or
    null, else ``field`` alone (a missing field's input is its parent object, which would repeat the
    request back). The core's refusals read so (``batch.items[3].prompt_id='p1': duplicate ...``),
    and pydantic's did not: ``batch.items[0].n: Input should be greater than or equal to 1`` left a
    client to find which of its values that was in ``value`` (user65). A text is quoted as Python
    writes it (as the core's are), ``true``/``false``/``null`` as the JSON sent them, and a long one
    by its start, quoted too, and its size (``shortened``), so the detail never sends a huge input
    back. Its start unquoted, a newline in it split the client's error across lines, and a lone
    surrogate (``\\udcff``, which JSON carries) made it a message ``print`` or a UTF-8 log file
    cannot write (``UnicodeEncodeError``)."""
    if value is None or isinstance(value, bool):
        return f"{field}={json.dumps(value)}"
    if not isinstance(value, ECHOED):
        return field
    short = shortened(value, quoted=True)
    return f"{field}={value!r}" if short is None else f"{field}={short}"


def own_words(message: str) -> str:
    """pydantic's ``message`` without the prefix it puts before a validator's own text
    (``VALIDATOR_PREFIXES``): a 422 read ``actuals[0].step: Value error, expected an integer, got
    1.5``, pydantic's label before the project's words, where every other problem's detail is the
    project's words alone after the field's path (edges61)."""
    for prefix in VALIDATOR_PREFIXES:
        if message.startswith(prefix):
            return message[len(prefix) :]
    return message


def error_words(error: Mapping[str, Any]) -> str:
    """The words of one pydantic error (``ValidationError.errors()``'s entry), as every refusal of the
    project says them: pydantic's prefix dropped (``own_words``), and an id's pattern said in words
    (``service.names.chars_error``), not as the regular expression pydantic quotes. The service's
    422s, the sidecar's and the client's own ``ValueError``s read each error through this."""
    value, context = error.get("input"), error.get("ctx") or {}
    if error["type"] == "string_pattern_mismatch" and isinstance(value, str):
        words = chars_error(value, str(context.get("pattern")))
        if words is not None:
            return words
    return own_words(error["msg"])


def _unhinted(error: dict[str, Any]) -> bool:
    """False (first) for an unknown field the refusal says where to send (``hints.py``)."""
    return not (error["type"] == "extra_forbidden" and hint(error["field"]) is not None)


def _wrong_member(error: dict[str, Any]) -> bool:
    """A union member's error that only says the input is not of its type (``float_parsing`` for a
    text feature): where another member of the same field took the type and found what is wrong
    (``string_too_long``), that one names the fault, and this one would mislead."""
    return str(error["type"]).endswith(("_type", "_parsing"))


def echo(value: object) -> object:
    """``value`` as a problem shows it: whole where it is short, else cut to its start and its size
    (``"10000000000000000000... (4001 digits)"``), so that a 10**4000 sent for a count, or a megabyte
    of text, is named without being sent back in full (4 KB of digits in every 422 it caused)."""
    short = shortened(value)
    return _jsonable(value) if short is None else short


def clipped(text: str) -> str:
    """``text`` whole where it is short, else its start and its size (``shortened``): for an input
    named in an error body or a log line that is not a 422's ``value`` (a reported key, an unknown
    field's name), so a megabyte of it makes neither a huge answer nor a huge log record."""
    return shortened(text) or text


def shortened(value: object, quoted: bool = False) -> str | None:
    """The cut form of an integer past ``ECHO_DIGITS`` digits or a text past ``MAX_ECHO``; else None.
    ``quoted``: a text's start as Python writes it (its control characters and surrogates escaped),
    for a detail's ``field=value`` (``named``); a ``value`` member is JSON, which escapes them itself."""
    if isinstance(value, str) and len(value) > MAX_ECHO:
        head = value[:ECHO_HEAD]
        return f"{repr(head) if quoted else head}... ({len(value)} characters)"
    if not isinstance(value, int) or isinstance(value, bool) or -(10**ECHO_DIGITS) < value < 10**ECHO_DIGITS:
        return None
    sign = "-" if value < 0 else ""
    try:
        digits = str(abs(value))
    except ValueError:  # past Python's int-to-text limit (4,300 digits): its size is all there is to say
        return f"{sign}an integer of about {int(abs(value).bit_length() * math.log10(2)) + 1} digits"
    return f"{sign}{digits[:ECHO_DIGITS]}... ({len(digits)} digits)"


def _jsonable(value: object) -> object:
    """``value`` if JSON can carry it as is (NaN and Infinity cannot), else its repr."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    return value if isinstance(value, (str, int, float, bool, type(None))) else repr(value)
