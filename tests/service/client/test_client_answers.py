"""What the trainer's client makes of answers that are not the scheduler's: a redirect (an ingress
sending plain HTTP to HTTPS, a moved service) or a page from whatever else holds the URL. Each is a
``SchedulerAPIError`` the training loop's one ``except`` catches, saying what answered, and none is
retried as an outage: only the URL can cure it. A real HTTP server plays what holds the URL."""

from __future__ import annotations

from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler

import pytest

from service.client import SchedulerAPIError, SchedulerClient
from service.settings import Settings
from tests.service.api_helpers import LiveServer, batch_body
from tests.service.client.local_server import serving


class _Answers(BaseHTTPRequestHandler):
    """Answers every request with the class's ``status``, ``headers`` and ``body``."""

    status = 200
    headers_out: dict[str, str] = {}
    body = b""
    seen = 0

    def _answer(self) -> None:
        type(self).seen += 1
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(self.status)
        for name, value in {**self.headers_out, "content-length": str(len(self.body))}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(self.body)

    def do_GET(self) -> None:  # http.server calls do_<METHOD>
        self._answer()

    def do_POST(self) -> None:
        self._answer()

    def do_DELETE(self) -> None:
        self._answer()

    def log_message(self, *_: object) -> None:  # quiet in the test's output
        return


def _holding(status: int, body: bytes, headers: dict[str, str]) -> Iterator[str]:
    handler = type("Handler", (_Answers,), {"status": status, "body": body, "headers_out": headers})
    with serving(handler) as base:
        yield base


@pytest.fixture
def redirecting(live_settings: Settings) -> Iterator[tuple[str, str]]:
    """(an ingress that answers 308 to the scheduler's URL, the scheduler's URL)."""
    with LiveServer(live_settings) as scheduler:
        yield from ((url, scheduler.url) for url in _holding(308, b"", {"location": scheduler.url + "/"}))


def test_a_redirect_is_a_refusal_naming_where_it_points(redirecting: tuple[str, str]) -> None:
    ingress, scheduler = redirecting
    with SchedulerClient(ingress) as client, pytest.raises(SchedulerAPIError) as redirected:
        client.progress("step-0")
    assert (redirected.value.status, redirected.value.retryable) == (308, False)
    assert scheduler in str(redirected.value)  # the URL to give the client instead


def test_a_schedule_answered_by_a_redirect_is_no_plan(redirecting: tuple[str, str]) -> None:
    ingress, _ = redirecting
    with SchedulerClient(ingress) as client, pytest.raises(SchedulerAPIError) as redirected:
        client.schedule(batch_body(schedule_id="run-1-step-0"))
    assert redirected.value.status == 308


@pytest.mark.parametrize(
    "body", [b"<html>Grafana</html>", b'{"status": "ok"}', b"[]"], ids=["html", "other-json", "list"]
)
def test_a_page_that_is_not_the_scheduler_s_answer_is_a_refusal_not_a_decoding_error(body: bytes) -> None:
    for url in _holding(200, body, {"content-type": "application/json"}):
        with SchedulerClient(url) as client:
            for read in (lambda: client.progress("step-0", outage_s=1.0), client.models, client.retrain):
                with pytest.raises(SchedulerAPIError) as foreign:
                    read()
                assert (foreign.value.status, foreign.value.retryable) == (200, False)
                assert "not the scheduler" in str(foreign.value)


@pytest.mark.parametrize("status", [400, 503])
def test_a_refusal_whose_body_nests_past_the_decoder_s_depth_is_a_scheduler_error(status: int) -> None:
    """Found by ``test_client_fuzz``: a 4xx or 5xx whose body is JSON nested deeper than Python's
    decoder recurses (a proxy's or a broken server's) raised a bare ``RecursionError`` out of every
    call, which no training loop's ``except SchedulerAPIError`` catches; a 503 was not retried."""
    for url in _holding(status, b"[" * 100_000 + b"]" * 100_000, {"content-type": "application/json"}):
        with SchedulerClient(url) as client, pytest.raises(SchedulerAPIError) as refused:
            client.models(outage_s=0)
        assert refused.value.status == status
        assert refused.value.retryable is (status == 503)
