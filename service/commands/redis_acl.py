"""``rollout-scheduler redis-acl``: the least-privilege Redis users of the service and the sidecars.

Prints one ``ACL SETUSER`` line per role (pipe them to ``redis-cli``), or with ``--aclfile`` the lines
of an aclfile, from the one definition in ``service/delivery/acl.py``. A password comes from
``ROLLOUT_ACL_SERVICE_PASSWORD`` / ``ROLLOUT_ACL_SIDECAR_PASSWORD`` (never a flag: ``ps`` shows
flags) and is printed as its SHA-256 only; a role without one is printed ``off``, a placeholder that
logs no one in. An aclfile also holds Redis's own ``default`` user (``ROLLOUT_ACL_DEFAULT_PASSWORD``):
a server started with one ignores ``requirepass``, and a file without it would leave ``default`` open.
``--output`` writes the lines to a file (the compose loop's one-shot, whose image has no shell).
docs/operations.md, "Redis users (ACL)", says what the users bound and what they do not.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

# The users' default names, as ``service/delivery/acl.py``'s roles name them (a test holds them equal):
# spelled here because the CLI root imports this module, and ``service.delivery`` loads redis-py, which
# only a command that talks to Redis should pay for at start (tests/service/sidecar/test_startup_imports.py).
SERVICE_USER = "rollout-service"
SIDECAR_USER = "rollout-sidecar"

HELP = (
    "Print ACL SETUSER lines (or an aclfile) for the least-privilege Redis users of the service and "
    "the sidecars; passwords from ROLLOUT_ACL_SERVICE_PASSWORD / ROLLOUT_ACL_SIDECAR_PASSWORD "
    "(an aclfile's default user: ROLLOUT_ACL_DEFAULT_PASSWORD)."
)


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    """Attach ``redis-acl`` to the root app."""
    del bench_app
    app.command("redis-acl", help=HELP)(redis_acl)


def _prefix(value: str) -> str:
    """``--prefix`` checked as the service and the sidecars check theirs."""
    from service.delivery.key_prefix import PrefixError, check_prefix

    try:
        return check_prefix(value)
    except PrefixError as error:
        raise typer.BadParameter(str(error)) from None


def _checked_user(user: str) -> str:
    """``user`` if it is one word Redis reads as a name (no space, quote or control character), and
    not ``default``: its ``reset`` would take every right from whoever logs in without a name."""
    if not user or any(c.isspace() or c in "\"'" or not c.isprintable() for c in user):
        raise typer.BadParameter(f"ACL user name {user!r} must be one printable word")
    if user == "default":
        raise typer.BadParameter("the default user is Redis's own: name another one")
    return user


def _password(env: str, user: str, what: str) -> str | None:
    """The password in ``env``; None, said on stderr, when it is unset or empty (the user is off)."""
    password = os.environ.get(env) or None
    if password is None:
        typer.echo(f"{user} ({what}) is off: set {env} to turn it on", err=True)
    return password


def redis_acl(
    prefix: Annotated[
        str,
        typer.Option(envvar="ROLLOUT_KEY_PREFIX", callback=_prefix, help="Key prefix; the service's."),
    ] = "rs",
    service_user: Annotated[
        str, typer.Option(callback=_checked_user, help="ACL user of the service.")
    ] = SERVICE_USER,
    sidecar_user: Annotated[
        str, typer.Option(callback=_checked_user, help="ACL user of the sidecars.")
    ] = SIDECAR_USER,
    aclfile: Annotated[bool, typer.Option(help="Print aclfile lines instead of ACL SETUSER.")] = False,
    cluster: Annotated[
        bool,
        typer.Option(envvar="ROLLOUT_REDIS_CLUSTER", help="Redis Cluster: add its discovery commands."),
    ] = False,
    output: Annotated[
        Path | None, typer.Option(help="Write the lines to this file instead of stdout.")
    ] = None,
) -> None:
    """Print one user per role (and with ``--aclfile`` the default user first); a line on stderr says
    which of them stay off for want of a password (stderr: neither an aclfile nor ``redis-cli`` reads a
    comment line)."""
    from service.delivery.acl import (
        DEFAULT_PASSWORD_ENV,
        SERVICE,
        SIDECAR,
        Grant,
        aclfile_line,
        default_aclfile_line,
        setuser_line,
    )

    line = aclfile_line if aclfile else setuser_line
    if service_user == sidecar_user:
        raise typer.BadParameter("the service and the sidecars need two users: one would hold both")
    lines = []
    if aclfile:
        lines.append(default_aclfile_line(_password(DEFAULT_PASSWORD_ENV, "default", "Redis's own")))
    for role, user in ((SERVICE, service_user), (SIDECAR, sidecar_user)):
        password = _password(role.password_env, user, role.name)
        lines.append(line(Grant(role, user, prefix, password, cluster)))
    if output is None:
        for text in lines:
            typer.echo(text)
    else:
        output.write_text("".join(f"{text}\n" for text in lines))
