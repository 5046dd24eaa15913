"""The client's ``timeout_s`` is one its sockets can be given (``service.client.args.http_timeout``).

A socket's (and a lock's) timeout is held in nanoseconds in 64 bits, so past 2^63 ns (about 9.2e9 s)
it overflows: a client built with ``timeout_s=1e10`` was taken, and every request then raised the
socket's ``OverflowError`` ("timestamp out of range for platform time_t"), no error of the client's,
as the infinite one review66 refused did on its deadline header (review67). The longest one taken
still sends, with a long poll's wait added to it, over a real socket.
"""

from __future__ import annotations

from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler

import pytest

from service.api.progress_schemas import RESULTS_MAX_WAIT_MS
from service.client import SchedulerAPIError, SchedulerClient
from service.client.args import MAX_TIMEOUT_S
from tests.service.client.local_server import serving


class _NotFound(BaseHTTPRequestHandler):
    """Answers every GET 404 at once, counting them."""

    seen = 0

    def do_GET(self) -> None:  # http.server calls do_<METHOD>
        type(self).seen += 1
        self.send_response(404)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *_: object) -> None:  # quiet in the test's output
        return


@pytest.fixture
def url() -> Iterator[str]:
    """A real HTTP server on a local port that answers 404."""
    with serving(_NotFound) as base:
        yield base


@pytest.mark.parametrize("given", [1e10, 1e300])
def test_a_timeout_no_socket_can_be_given_is_refused_when_the_client_is_built(given: float) -> None:
    with pytest.raises(ValueError, match=r"^timeout_s=\S+: expected a number of seconds above 0, at most "):
        SchedulerClient("http://scheduler:8000", timeout_s=given)


def test_the_longest_timeout_taken_sends_a_long_poll_over_a_socket(url: str) -> None:
    """At ``MAX_TIMEOUT_S``, with the longest long poll's wait added (``_timeout_until``), the request
    is sent and answered: the service's 404, not the socket's ``OverflowError``."""
    _NotFound.seen = 0
    with SchedulerClient(url, timeout_s=MAX_TIMEOUT_S) as client, pytest.raises(SchedulerAPIError) as refused:
        client.results("s1", wait_ms=RESULTS_MAX_WAIT_MS, outage_s=0.0)
    assert refused.value.status == 404
    assert _NotFound.seen == 1
