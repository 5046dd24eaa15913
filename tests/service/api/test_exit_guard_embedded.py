"""A replica the exit guard ends leaves no embedded server behind, and says it was ended by its status.

``serve`` without ``REDIS_URL`` stops its embedded server after uvicorn returns: the watcher disarmed,
SIGTERM, then up to ``STOP_S`` (5 s) for the server to end. A server that does not answer (SIGSTOPped
here: a stalled server) held that wait past the guard's bound (5 s from the app's stop at a 1 s
command timeout), and ``os._exit`` cut it with the watcher already disarmed: the server ran on, stopped
for good, re-parented to PID 1, its port and temporary dir kept, and the process exited 0 as an
ordinary stop does. The guard's last acts now end such a server and remove its dir, and a forced exit
has its own status (``FORCED_STATUS``), however late a loaded host wakes the guard: the server's own
stop, SIGKILL ``STOP_S`` after it began, ends tens of ms past the bound, and a guard that woke later
still left the exit 0 (review52a: ``exit_guard``'s decision reads the clock). No duration is asserted.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from service.api.exit_guard import EXIT_LOG, FORCED_STATUS
from tests.service.api.serve_embedded import its_server_stalled
from tests.service.polling import GONE_WITHIN_S, gone_within, removed_within

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads the child's processes from /proc"),
]
WAIT_S = 90.0  # a bound against never, for a loaded host: the guard's is 5 s past the app's stop


def test_a_stalled_embedded_server_is_ended_with_its_dir_when_the_guard_ends_the_exit(tmp_path: Path) -> None:
    with its_server_stalled(tmp_path, 1, WAIT_S) as (proc, server, data_dir):
        proc.send_signal(signal.SIGTERM)
        _, logged = proc.communicate(timeout=WAIT_S)
        guarded = [line for line in logged.splitlines() if EXIT_LOG in line]
        assert (proc.returncode, len(guarded)) == (FORCED_STATUS, 1), logged
        assert gone_within(server, GONE_WITHIN_S), "the embedded server outlived serve"
        assert removed_within(data_dir, GONE_WITHIN_S), f"{data_dir} outlived serve"
