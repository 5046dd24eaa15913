"""The caller's deadline for ``POST /schedule``, sent as ``X-Envoy-Expected-Rq-Timeout-Ms``.

A trainer's HTTP client gives up after its timeout, but the service planned on and published a plan
nobody read, its work then held by the fleet. The header says how long the caller waits, counted from
the request's arrival: the plan's time budget is capped to leave ``PUBLISH_RESERVE_S`` before it, and a
request that cannot publish before it (the deadline passed in line, or before the publish) is refused
504 ``deadline-exceeded`` with nothing written (its in-flight mark taken back as any refusal's).

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
from dataclasses import dataclass

from scheduler.errors import InvalidInputError
from service.problems.table import DeadlineExceededError

HEADER = "X-Envoy-Expected-Rq-Timeout-Ms"
# Left after the plan's budget for the baseline, the answer and the publish: publish_ms 15-54 ms at
# 1,024 x 16 to 4,096 x 32 on the bench host (docs/benchmarks.md), ~90 ms on a loaded one, a few ms more.
PUBLISH_RESERVE_S = 0.25
_MILLISECONDS = re.compile(r"[0-9]+")
# past 10 digits (~115 days) the caller waits longer than any plan takes: no deadline (a client's
# ``timeout_s=1e9``, a proxy's year-long route timeout), where it was refused 422 on every request
_LONGEST_DIGITS = 10


@dataclass(frozen=True)
class Deadline:
    """When the caller stops waiting (``time.perf_counter()``); ``at`` None: it sent no deadline."""

    at: float | None = None

    def left_s(self) -> float:
        """Seconds until the deadline (negative once past; infinite without one)."""
        return math.inf if self.at is None else self.at - time.perf_counter()

    def check(self, before: str) -> None:
        """Refuse (504) a request whose deadline passed ``before`` what it was to do next."""
        if self.left_s() <= 0:
            raise _exceeded(f"passed before {before}")

    def budget_s(self, budget_s: float) -> float:
        """The plan's time budget: the request's, capped so that ``PUBLISH_RESERVE_S`` is left before
        the deadline; refused (504) where not even that is left."""
        room_s = self.left_s() - PUBLISH_RESERVE_S
        if room_s <= 0:
            raise _exceeded(f"leaves less than the {PUBLISH_RESERVE_S:g} s a publish needs after the plan")
        return min(budget_s, room_s)

    def capped_s(self, budget_s: float) -> float:
        """The most ``budget_s`` the plan can be given from now on (``budget_s`` caps it later, when
        less is left): what the in-flight mark must outlive (``in_flight.mark``). Never negative: a
        request with no room left is refused before it plans."""
        return min(budget_s, max(0.0, self.left_s() - PUBLISH_RESERVE_S))

    def exceeded(self, why: str) -> DeadlineExceededError:
        """The 504 of a request whose deadline passed ``why`` (``PlanSlots.hold``: in line)."""
        return _exceeded(why)


NO_DEADLINE = Deadline()


def of(value: str | None, arrived: float) -> Deadline:
    """The deadline the header's ``value`` (milliseconds from ``arrived``) sets, none past 10 digits; a
    value that is not a whole number of milliseconds is refused 422 naming the header, before anything
    is written."""
    if value is None:
        return NO_DEADLINE
    digits = value.strip()
    if not _MILLISECONDS.fullmatch(digits):
        raise InvalidInputError(HEADER, value, "expected a whole number of milliseconds")
    if len(digits.lstrip("0")) > _LONGEST_DIGITS:  # read as no number: int() of 5,000 digits raises
        return NO_DEADLINE
    return Deadline(arrived + int(digits) / 1000.0)


def _exceeded(why: str) -> DeadlineExceededError:
    return DeadlineExceededError(
        f"the caller's deadline ({HEADER}) {why}: nothing was planned or published; send it again with a "
        "longer one, or a shorter time_budget_ms",
        field=HEADER,
    )
