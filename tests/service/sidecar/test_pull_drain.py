"""The pull API's drain (``pull_drain``): at shutdown, requests in flight get the drain timeout to end
before they are given up on. No server: the requests are tasks."""

from __future__ import annotations

import asyncio

from service.sidecar.pull_drain import InFlightRequests


def test_a_request_that_ends_within_the_drain_timeout_is_waited_for_not_given_up_on() -> None:
    """A ``/done`` still landing as the server stops keeps its answer; only one still running at the
    timeout is cancelled (answered 503)."""

    async def scenario() -> tuple[bool, bool, str]:
        requests = InFlightRequests()
        quick = asyncio.create_task(asyncio.sleep(0.3, "answered"))
        slow = asyncio.create_task(asyncio.sleep(600))
        for task, what in ((quick, "POST /done"), (slow, "GET /next")):
            requests.begin(task, what)
            task.add_done_callback(requests.end)
        await requests.bound(lambda: True, drain_timeout_s=5.0)
        await asyncio.gather(slow, return_exceptions=True)
        return quick.cancelled(), slow.cancelled(), quick.result()

    quick_cancelled, slow_cancelled, answer = asyncio.run(scenario())
    assert (quick_cancelled, answer) == (False, "answered")
    assert slow_cancelled
