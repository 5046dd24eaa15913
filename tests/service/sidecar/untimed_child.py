"""The sidecar command whose Redis calls have no socket timeout (a child process's entry).

A stand-in for a Redis call that never returns: the command's client gives up on a stalled server
after its socket timeout (5 s), so against a SIGSTOPped one every call does return, late. Without the
timeout a call on the stalled server lasts as long as the stall, and the exit ends it only by closing
its connection (``service/sidecar/hang_up.py``). Run as ``python -m tests.service.sidecar.untimed_child
sidecar ...`` (``service.cli``'s arguments).
"""

from __future__ import annotations

import sys
from typing import Any


def install() -> None:
    """Drop the socket timeout from the sidecar's Redis client's arguments."""
    from service.sidecar import launch

    timed = launch._client_args

    def untimed(*args: Any, **kwargs: Any) -> dict[str, Any]:
        return {**timed(*args, **kwargs), "socket_timeout": None}

    launch.__dict__["_client_args"] = untimed  # the name ``launch`` calls


if __name__ == "__main__":
    install()
    from service.cli import main

    sys.argv = ["rollout-scheduler", *sys.argv[1:]]
    main()
