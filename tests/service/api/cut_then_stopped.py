"""``serve`` whose plan reaches its publish check between uvicorn's cut and the app's stop (a child
process's entry).

At the end of its graceful wait uvicorn cancels the handlers still running (``CutAnswer`` answers the
cut request 503, ``service/api/cut_answer.py``) and only then runs the app's stop, which sets the
stop the planner and the publish check read (``Startup.halt``). A plan that reaches the publish
check in between finds no stop. Here that interleaving is forced, with no sleep: the publish check
waits until the cut request's 503 is under way, and the app's stop waits until the check has been
made. Before the check the file ``CUT_THEN_STOPPED_STARTED`` names is created. Run as
``python -m tests.service.api.cut_then_stopped serve ...`` (``service.cli``'s arguments).
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import Any

STARTED = "CUT_THEN_STOPPED_STARTED"
WAIT_S = 120.0  # a bound against never: the cut comes at the graceful wait's end


def install() -> None:
    """Order the cut, the publish check and the app's stop, in that order."""
    from service.api import cut_answer
    from service.pipeline import stages
    from service.problems.table import problem_response
    from service.startup import Startup

    cut, checked = threading.Event(), threading.Event()
    answer, check, halt = problem_response, stages._not_stopped, Startup.halt

    def answered(*args: Any, **kwargs: Any) -> Any:  # the cut request's 503, built as it is sent
        cut.set()
        return answer(*args, **kwargs)

    def checked_after_the_cut() -> None:
        Path(os.environ[STARTED]).touch()
        cut.wait(WAIT_S)
        try:
            check()
        finally:
            checked.set()

    def halted_after_the_check(self: Startup) -> None:
        checked.wait(WAIT_S)
        halt(self)

    cut_answer.__dict__["problem_response"] = answered  # the names their callers look up
    stages.__dict__["_not_stopped"] = checked_after_the_cut
    Startup.halt = halted_after_the_check  # type: ignore[method-assign]


if __name__ == "__main__":
    install()
    from service.cli import main

    sys.argv = ["rollout-scheduler", *sys.argv[1:]]
    main()
