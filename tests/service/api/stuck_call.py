"""``serve`` whose publish is a Redis call that never returns (a child process's entry).

A stand-in for a planning thread inside a Redis call when the replica stops: on a Redis Cluster whose
every master stalls, a publish's pipeline over several slots takes 7 command timeouts (stop49), and
a call that Redis does not answer at all takes as long as the stall. Here it is a ``BLPOP`` with no
timeout on a list nobody pushes to, on the real server (a client with no socket timeout), so the
call lasts until the process ends. Before it, the file ``STUCK_CALL_STARTED`` names is created; and
where ``STUCK_CALL_JOINING`` names a file, it is created as the interpreter's exit begins to join the
threads that are no daemon (``threading._shutdown``), the stuck one among them.
Run as ``python -m tests.service.api.stuck_call serve ...`` (``service.cli``'s arguments).
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import Any

import redis

STARTED = "STUCK_CALL_STARTED"
URL = "STUCK_CALL_REDIS_URL"
JOINING = "STUCK_CALL_JOINING"
NEVER_PUSHED = "stop49:never-pushed"


def install() -> None:
    """Make every publish wait, inside a Redis call, for a push that never comes."""
    from service.pipeline import publish

    def stuck(*args: Any, **kwargs: Any) -> Any:
        del args, kwargs
        Path(os.environ[STARTED]).touch()
        # no socket timeout: redis-py 7's default (5 s) would end the call
        with redis.Redis.from_url(os.environ[URL], socket_timeout=None) as client:
            client.blpop([NEVER_PUSHED], timeout=0)
        raise AssertionError("a push came to a list nobody pushes to")

    publish.__dict__["publish_plan"] = stuck  # the name the publish stage calls
    if JOINING in os.environ:
        join = threading.__dict__["_shutdown"]

        def joining() -> None:
            Path(os.environ[JOINING]).touch()
            join()

        threading.__dict__["_shutdown"] = joining  # what the interpreter's exit calls, by its name


if __name__ == "__main__":
    install()
    from service.cli import main

    sys.argv = ["rollout-scheduler", *sys.argv[1:]]
    main()
