"""The push sidecar reads its engine's ``finish_reason`` by the rule the pull API reads a worker's by
(``service.sidecar.finish_reasons``): the same finish stored for every word both take, and where the
pull API refuses a word (422: the worker corrects its report), the push sidecar, which has no one to
ask, stores ``abort`` (the output delivered, no length learned from it), keeps the engine's word in
``extra.engine_finish_reason`` and says so in a warning naming the item.

It read every word but ``abort`` and ``error`` as ``stop``: OpenAI's ``content_filter`` (a gateway's
filter cut the output) or a word a newer engine adds (a ``timeout``) was learned as a length the
generation ended at by itself, and SGLang's object form as ``stop`` even when its type said
``length``. Real Redis, the real runner, an engine answering as vLLM's OpenAI server does.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx
import pytest
import redis
from pydantic import ValidationError

from service.client.actuals import says_length
from service.delivery.protocol import Delivery
from service.sidecar.engine_client import EngineClient, EngineOptions
from service.sidecar.engine_reply import EngineError, parse_reply
from service.sidecar.holdings import Holdings
from service.sidecar.pull_bodies import DoneBody
from service.sidecar.runner import RunnerSettings, Sidecar
from service.sidecar.session import SessionSettings, WorkerSession
from tests.service.sidecar.procs import item, publish, run_until

TOKENS = 7
# An engine's finish_reason -> (the finish stored, the engine's word kept in extra) by the push sidecar
STORED: list[tuple[Any, str, Any]] = [
    ("stop", "stop", None),
    ("length", "length", None),
    ("tool_calls", "stop", "tool_calls"),
    ("function_call", "stop", "function_call"),
    ("repetition", "stop", "repetition"),
    ({"type": "stop", "matched": 151645}, "stop", None),  # SGLang's object
    ({"type": "length", "length": TOKENS}, "length", None),
    (None, "stop", None),  # an answer naming none: ended by itself, as the pull API's default
    ("content_filter", "abort", "content_filter"),
    ("eos", "abort", "eos"),
    ("STOP", "abort", "STOP"),
    ("timeout", "abort", "timeout"),
    ({"type": "eos"}, "abort", {"type": "eos"}),
]
NO_CERTAIN_MEANING = [said for said, stored, _ in STORED if stored == "abort"]


def _answer(finish: Any, tokens: int = TOKENS) -> dict[str, Any]:
    """A vLLM completions answer of ``tokens`` tokens that ended with ``finish``."""
    return {
        "choices": [{"index": 0, "text": "out", "finish_reason": finish}],
        "usage": {"prompt_tokens": 100, "completion_tokens": tokens},
    }


def _vllm(request: httpx.Request) -> httpx.Response:
    """vLLM's server, each prompt ``prompt <i>`` answered with ``STORED[i]``'s finish reason."""
    if request.url.path == "/v1/models":
        return httpx.Response(200, json={"data": [{"id": "m", "max_model_len": 32768}]})
    if request.url.path == "/health":
        return httpx.Response(200)
    index = int(json.loads(request.content)["prompt"].removeprefix("prompt "))
    return httpx.Response(200, json=_answer(STORED[index][0]))


def test_each_engine_finish_reason_is_stored_as_the_rule_says_and_one_of_no_certain_meaning_as_abort(
    redis_client: redis.Redis, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    delivery = Delivery.from_url(redis_url)
    publish(delivery, "finishes", {"w0": [item(str(i), 0, TOKENS) for i in range(len(STORED))]})
    session = WorkerSession(Delivery.from_url(redis_url), Holdings(4), SessionSettings("w0"))
    http = httpx.AsyncClient(transport=httpx.MockTransport(_vllm), base_url="http://engine")
    sidecar = Sidecar(
        session, EngineClient(EngineOptions("http://engine"), http), RunnerSettings(idle_poll_s=0.02)
    )
    with caplog.at_level(logging.WARNING, logger="service.sidecar"):
        stats = run_until(sidecar, lambda: delivery.progress("finishes").finished)
    assert (stats.accepted, stats.failed, stats.released) == (len(STORED), 0, 0)
    records = {int(r.key.split("#")[0]): r.result for r in delivery.read_results("finishes")}
    assert [(r.finish_reason, r.extra.get("engine_finish_reason")) for _, r in sorted(records.items())] == [
        (stored, word) for _, stored, word in STORED
    ]
    learned = [says_length(r.finish_reason, r.output_tokens) for _, r in sorted(records.items())]
    assert learned == [stored != "abort" for _, stored, _ in STORED]  # no actual made of an abort
    warned = [r.getMessage() for r in caplog.records if "has no certain meaning" in r.getMessage()]
    assert sorted(line.split(":")[0] for line in warned) == sorted(
        f"{i}#0" for i, (_, stored, _) in enumerate(STORED) if stored == "abort"
    )
    assert (
        "the engine's finish_reason \"content_filter\" has no certain meaning: stored as 'abort'"
        in "".join(warned)
    )


@pytest.mark.parametrize("said", [said for said, _, _ in STORED if said is not None], ids=repr)
def test_the_pull_api_stores_what_the_push_sidecar_stores_or_refuses_what_it_stores_as_abort(
    said: Any,
) -> None:
    """One rule: a worker's ``/done`` passing its engine's word through is read as the push sidecar
    reads the engine's answer; only where the pull worker can be asked (422) do the two part."""
    pushed = parse_reply(_answer(said), 0.1, 512).finish_reason
    body = {"schedule_id": "s", "key": "p#0", "token": 1, "output_tokens": TOKENS, "finish_reason": said}
    try:
        pulled: str | None = DoneBody.model_validate(body).finish_reason
    except ValidationError:
        pulled = None
    assert (pushed, pulled) == (("abort", None) if said in NO_CERTAIN_MEANING else (pushed, pushed))


@pytest.mark.parametrize("said", ["abort", {"type": "abort", "message": "Abort before prefill"}], ids=repr)
def test_an_engines_abort_in_either_form_gives_the_item_back_without_an_attempt(said: Any) -> None:
    with pytest.raises(EngineError) as raised:
        parse_reply(_answer(said, 0), 0.1, 512)
    assert (raised.value.engine_down, raised.value.retryable) == (True, False)


def test_an_engines_error_is_a_failure_retried_in_place_then_charged_to_the_item() -> None:
    with pytest.raises(EngineError) as raised:
        parse_reply(_answer("error"), 0.1, 512)
    assert (raised.value.engine_down, raised.value.retryable) == (False, True)


def test_a_finish_of_no_certain_meaning_at_zero_tokens_is_stored_at_zero_as_it_says_no_length() -> None:
    """An empty generation that says a length is its EOS, 1 token; one that says none keeps its 0."""
    assert parse_reply(_answer("content_filter", 0), 0.1, 512).completion_tokens == 0
    assert parse_reply(_answer("stop", 0), 0.1, 512).completion_tokens == 1
