"""The in-flight mark of a ``POST /schedule`` (``P:planning``): the delivery's record that a request
under a caller-chosen id is being planned, so that a DELETE meanwhile withdraws the id instead of
answering 404 and letting the step publish. One concept, kept apart from the protocol's publisher
and worker steps (``protocol.Delivery`` inherits it): the mark, its extension once answered, its
keeping while a request overruns, and its take-back, each one call of ``lua/planning.lua``.
"""

from __future__ import annotations

from service.delivery import wire
from service.delivery.calls import ScriptCalls
from service.delivery.errors import LateMarkError


class PlanningMarks(ScriptCalls):
    """``P:planning``'s four operations, on the schedule's own slot."""

    def mark_planning(
        self, schedule_id: str, request_id: str, ttl_ms: int, now_ms: int | None = None
    ) -> None:
        """Mark one ``POST /schedule`` under ``schedule_id`` in flight for ``ttl_ms`` at most
        (``keys.ScheduleKeys.planning``, an entry per request with its own deadline): a DELETE
        meanwhile withdraws the id (``cancel``), where one of an id never sent is a 404 that writes
        nothing. The publish deletes the mark in its atomic step; ``unmark_planning`` takes this
        request's entry back otherwise. The key's TTL is only extended here, so a request racing this
        one keeps its own (``lua/planning.lua``). The service writes it for its command timeout and
        extends it once answered (``extend_planning``); a mark already there writes nothing (a late
        copy of the write)."""
        self._call(self.scripts.planning, schedule_id, ["mark", request_id, int(ttl_ms), wire.clock(now_ms)])

    def extend_planning(
        self, schedule_id: str, request_id: str, ttl_ms: int, now_ms: int | None = None
    ) -> None:
        """Give ``mark_planning``'s entry the request's whole ``ttl_ms`` (from when it was marked),
        once the request has the mark's answer: the mark is written for the command timeout only,
        so one whose answer was lost lapses that soon wherever it lands. Raises ``LateMarkError``
        where the entry's first deadline had passed as this landed (the request must not rely on
        it: a DELETE may have found the id free); a DELETE that withdrew the id meanwhile is no
        error (the publish refuses it, ``lua/planning.lua``)."""
        args = ["extend", request_id, int(ttl_ms), wire.clock(now_ms)]
        if int(self._call(self.scripts.planning, schedule_id, args)) == 0:
            raise LateMarkError(schedule_id)

    def keep_mark(self, schedule_id: str, request_id: str, life_ms: int, now_ms: int | None = None) -> bool:
        """Push the mark of a request still alive to ``life_ms`` past now, where it is still there,
        its deadline not passed, and that is later: a request overrunning the life it was extended to
        (``service.pipeline.step_keeper``). A mark taken back, withdrawn, published or lapsed is never
        written again (``lua/planning.lua``), so a replica that dies leaves its marks to lapse at the
        deadline last given; the withdrawal of an id a DELETE withdrew is pushed instead, never
        shortened, so the request's publish is still refused however long it lives past the
        retention. Returns whether the mark or the id's withdrawal was still there. One call per mark,
        on its schedule's slot (only overrunning requests are kept): the keeper sends each on its own,
        so one that Redis fails leaves the others sent."""
        args = ["keep", request_id, int(life_ms), wire.clock(now_ms)]
        return int(self._call(self.scripts.planning, schedule_id, args)) == 1

    def unmark_planning(self, schedule_id: str, request_id: str, now_ms: int | None = None) -> None:
        """Take back ``mark_planning``'s entry of a request refused or failed before it published (the
        last entry's removal deletes the key): a DELETE then finds the id unknown again. The key's
        TTL becomes the latest deadline of the entries left, in the same atomic step: a refused
        request that had extended it leaves no key a later expiry (docs/api.md)."""
        self._call(self.scripts.planning, schedule_id, ["unmark", request_id, "", wire.clock(now_ms)])
