"""The simulated engine speaks the OpenAI API the sidecar and real engines share."""

from __future__ import annotations

import asyncio
import re
import socket
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer
from typer.testing import CliRunner

from scheduler.errors import InvalidInputError
from service.engine_sim.app import build_config, create_app


async def _call(method: str, path: str, body: dict[str, Any] | None = None) -> httpx.Response:
    app = create_app(build_config("H100", time_scale=0.001, max_model_len=4096))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://sim") as client:
        return await client.request(method, path, json=body)


def _post(path: str, body: dict[str, Any]) -> httpx.Response:
    return asyncio.run(_call("POST", path, body))


def test_a_completion_returns_the_requested_length_and_usage() -> None:
    body = {"model": "sim-7b", "prompt": "hi", "max_tokens": 500, "rollout": {"output_tokens": 120}}
    answer = _post("/v1/completions", body).json()
    assert answer["object"] == "text_completion"
    assert answer["choices"][0]["finish_reason"] == "stop"
    assert answer["choices"][0]["text"].count("sim") == 120
    assert answer["usage"]["completion_tokens"] == 120
    assert answer["rollout"]["simulated"] is True


def test_a_chat_completion_hits_its_cap_with_finish_reason_length() -> None:
    body = {
        "messages": [{"role": "user", "content": "solve"}],
        "max_completion_tokens": 64,
        "rollout": {"output_tokens": 1000, "prompt_tokens": 30},
    }
    answer = _post("/v1/chat/completions", body).json()
    assert answer["choices"][0]["finish_reason"] == "length"
    assert answer["usage"] == {"prompt_tokens": 30, "completion_tokens": 64, "total_tokens": 94}
    assert answer["choices"][0]["message"]["role"] == "assistant"


def test_the_token_ids_asked_for_come_back_one_per_generated_token_as_vllm_returns_them() -> None:
    body = {"prompt": "hi", "max_tokens": 50, "return_token_ids": True, "rollout": {"output_tokens": 7}}
    choice = _post("/v1/completions", body).json()["choices"][0]
    assert choice["token_ids"] == [0] * 7
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "return_token_ids": True}
    assert (
        len(
            _post("/v1/chat/completions", {**chat, "rollout": {"output_tokens": 9}}).json()["choices"][0][
                "token_ids"
            ]
        )
        == 5
    )
    assert "token_ids" not in _post("/v1/completions", {"prompt": "hi", "max_tokens": 5}).json()["choices"][0]


def test_the_logprobs_asked_for_come_back_one_per_generated_token_in_vllm_s_shapes() -> None:
    """A trainer keeping the rollout's log-probabilities (importance ratios) reads them from the
    stand-in where vLLM puts them: a completion's ``tokens``/``token_logprobs``/``top_logprobs``/
    ``text_offset``, a chat's ``content`` entries; none where the request asked for none."""
    body = {"prompt": "hi", "max_tokens": 50, "logprobs": 1, "rollout": {"output_tokens": 7}}
    choice = _post("/v1/completions", body).json()["choices"][0]
    logprobs = choice["logprobs"]
    assert logprobs["token_logprobs"] == [0.0] * 7
    assert "".join(logprobs["tokens"]) == choice["text"]
    tokens = logprobs["tokens"]
    assert logprobs["text_offset"] == [len("".join(tokens[:i])) for i in range(7)]
    assert [list(top) for top in logprobs["top_logprobs"]] == [[" sim"]] * 7
    chat = {
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 9,
        "logprobs": True,
        "top_logprobs": 2,
    }
    content = _post("/v1/chat/completions", {**chat, "rollout": {"output_tokens": 4}}).json()["choices"][0]
    entries = content["logprobs"]["content"]
    assert [(e["token"], e["logprob"], bytes(e["bytes"]).decode()) for e in entries] == [
        (" sim", 0.0, " sim")
    ] * 4
    assert all(e["top_logprobs"] == [{"token": " sim", "logprob": 0.0, "bytes": e["bytes"]}] for e in entries)
    assert (
        _post("/v1/completions", {"prompt": "hi", "max_tokens": 5}).json()["choices"][0]["logprobs"] is None
    )
    plain = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
    assert "logprobs" not in _post("/v1/chat/completions", plain).json()["choices"][0]


def test_a_chat_asking_for_logprobs_without_top_logprobs_gets_no_alternatives() -> None:
    """As vLLM: ``top_logprobs`` unset (0) lists each sampled token's log-probability and no others."""
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 9, "logprobs": True}
    content = _post("/v1/chat/completions", {**chat, "rollout": {"output_tokens": 3}}).json()["choices"][0]
    assert [e["top_logprobs"] for e in content["logprobs"]["content"]] == [[]] * 3


def test_models_and_health_describe_a_simulated_engine() -> None:
    models = asyncio.run(_call("GET", "/v1/models")).json()
    assert models["data"][0]["id"] == "sim-7b"
    assert asyncio.run(_call("GET", "/health")).json()["engine"] == "simulated"


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        ({"model": "other", "prompt": "x", "max_tokens": 5}, 404, "does not exist"),
        ({"prompt": "x", "max_tokens": 5000}, 400, "maximum context length is 4096"),
        ({"prompt": "x", "max_tokens": 5, "min_tokens": 6}, 400, "min_tokens must be less than or equal"),
        ({"prompt": "x", "max_tokens": 5, "n": 2}, 400, "n=1"),
        ({"prompt": "x", "max_tokens": 0}, 400, "max_tokens"),
        ({"max_tokens": 5}, 400, "prompt"),
    ],
)
def test_bad_requests_get_openai_shaped_errors_naming_the_problem(
    body: dict[str, Any], status: int, needle: str
) -> None:
    response = _post("/v1/completions", body)
    assert response.status_code == status
    assert needle in response.json()["error"]["message"]


@pytest.mark.parametrize(
    ("prompt_tokens", "max_tokens", "message"),
    [
        (  # vLLM's wording of a cap past the context, which names the input count to retry with
            4000,
            100,
            "'max_tokens' or 'max_completion_tokens' is too large: 100. This model's maximum context "
            "length is 4096 tokens and your request has 4000 input tokens (100 > 4096 - 4000).",
        ),
        (  # and of a prompt that alone leaves no room (vLLM accepts at most max_model_len - 1)
            4096,
            1,
            "This model's maximum context length is 4096 tokens. However, your request has 4096 input "
            "tokens. Please reduce the length of the input messages.",
        ),
    ],
)
def test_a_request_past_the_context_is_refused_in_vllms_words(
    prompt_tokens: int, max_tokens: int, message: str
) -> None:
    body = {"prompt": "x", "max_tokens": max_tokens, "rollout": {"prompt_tokens": prompt_tokens}}
    response = _post("/v1/completions", body)
    assert response.status_code == 400
    assert response.json()["error"]["message"] == message


@pytest.mark.parametrize(
    ("sampling", "tokens", "finish"),
    [
        ({}, 120, "stop"),  # the model's own end
        ({"ignore_eos": True}, 500, "length"),  # as vLLM: the end ignored, generated to the cap
        ({"min_tokens": 300}, 300, "stop"),  # as vLLM: no end before min_tokens
        ({"min_tokens": 500}, 500, "length"),
    ],
)
def test_ignore_eos_and_min_tokens_shape_the_length_as_in_vllm(
    sampling: dict[str, Any], tokens: int, finish: str
) -> None:
    body = {"prompt": "hi", "max_tokens": 500, "rollout": {"output_tokens": 120}, **sampling}
    answer = _post("/v1/completions", body).json()
    assert (answer["usage"]["completion_tokens"], answer["choices"][0]["finish_reason"]) == (tokens, finish)


def test_bad_engine_settings_are_rejected_by_name() -> None:
    with pytest.raises(InvalidInputError, match="time_scale"):
        build_config("H100", time_scale=0.0)
    with pytest.raises(InvalidInputError, match="device"):
        build_config("X900")


def test_engine_sim_on_a_port_in_use_refuses_in_one_line_instead_of_announcing_itself(
    cli: typer.Typer,
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(cli, ["engine-sim", "--device", "H100", "--port", str(port)])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [f"engine-sim: 127.0.0.1:{port} is already in use"]


def test_engine_sim_refuses_a_trace_step_without_a_trace_rather_than_ignore_it(cli: typer.Typer) -> None:
    with socket.socket() as taken:  # were the flag ignored, this port would stop it, not a server
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        args = ["engine-sim", "--device", "H100", "--port", port, "--trace-step", "2"]
        result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2
    assert "--trace-step needs --trace" in result.stderr


def test_a_sample_told_to_hang_goes_unanswered_its_first_tries_then_answers() -> None:
    async def tries(body: dict[str, Any], count: int) -> list[int | None]:
        """Each try's status, None where no answer came within 0.5 s (the client gave up on it); then
        how many requests the engine still holds unanswered."""
        app = create_app(build_config("H100", time_scale=0.001, max_model_len=4096))
        statuses: list[int | None] = []
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sim") as client:
            for _ in range(count):
                try:
                    reply = await asyncio.wait_for(client.post("/v1/completions", json=body), 0.5)
                    statuses.append(reply.status_code)
                except TimeoutError:
                    statuses.append(None)
            statuses.append((await client.get("/sim/stats")).json()["hanging"])
        return statuses

    rollout = {"prompt_id": "p", "sample_idx": 1, "output_tokens": 7, "hang_tries": 2}
    # two tries go unanswered until given up on (then no longer held), the third answers
    assert asyncio.run(tries({"prompt": "hi", "max_tokens": 16, "rollout": rollout}, 3)) == [
        None,
        None,
        200,
        0,
    ]


def test_a_prompt_of_token_ids_is_counted_by_its_ids_as_vllm_counts_it_not_by_the_hint() -> None:
    ids = [151644, 872, 198, 3838, 374, 220, 17, 10, 17, 30]
    body = {"prompt": ids, "max_tokens": 50, "rollout": {"output_tokens": 5, "prompt_tokens": 999}}
    assert _post("/v1/completions", body).json()["usage"]["prompt_tokens"] == len(ids)
    too_long = {"prompt": [1] * 4096, "max_tokens": 1, "rollout": {"prompt_tokens": 10}}
    refused = _post("/v1/completions", too_long)  # the context judged on the ids, as on a real engine
    assert refused.status_code == 400
    assert "your request has 4096 input tokens" in refused.json()["error"]["message"]


def test_sim_stats_answers_the_counters_docs_engine_sim_md_lists() -> None:
    """A test or dashboard reading ``/sim/stats`` finds each counter under the name the page gives
    (until 2026-12-04 it gave prose names, "KV tokens", "peak batch", and left out two)."""
    page = (Path(__file__).resolve().parents[3] / "docs" / "engine-sim.md").read_text()
    row = next(line for line in page.splitlines() if line.startswith("| `GET /sim/stats`"))
    listed = set(re.findall(r"`([a-z_]+)`", row.split("|")[2]))
    assert set(asyncio.run(_call("GET", "/sim/stats")).json()) == listed


@pytest.mark.parametrize(
    ("body", "message", "param"),
    [
        (
            {"prompt": "x", "max_tokens": 0},
            "max_tokens=0: Input should be greater than or equal to 1",
            "max_tokens",
        ),
        (
            {"prompt": "x", "max_tokens": "many"},
            "max_tokens='many': Input should be a valid integer",
            "max_tokens",
        ),
        ({"max_tokens": 5}, "prompt: Field required", "prompt"),
    ],
)
def test_a_malformed_request_is_refused_in_vllms_shape_led_by_the_field_and_its_value(
    body: dict[str, Any], message: str, param: str
) -> None:
    """The stand-in answers as vLLM (the sidecar reads that shape), in the service's words: the field
    and the value sent lead the message, once, and ``param`` names the field (it was null) (user66)."""
    response = _post("/v1/completions", body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["message"].split(", unable")[0], error["param"], error["type"]) == (
        message,
        param,
        "BadRequestError",
    )


def test_every_integer_of_a_request_takes_its_float_as_vllm_does_and_refuses_a_fraction_naming_it() -> None:
    """vLLM's request models are pydantic's lax ones, so ``16.0`` is 16 in any integer field and
    ``16.5`` a 400 naming the field: the stand-in reads them the same (the service's bodies now do
    too, user67), so a client tried against it meets what the engine answers."""
    rollout = {"sample_idx": 1.0, "output_tokens": 12.0, "prompt_tokens": 3.0, "hang_tries": 0.0}
    body = {"prompt": [1.0, 2.0, 3.0], "max_tokens": 50.0, "n": 1.0, "min_tokens": 2.0, "logprobs": 0.0}
    answer = _post("/v1/completions", {**body, "rollout": rollout}).json()
    assert (answer["usage"]["prompt_tokens"], answer["usage"]["completion_tokens"]) == (3, 12)
    chat = {
        "messages": [{"role": "user", "content": "hi"}],
        "max_completion_tokens": 9.0,
        "top_logprobs": 1.0,
    }
    assert _post("/v1/chat/completions", {**chat, "logprobs": True}).json()["usage"]["completion_tokens"] <= 9
    error = _post("/v1/completions", {"prompt": "x", "max_tokens": 16.5}).json()["error"]
    assert (error["param"], error["message"].split(", unable")[0]) == (
        "max_tokens",
        "max_tokens=16.5: Input should be a valid integer, got a number with a fractional part",
    )
