"""The schedules a sidecar found cancelled by the trainer, and the items of each it counted ``cancelled``.

A lease lost, or a report refused, because the trainer cancelled the step is expected, not a fault:
the session counts it apart (``cancelled``, not ``lost`` or ``stale``) and says so once per schedule
(``WorkerSession.found_cancelled``). One item's end can show several times: a heartbeat finds its
lease gone, then the pull worker's ``/done`` of it is refused, and a worker that repeats a ``/done``
(a retry after a lost reply) is refused again. Counted per refusal, a cancel of 7 items read 14 on a
worker that repeated its reports (docs/experiments.md, bughunt9), so the counter said nothing about
how much work the cancel dropped. Here each item is counted once.

Bounded: the newest ``CANCELLED_KEPT`` schedules are kept (a few a training run), not pruned with the
inbox, since a pull worker may report a cancelled item long after the sidecar dropped its lease. A
schedule forgotten and found again starts a fresh count. Within a schedule, only the keys of leases
this sidecar handed out are counted (``ledger.Ledger.refused``): a pull worker's report of a
key it was never handed would otherwise be kept too, without bound.
"""

from __future__ import annotations

from collections.abc import Iterable

CANCELLED_KEPT = 256  # cancelled schedule ids remembered, oldest forgotten first


class Cancels:
    """Schedule ids found cancelled, oldest first, each with the item keys counted for it."""

    def __init__(self) -> None:
        self._counted: dict[str, set[str]] = {}

    def __contains__(self, schedule_id: object) -> bool:
        return schedule_id in self._counted

    def add(self, schedule_id: str) -> bool:
        """Remember ``schedule_id`` as cancelled; whether it is new (its one log line is due)."""
        if schedule_id in self._counted:
            return False
        self._counted[schedule_id] = set()
        if len(self._counted) > CANCELLED_KEPT:
            del self._counted[next(iter(self._counted))]
        return True

    def count(self, schedule_id: str, keys: Iterable[str]) -> int:
        """How many of ``keys`` (items of the cancelled ``schedule_id``) were not counted yet; they
        are from now on."""
        self.add(schedule_id)  # found, then forgotten meanwhile: counted afresh, and bounded still
        counted = self._counted[schedule_id]
        new = set(keys) - counted
        counted |= new
        return len(new)
