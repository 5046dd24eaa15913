"""The three reports a session can make of a lease it already ended (completion, failure, hand-back)
and what each answers unsent: the session tests that a lease ended once (found gone, dropped as
cancelled) sends nothing more of it run every report through one parametrization."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from service.delivery.outcomes import CompletionOutcome, ReleaseOutcome
from service.sidecar.holdings import Held
from service.sidecar.session import WorkerSession
from tests.service.finished import RESULT

Report = Callable[[WorkerSession, Held], Coroutine[Any, Any, Any]]


async def _complete(session: WorkerSession, held: Held) -> Any:
    return await session.complete(held, RESULT)


async def _fail(session: WorkerSession, held: Held) -> Any:
    return await session.fail(held, "the engine refused it")


async def _release(session: WorkerSession, held: Held) -> Any:
    return await session.release([held])


# Each report with the answer Redis would give it: the lease is no longer this worker's.
EACH_REPORT = pytest.mark.parametrize(
    ("report", "answer"),
    [(_complete, CompletionOutcome.STALE), (_fail, ReleaseOutcome.STALE), (_release, 0)],
    ids=["complete", "fail", "release"],
)
