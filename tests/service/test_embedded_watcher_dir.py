"""The watcher removes a dead owner's temporary data dir only once the server ended: the server writes
its log there until then (``embedded_watch.py``), and a dir emptied under a running server, which then
writes a file there, is left behind half removed."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from service.embedded_watch import Watch
from tests.service.polling import GONE_WITHIN_S, removed_within
from tests.service.procfs import has_pidfds

# A server slow to end: it takes SIGTERM (touching argv[1]) and runs on until killed; argv[2] once ready.
SLOW_TO_END = """
import pathlib, signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: pathlib.Path(sys.argv[1]).touch())
pathlib.Path(sys.argv[2]).touch()
while True:
    time.sleep(1)
"""


def _within(condition: Callable[[], bool], seconds: float) -> bool:
    """Whether ``condition`` holds at some time within ``seconds``."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@pytest.mark.skipif(not has_pidfds(), reason="a watcher without a pidfd cannot tell when its server ended")
def test_an_owner_gone_leaves_the_temporary_dir_to_its_server_until_the_server_ended(tmp_path: Path) -> None:
    data, signalled, ready = tmp_path / "data", tmp_path / "signalled", tmp_path / "ready"
    data.mkdir()
    server = subprocess.Popen([sys.executable, "-c", SLOW_TO_END, str(signalled), str(ready)])
    try:
        assert _within(ready.exists, GONE_WITHIN_S)
        watch = Watch.start(server.pid, str(data))
        assert watch.fd is not None
        os.close(watch.fd)  # what the kernel does when the owner dies
        watch.fd = None
        assert _within(signalled.exists, GONE_WITHIN_S)
        assert not removed_within(data, 1.0)  # the server runs on: the dir stays
    finally:
        server.kill()
        server.wait()
    assert removed_within(data, GONE_WITHIN_S)
    assert watch.process.wait(timeout=GONE_WITHIN_S) == 0
