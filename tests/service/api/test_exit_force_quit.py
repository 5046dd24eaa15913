"""A second Ctrl-C while uvicorn waits for a request in flight (its force-quit) is logged as one
WARNING line, not as an ERROR with a traceback.

uvicorn skips the app's lifespan shutdown then, and the loop's end cancels the lifespan task, whose
cancellation Starlette reports as a failed shutdown, its ``CancelledError`` traceback the message
uvicorn logged as an ERROR: an error report for what the user asked for (exit52 left it; review52a).
The request here is a step whose publish never returns, so uvicorn is still waiting when the second
SIGINT comes; its listener closed is the sign that the first was heard.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from service.embedded import EmbeddedServer
from service.logs import FORCE_QUIT_LOG
from tests.service.api.stopped_child import closed
from tests.service.api.stuck_post import stopped_while_stuck

pytestmark = pytest.mark.slow
WAIT_S = 90.0  # a bound against never, for a loaded host


def test_a_second_ctrl_c_during_uvicorns_wait_is_one_warning_line_not_a_traceback(
    server: EmbeddedServer, tmp_path: Path
) -> None:
    # the default graceful wait (10 s): the second Ctrl-C must come while uvicorn still waits
    with stopped_while_stuck(server.url, tmp_path, WAIT_S, signal.SIGINT, graceful_s=None) as (proc, url, _):
        closed(url, WAIT_S)
        proc.send_signal(signal.SIGINT)
        _, logged = proc.communicate(timeout=WAIT_S)
    assert [line for line in logged.splitlines() if FORCE_QUIT_LOG in line and '"WARNING"' in line], logged
    assert "Traceback" not in logged, logged
