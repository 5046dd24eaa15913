"""docs/operations.md's "Redis users (ACL)" says what each user may not run, and what ``--cluster``
adds: held here to the one definition ``redis-acl`` prints them from (``service/delivery/acl.py``), so
a command granted later (``XLEN`` to the sidecars) cannot leave the page telling an operator the
sidecar's credentials cannot run it. tests/deploy/test_redis_acl_refusals.py asks a real server what
the users refuse; this reads the page's lists."""

from __future__ import annotations

import re
from collections.abc import Sequence

from service.delivery.acl import CLUSTER_COMMANDS, SERVICE, SIDECAR
from tests.service.cli_docs import ROOT

_COMMAND = re.compile(r"`([A-Z]+(?: [A-Z]+)?)`")


def _section() -> str:
    text = (ROOT / "docs" / "operations.md").read_text()
    return " ".join(text.split("### Redis users (ACL)", 1)[1].split("\n## ", 1)[0].split())


def _between(text: str, start: str, end: str) -> list[str]:
    """The commands named in backticks after ``start`` and before ``end``, in Redis's ACL spelling
    (lower case, ``client|kill`` for a subcommand)."""
    assert start in text, start
    span = text.split(start, 1)[1]
    assert end in span, end
    return [name.lower().replace(" ", "|") for name in _COMMAND.findall(span.split(end, 1)[0])]


def holds(commands: Sequence[str], name: str) -> bool:
    """Whether a user granted ``commands`` may run ``name`` or any subcommand of it (``xinfo`` is held
    through ``xinfo|stream``; ``client|kill`` through ``client``)."""
    container = name.split("|", 1)[0]
    return name in commands or container in commands or any(c.startswith(name + "|") for c in commands)


def refused_to_both() -> list[str]:
    return _between(_section(), "neither user may run", ", in a Lua script neither")


def refused_to_the_sidecar() -> list[str]:
    return _between(_section(), "The sidecar user, beyond that,", "What it holds it may use")


def added_on_a_cluster() -> list[str]:
    return _between(_section(), "`--cluster` (or", "(`tests/deploy/test_redis_acl_cluster.py`)")


def test_the_commands_the_page_says_neither_user_may_run_are_held_by_neither() -> None:
    named = refused_to_both()
    assert {"flushall", "config", "keys", "client|kill", "publish"} <= set(named)
    assert [name for name in named if holds(SERVICE.commands, name) or holds(SIDECAR.commands, name)] == [
        "info"  # the page's one exception: "but `INFO` (the version check at start)"
    ]


def test_the_commands_the_page_says_the_sidecar_may_not_run_are_the_service_s_alone() -> None:
    named = refused_to_the_sidecar()
    assert {"xrange", "xread", "xlen", "incr", "multi"} <= set(named)
    assert [name for name in named if not holds(SERVICE.commands, name)] == []
    assert [name for name in named if holds(SIDECAR.commands, name)] == []


def test_what_the_page_says_cluster_adds_is_what_it_adds() -> None:
    assert sorted(added_on_a_cluster()) == sorted(CLUSTER_COMMANDS)


def test_a_command_is_held_whole_through_its_container_or_in_part_through_a_subcommand() -> None:
    assert [holds(SIDECAR.commands, name) for name in ("xadd", "client|setinfo", "xlen", "client|kill")] == [
        True,
        True,
        False,
        False,
    ]
    assert holds(SERVICE.commands, "xinfo")  # through xinfo|stream
