"""The caller's deadline for ``POST /schedule``, sent as ``X-Envoy-Expected-Rq-Timeout-Ms``.

A trainer's HTTP client gives up after its timeout, but the service planned on and published a plan
nobody read, its work then held by the fleet. The header says how long the caller waits, counted from
the request's arrival (stamped before its body is read: ``service/arrival.py``; counted from the
handler's start, after the read and the parse of a body of tens of MB, a plan could be given the whole
deadline again and answer after the caller gave up): the plan's time budget is capped to leave the
publish's reserve before it (what this replica's recent publishes say one of the request's size needs:
``publish_pace``), and a request that cannot publish before it (the deadline passed in line, or less
than that reserve left when the publish would start) is refused 504 ``deadline-exceeded`` with nothing
written (its in-flight mark taken back as any refusal's).

Why Envoy's name, not gRPC's ``grpc-timeout``: it is a plain count of milliseconds (``grpc-timeout`` has
its own unit grammar, and proxies apply it by gRPC's rules to gRPC requests only), and it says exactly
this: "the time in which the caller expects the request to complete". Envoy (Istio and most gateways
built on it) sets it itself on the request it forwards, from the route's timeout, after which it
answers the caller 504: behind one, the service meets the deadline the proxy really enforces, with no
change to the trainer, and answers the same 504 a proxy would.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from scheduler.errors import DeadlinePassedError, InvalidInputError
from service.pipeline.publish_pace import FIXED_S
from service.problems.table import DeadlineExceededError

HEADER = "X-Envoy-Expected-Rq-Timeout-Ms"
# The least any publish's reserve can be (``PublishPace.reserve_s`` with every pace zero): what the
# in-flight mark counts, before the request's size is known (``capped_s``).
MIN_RESERVE_S = FIXED_S
_MILLISECONDS = re.compile(r"[0-9]+")
# past 10 digits (~115 days) the caller waits longer than any plan takes: no deadline (a client's
# ``timeout_s=1e9``, a proxy's year-long route timeout), where it was refused 422 on every request
_LONGEST_DIGITS = 10


@dataclass(frozen=True)
class Deadline:
    """When the caller stops waiting (on ``clock``, ``time.perf_counter`` but in tests); ``at`` None:
    it sent no deadline."""

    at: float | None = None
    clock: Callable[[], float] = time.perf_counter

    def left_s(self) -> float:
        """Seconds until the deadline (negative once past; infinite without one)."""
        return math.inf if self.at is None else self.at - self.clock()

    def check(self, before: str, need_s: float = 0.0) -> None:
        """Refuse (504) a request whose deadline leaves no more than ``need_s`` (what the publish of
        its size needs: ``PublishPace.reserve_s``) ``before`` what it was to do next: a publish begun
        with less left ends after the caller stopped waiting."""
        left_s = self.left_s()
        if left_s <= 0:
            raise _exceeded(f"passed before {before}")
        if left_s <= need_s:
            raise _exceeded(f"left {_ms(left_s)} before {before}, less than the {_ms(need_s)} that needs")

    def budget_s(self, budget_s: float, reserve_s: float) -> float:
        """The plan's time budget: the request's, capped so that ``reserve_s`` (what the handover to the
        publish and a publish of its size need: ``Reserve.cap_s``) is left before the deadline;
        refused (504) where not even that is left."""
        room_s = self.left_s() - reserve_s
        if room_s <= 0:
            need = f"{_ms(reserve_s)} the handover and a publish of its size need"
            raise _exceeded(f"leaves less than the {need} after the plan")
        return min(budget_s, room_s)

    def capped_s(self, budget_s: float) -> float:
        """The most ``budget_s`` the plan can be given from now on (``budget_s`` caps it later, when
        less is left, by a reserve of at least ``MIN_RESERVE_S``): what the in-flight mark must outlive
        (``in_flight.mark``). Never negative: a request with no room left is refused before it plans."""
        return min(budget_s, max(0.0, self.left_s() - MIN_RESERVE_S))

    @contextmanager
    def planner_gives_up(self, need_s: float) -> Iterator[float | None]:
        """When the planner is to give up (``PlanRequest.hard_deadline``, on ``time.perf_counter``, the
        planner's clock for it; None without a deadline): where less than ``need_s`` (what the publish of
        its size needs) is left, which the publish's check refuses whatever plan it is handed, so a plan
        still running then (a stage no budget cuts, slow on a starved host) stops rather than finish for
        nobody. Its give-up (``DeadlinePassedError``, naming the planner's stage) is raised as this
        504, before anything is published."""
        give_up_at = None if self.at is None else time.perf_counter() + self.left_s() - need_s
        try:
            yield give_up_at
        except DeadlinePassedError as gave_up:
            why = f"came within the {_ms(need_s)} its publish needs while it was planned"
            raise _exceeded(f"{why} (the planner gave up in its {gave_up.stage} stage)") from gave_up

    def exceeded(self, why: str) -> DeadlineExceededError:
        """The 504 of a request whose deadline passed ``why`` (``PlanSlots.hold``: in line)."""
        return _exceeded(why)


NO_DEADLINE = Deadline()


def of(value: str | None, arrived: float, clock: Callable[[], float] = time.perf_counter) -> Deadline:
    """The deadline the header's ``value`` (milliseconds from ``arrived``, the request's arrival on
    ``clock``: ``service/arrival.py``) sets, none past 10 digits; a value that is not a whole number of
    milliseconds is refused 422 naming the header, before anything is written."""
    if value is None:
        return NO_DEADLINE
    digits = value.strip()
    if not _MILLISECONDS.fullmatch(digits):
        raise InvalidInputError(HEADER, value, "expected a whole number of milliseconds")
    if len(digits.lstrip("0")) > _LONGEST_DIGITS:  # read as no number: int() of 5,000 digits raises
        return NO_DEADLINE
    return Deadline(arrived + int(digits) / 1000.0, clock)


def _exceeded(why: str) -> DeadlineExceededError:
    return DeadlineExceededError(
        f"the caller's deadline ({HEADER}) {why}: no plan is answered, none was published and nothing of "
        "the request is kept (a plan made before it is dropped); send it again with a longer one, or a "
        "shorter time_budget_ms",
        field=HEADER,
    )


def _ms(seconds: float) -> str:
    return f"{seconds * 1000.0:.0f} ms"
