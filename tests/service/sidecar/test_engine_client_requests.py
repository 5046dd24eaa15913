"""What the sidecar's engine client sends an engine for an item, and what it makes of the reply."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from service.delivery.records import DeliveryItem
from service.engine_sim.app import build_config, create_app
from service.sidecar.engine_client import EngineClient, EngineOptions
from tests.service.sidecar.engines import chat_answer, generate, make_item, on_vllm, vllm_models


def test_a_prompt_goes_to_completions_and_the_reply_carries_the_actual_length() -> None:
    reply = generate(make_item({"prompt": "2+2?", "rollout": {"output_tokens": 77}}))
    assert (reply.completion_tokens, reply.finish_reason) == (77, "stop")
    assert reply.output.count("sim") == 77


def test_messages_go_to_chat_completions_and_the_cap_is_max_new_tokens() -> None:
    item = make_item({"messages": [{"role": "user", "content": "hi"}], "rollout": {"output_tokens": 900}})
    reply = generate(item)
    assert (reply.completion_tokens, reply.finish_reason) == (512, "length")


def test_the_request_merges_sampling_params_and_names_the_trajectory_to_engine_sim_only() -> None:
    client = EngineClient(EngineOptions("http://x"), httpx.AsyncClient())
    path, body = client.request_for(make_item({"prompt": "q", "params": {"temperature": 0.7}}), "m")
    assert path == "/v1/completions"
    assert (body["model"], body["max_tokens"], body["temperature"]) == ("m", 512, 0.7)
    assert "rollout" not in body  # vLLM warns on every request with a field it does not know

    async def to_engine_sim() -> dict[str, Any]:
        app = create_app(build_config("H100", time_scale=0.001))
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://engine")
        sim = EngineClient(EngineOptions("http://engine"), http)
        await sim.ready()  # its /v1/models card says it is engine-sim
        await sim.aclose()
        return sim.request_for(make_item({"prompt": "q"}), "m")[1]

    assert asyncio.run(to_engine_sim())["rollout"] == {"prompt_id": "p", "sample_idx": 1, "prompt_tokens": 40}


def test_a_seed_is_the_prompts_base_and_each_sample_is_drawn_with_its_own() -> None:
    client = EngineClient(EngineOptions("http://x"), httpx.AsyncClient())
    payload = {"prompt": "q", "params": {"seed": 100, "temperature": 1.0}}
    seeds = [
        client.request_for(DeliveryItem(f"p#{k}", "p", k, 40, 512, 300.0, payload), "m")[1]["seed"]
        for k in range(4)
    ]
    assert seeds == [100, 101, 102, 103]
    assert payload["params"] == {"seed": 100, "temperature": 1.0}  # the shared payload is left as it was


def test_params_from_a_publisher_other_than_the_service_cannot_change_the_sidecars_own_fields() -> None:
    # the service refuses these in sampling.extra; anything publishing through the delivery API
    # directly could still send them, and one lease must stay one capped sample
    client = EngineClient(EngineOptions("http://x"), httpx.AsyncClient())
    params = {"n": 16, "stream": True, "max_tokens": 5, "model": "other", "temperature": 0.7}
    params["max_completion_tokens"] = 100_000  # vLLM would prefer it to max_tokens
    params["best_of"] = 4  # several drawn for one
    params["stream_options"] = {"include_usage": True}  # without stream: a 400 on vLLM
    _, body = client.request_for(make_item({"prompt": "q", "params": params}), "m")
    assert (body["n"], body["stream"], body["max_tokens"], body["model"]) == (1, False, 512, "m")
    assert not {"max_completion_tokens", "best_of", "stream_options"} & body.keys()
    assert body["temperature"] == 0.7


def test_reasoning_and_tool_calls_come_back_beside_the_content() -> None:
    def vllm(request: httpx.Request) -> httpx.Response:
        calls = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
        message = {"content": None, "reasoning": "think", "tool_calls": calls}
        return vllm_models(request) or chat_answer(message, "tool_calls", 300)

    reply = on_vllm(vllm)
    assert (reply.output, reply.completion_tokens, reply.finish_reason) == ("", 300, "stop")
    assert reply.extra["reasoning"] == "think"
    assert reply.extra["tool_calls"][0]["function"]["name"] == "f"
    assert reply.extra["engine_finish_reason"] == "tool_calls"


def test_the_token_ids_and_logprobs_the_params_asked_for_come_back_in_extra() -> None:
    # vLLM (>= 0.10.2) and SGLang answer ``return_token_ids`` with the choice's ``token_ids``; an RL
    # trainer needs the sampled tokens, which re-tokenizing the text does not give back
    logprobs = {"tokens": ["a", "b"], "token_logprobs": [-0.1, -0.2]}

    def vllm(request: httpx.Request) -> httpx.Response:
        choice = {
            "index": 0,
            "text": "ab",
            "finish_reason": "stop",
            "token_ids": [64, 65],
            "logprobs": logprobs,
        }
        usage = {"prompt_tokens": 40, "completion_tokens": 2}
        return vllm_models(request) or httpx.Response(200, json={"choices": [choice], "usage": usage})

    params = {"return_token_ids": True, "logprobs": 1}
    reply = on_vllm(vllm, make_item({"prompt": "q", "params": params}))
    assert (reply.extra["token_ids"], reply.extra["logprobs"]) == ([64, 65], logprobs)
    assert "engine_prompt_tokens" not in reply.extra  # the engine counted the item's 40


def test_the_prompt_ids_the_engine_answered_for_a_chat_come_back_in_extra() -> None:
    # vLLM (>= 0.10.2) answers return_token_ids on a chat with the templated prompt's ids at the top of
    # its answer: the ids the trainer's loss needs, which it cannot rebuild from the messages for sure
    def vllm(request: httpx.Request) -> httpx.Response:
        answer = chat_answer({"content": "ok"}, "stop", 3).json()
        return vllm_models(request) or httpx.Response(200, json={**answer, "prompt_token_ids": [1, 2, 3]})

    messages = [{"role": "user", "content": "q"}]
    reply = on_vllm(vllm, make_item({"messages": messages, "params": {"return_token_ids": True}}))
    assert reply.extra["prompt_token_ids"] == [1, 2, 3]


def test_the_prompt_ids_of_a_text_prompt_are_kept_and_of_an_ids_prompt_not_stored_twice() -> None:
    # a completion's choice carries them; a prompt sent as ids is answered with the same ids
    def vllm(request: httpx.Request) -> httpx.Response:
        choice = {"index": 0, "text": "ab", "finish_reason": "stop", "prompt_token_ids": [7, 8]}
        usage = {"prompt_tokens": 40, "completion_tokens": 2}
        return vllm_models(request) or httpx.Response(200, json={"choices": [choice], "usage": usage})

    asked = {"return_token_ids": True}
    text = on_vllm(vllm, make_item({"prompt": "q", "params": asked}))
    ids = on_vllm(vllm, make_item({"prompt": [7, 8], "params": asked}))
    assert text.extra["prompt_token_ids"] == [7, 8]
    assert "prompt_token_ids" not in ids.extra  # the trainer sent them


def test_the_engines_prompt_count_is_kept_where_it_differs_from_the_items() -> None:
    # the item says 40 tokens; the engine counted 57 with the chat template the trainer left out
    def vllm(request: httpx.Request) -> httpx.Response:
        answer = chat_answer({"content": "ok"}, "stop", 3)
        body = {**answer.json(), "usage": {"prompt_tokens": 57, "completion_tokens": 3}}
        return vllm_models(request) or httpx.Response(200, json=body)

    reply = on_vllm(vllm)
    assert reply.extra["engine_prompt_tokens"] == 57
    assert not {"token_ids", "logprobs"} & reply.extra.keys()  # not asked for


def test_on_engine_sim_the_token_ids_asked_for_reach_the_result_as_on_a_real_engine() -> None:
    params = {"return_token_ids": True}
    reply = generate(make_item({"prompt": "q", "params": params, "rollout": {"output_tokens": 3}}))
    assert reply.extra["token_ids"] == [0, 0, 0]
