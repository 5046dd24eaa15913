"""A watcher that holds no server pid signals nothing once its owner is gone.

``os.kill`` reads a pid of 0 as the caller's own process group and -1 as every process the caller
may signal: a watcher left with either (a server whose pid was never told, a mutant that lost it:
mutants54's W4, which ended every process in the container) must end without a signal. Here the
pid is 0, whose slip stays inside the watcher's own session: unguarded, its SIGTERM ends the watcher.
"""

from __future__ import annotations

import os
import subprocess
import sys

from service.embedded_watch import WATCHER


def test_a_watcher_with_pid_0_and_no_pidfd_ends_without_signalling_its_group() -> None:
    read_end, write_end = os.pipe()
    watcher = subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", WATCHER, "0", "-1", "", "-1"],
        stdin=read_end,
        start_new_session=True,  # as the owner starts it: its group is its own
    )
    os.close(read_end)
    os.close(write_end)  # the owner gone without a stop: end-of-file
    assert watcher.wait(timeout=60) == 0  # -15 had it signalled its own group
