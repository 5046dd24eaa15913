"""This release's ``Delivery`` calls with an older release's Lua, loaded from git beside this one's, as
while a release rolls (docs/operations.md, "Upgrade and rollback"): the release points the tests name,
each script as that release loaded it, and a client that sends them. The mixed-versions, fail-once and
push report-count tests share it, so a change to how an old release is loaded reaches them all, rather
than through one test module's private names."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import redis

from service.delivery import Delivery
from service.delivery.scripts import OPERATIONS, Scripts, script_source

OLD_RELEASE = "6ed67cb"  # the last release point before P:gneed
REPO = Path(__file__).resolve().parents[3]


def old_source(operation: str, release: str = OLD_RELEASE) -> str | None:
    """An operation's full script as the old release loaded it; None where git or the commit is absent."""
    texts = []
    for name in ("common.lua", "index.lua", f"{operation}.lua"):
        shown = subprocess.run(
            ["git", "-C", str(REPO), "show", f"{release}:service/delivery/lua/{name}"],
            capture_output=True,
            text=True,
            check=False,
        )
        if shown.returncode != 0:
            return None
        texts.append(shown.stdout)
    return "\n".join(texts)


def in_history(release: str) -> bool:
    """Whether git and the commit are here (a source archive has neither)."""
    shown = subprocess.run(
        ["git", "-C", str(REPO), "cat-file", "-e", f"{release}^{{commit}}"], capture_output=True, check=False
    )
    return shown.returncode == 0


def old_delivery(client: redis.Redis, release: str = OLD_RELEASE) -> Delivery:
    """This release's calls with the old release's scripts (their arguments did not change, but for
    publish's 27th, the engine, which an older publish.lua never reads: it takes its nonce as the last)."""
    if not in_history(release):
        pytest.skip(f"release {release} not in this checkout's git history")
    scripts = {}
    for op in OPERATIONS:  # an operation the old release did not have, it never called: this one's
        source = old_source(op, release)
        scripts[op] = client.register_script(script_source(op) if source is None else source)
    old = Delivery(client)
    old.scripts = Scripts(**scripts)
    return old


PRE_FAILED = "11f32607"  # the last commit before P:failed: its release.lua answers a repeat STALE
