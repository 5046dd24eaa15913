"""A replica's process ending with a mark's take-back still running, for ``test_mark_hop_exit.py``.

Run as ``python -m tests.service.api.mark_hop_exit_child URL TIMEOUT_S PAUSE_MS [ID]``: a ``POST
/schedule`` of step 7 under ``ID`` (none: an id the service draws) whose handler is cancelled (the
service's shutdown) after its hop wrote its in-flight mark (a chosen id's) and its step's planning
entry, Redis's writes paused for ``PAUSE_MS`` from then, so the give-up's take-back waits on them;
then the app stops and the process ends. Its warnings go to stderr; at its very end, after the
service's own exit hooks, it prints whether the mark or the entry was still there (``left``) or both
were taken back (``gone``), read while writes may still be paused (a read is not held).
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import sys
import tempfile
from typing import Any

import redis

from service.delivery import keys

STEP = 7


def main(url: str, timeout_s: float, pause_ms: int, schedule_id: str | None) -> None:
    """Cancel the handler with its mark written and writes paused, then return: the exit follows."""
    logging.basicConfig(level=logging.WARNING)
    reader = redis.Redis.from_url(url, socket_timeout=60)
    marks = [keys.schedule_keys(schedule_id or "-").planning, keys.step_planning(STEP)]
    # registered before the service is imported: Python runs exit hooks last registered first
    atexit.register(lambda: print("left" if reader.exists(*marks) else "gone", flush=True))
    from service.api import mark_hop
    from service.settings import Settings
    from tests.service.api.replicas import Gate, replicas, until
    from tests.service.api_helpers import batch_body

    decided = Gate()
    run = mark_hop._Hop.run

    def run_then_wait(*args: Any, **kwargs: Any) -> Any:
        result = run(*args, **kwargs)
        decided()
        return result

    mark_hop._Hop.run = run_then_wait  # type: ignore[method-assign]

    async def cancelled_with_writes_paused() -> None:
        with tempfile.TemporaryDirectory() as models:
            settings = Settings(redis_url=url, model_dir=models, redis_timeout_s=timeout_s)
            async with replicas(settings) as [http]:
                chosen: dict[str, Any] = {"schedule_id": schedule_id} if schedule_id else {}
                body = batch_body(step=STEP, **chosen)
                posted = asyncio.create_task(http.post("/schedule", json=body))
                await until(lambda: decided.reached == 1)
                reader.client_pause(pause_ms, all=False)
                posted.cancel()
                await asyncio.gather(posted, return_exceptions=True)
                decided.open()

    asyncio.run(cancelled_with_writes_paused())


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4] if len(sys.argv) > 4 else None)
