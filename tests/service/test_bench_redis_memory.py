"""``rollout-scheduler bench redis-memory``: a URL it cannot connect by is one line; so are credentials
Redis refuses (exit 2, as the README says of every command); its help reads clean."""

from __future__ import annotations

import pytest
import redis
import typer
from typer.testing import CliRunner

from service.commands.bench_redis_memory import PREFIX, SAMPLES, _answer, _measure, _schedule
from service.delivery import Delivery
from service.engines import SERVICE_ENGINE
from service.pipeline.republish import decode_answer


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("foo://x", "expected redis://"),
        ("redis://127.0.0.1:notaport/0", "port"),
        ("http://h:6379", "redis://"),
    ],
)
def test_bench_redis_memory_refuses_a_url_redis_cannot_use_in_one_line(
    cli: typer.Typer, url: str, needle: str
) -> None:
    result = CliRunner().invoke(cli, ["bench", "redis-memory", "--redis-url", url])
    assert result.exit_code == 2
    assert needle in result.stderr
    assert result.stderr.startswith("bench redis-memory: redis_url=")
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.output


def test_credentials_redis_refuses_are_one_line_and_exit_2_not_an_unreachable_server(
    cli: typer.Typer, redis_url: str
) -> None:
    # the README: credentials Redis refuses are bad input (exit 2); only a server that cannot be
    # reached is exit 1, since then nothing in the command line is wrong
    wrong = redis_url.replace("redis://", "redis://nobody:wrong-secret@", 1)
    result = CliRunner().invoke(cli, ["bench", "redis-memory", "--redis-url", wrong])
    assert result.exit_code == 2
    assert result.stderr.startswith("bench redis-memory: Redis at redis://nobody:***@")
    assert "refused our credentials" in result.stderr
    assert "wrong-secret" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_server_that_cannot_be_reached_is_exit_1(cli: typer.Typer) -> None:
    result = CliRunner().invoke(cli, ["bench", "redis-memory", "--redis-url", "redis://127.0.0.1:9/0"])
    assert result.exit_code == 1
    assert result.stderr.startswith("bench redis-memory: ")
    assert len(result.stderr.strip().splitlines()) == 1


def test_bench_redis_memory_reads_its_url_from_redis_url_like_bench_delivery(cli: typer.Typer) -> None:
    result = CliRunner().invoke(cli, ["bench", "redis-memory"], env={"REDIS_URL": "foo://x"})
    assert result.exit_code == 2
    assert "foo://x" in result.stderr


def test_bench_redis_memory_help_starts_with_what_it_measures(cli: typer.Typer) -> None:
    result = CliRunner().invoke(cli, ["bench", "redis-memory", "--help"])
    assert result.exit_code == 0
    assert "Redis memory one schedule takes" in result.output
    assert "``" not in result.output


def test_each_benchmarked_prompt_carries_text_of_its_own_as_real_prompts_do() -> None:
    # one text shared by every prompt is stored once, so the table counted a single prompt's text
    schedule = _schedule(64, 4, prompt_chars=100, seed=0)
    texts = {item.payload["prompt"] for queue in schedule.queues.values() for item in queue}
    assert len(texts) == 64 // SAMPLES
    assert {len(t) for t in texts} == {100}


def test_the_benchmarked_answer_names_every_trajectory_in_its_queue_as_the_service_stores_it() -> None:
    # the stored answer is part of what a published schedule costs: one naming nothing would not count
    schedule = _schedule(64, 4, prompt_chars=10, seed=0)
    stored, json_bytes = _answer(schedule)
    answer = decode_answer(stored)
    assert answer is not None
    assert {w: [(i["prompt_id"], i["sample_idx"]) for i in q] for w, q in answer.assignments.items()} == {
        w: [(i.prompt_id, i.sample_idx) for i in q] for w, q in schedule.queues.items()
    }
    assert len(stored) < json_bytes  # compressed, even on base64


def test_the_benchmarked_schedule_carries_what_the_service_publishes_with_every_plan() -> None:
    # queues dealt round-robin without planned runs, paces or caps left P:due, P:pace and P:cap out:
    # the table read ~20% fewer bytes per trajectory than a schedule POST /schedule publishes
    schedule = _schedule(64, 4, prompt_chars=10, seed=0)
    items = [item for queue in schedule.queues.values() for item in queue]
    assert len(items) == 64
    assert all(item.deadline_ms is not None and item.planned_start_ms is not None for item in items)
    assert set(schedule.seconds_per_token) == set(schedule.queues)
    assert set(schedule.kv_capacity_tokens) == set(schedule.queues)
    assert schedule.predicted_makespan_s is not None


def test_the_published_bytes_count_the_index_keys_the_publish_makes_outside_its_slot(
    redis_client: redis.Redis,
) -> None:
    # every worker's inbox and the active index exist because of this schedule: summing P:* alone
    # left them out; and the prefix is emptied after each size, so no inbox is counted twice
    result = _measure(Delivery(redis_client, prefix=PREFIX), 64, 4, 10, 10, seed=0)
    assert result.index_bytes > 0
    assert result.published_bytes > result.index_bytes
    assert redis_client.keys(f"{PREFIX}:*") == []


def test_the_schedule_measured_is_built_for_the_engine_the_service_plans_for_by_default() -> None:
    """As the service builds what it publishes: a request naming no engine is planned for
    ``SERVICE_ENGINE`` (``ROLLOUT_DEFAULT_ENGINE`` unset), whose rules play the steal deadlines."""
    assert _schedule(64, 2, 400, seed=1).engine == SERVICE_ENGINE
