"""The names a loopback server answers to in ``Host`` (the DNS rebinding guard's rule,
``service/hosts/allow_list.py``), apart from its ASGI middleware: the push sidecar's health port, a standard
library server that loads no web framework (``service/sidecar/health.py``), applies the same rule.
"""

from __future__ import annotations

import re

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "[::1]"})
# a DNS name or IPv4 address, or an IPv6 address in brackets, as ``Host`` carries it without a port
_NAME = re.compile(r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?|\[[0-9a-f:.]+\]")


def host_name(value: str) -> str:
    """The name of a ``Host`` value, port and one trailing dot left out, lower case:
    ``LocalHost.:8000`` -> ``localhost``, ``[::1]:8000`` -> ``[::1]``."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[: value.find("]") + 1] if "]" in value else value
    return value.split(":", 1)[0].removesuffix(".")


def check_host_names(names: str) -> list[str]:
    """The comma-separated names of ``ROLLOUT_ALLOWED_HOSTS``, normalised as ``host_name`` reads a
    header; ``ValueError`` naming an entry that is no host name (a port, a scheme, a wildcard: each
    would silently never match)."""
    found = []
    for entry in (part.strip() for part in names.split(",")):
        if not entry:
            continue
        name = entry.lower().removesuffix(".")
        if not _NAME.fullmatch(name):
            raise ValueError(
                f"{entry!r} is no host name: list names or addresses only, without port, scheme or "
                "wildcard (any port is accepted)"
            )
        found.append(name)
    return found


def refused_host(sent: str | None, others: str = "") -> str:
    """Why a request's ``Host`` was refused, naming it (cut short: it is the caller's), the names
    the server answers to (``others``: what the operator may add, and how) and why."""
    said = "no Host header" if sent is None else f"Host {sent[:100]!r} is not a name of this server"
    return f"{said}: it answers only to localhost, 127.0.0.1 and [::1]{others} (DNS rebinding guard)"
