"""A stop disarms the embedded server's watcher: it reads the owner's byte and exits of itself. Left
armed (no byte written, the pipe left open), it would be SIGKILLed at the end of ``WATCHER_EXIT_S``
instead, each stop that much longer."""

from __future__ import annotations

import pytest

from service.embedded import EmbeddedServer


@pytest.mark.parametrize("end", ["stop", "kill"])
def test_a_stop_or_a_kill_disarms_the_watcher_which_exits_of_itself(end: str) -> None:
    server = EmbeddedServer().start()
    watcher = server._watcher
    assert watcher is not None
    getattr(server, end)()
    assert watcher.returncode == 0  # exited on the byte, not SIGKILLed (-9) after WATCHER_EXIT_S
    server.stop()
