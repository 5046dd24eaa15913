"""The finished trajectory the sidecar's session tests report: five tokens, "done", in 0.01 s.

Nine session, resend and cluster test modules (and ``push_resends``' staging) complete their leases
with it and none reads its fields: one name here, where seven of them wrote it out and two imported
``push_resends``' copy, so a change to what a test worker reports reaches them all alike.
"""

from __future__ import annotations

from service.delivery.records import TrajectoryResult

RESULT = TrajectoryResult(output_tokens=5, wall_time_s=0.01, output="done")
