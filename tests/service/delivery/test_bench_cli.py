"""``rollout-scheduler bench delivery`` runs end to end on a real server and reports exactly-once."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis
import typer
from typer.testing import CliRunner

from tests.service.interrupt import alive, interrupt


def _cli() -> typer.Typer:
    from service.cli_app import _register, app, bench_app

    if not any(command.name == "delivery" for command in bench_app.registered_commands):
        _register()  # once per session: registering twice would duplicate every command
    return app


def test_bench_delivery_reports_figures_and_leaves_no_keys(redis_url: str, redis_client: redis.Redis) -> None:
    args = ["bench", "delivery", "--redis-url", redis_url, "--workers", "4", "--items-per-worker", "25"]
    args += ["--queues", "32", "--steals", "20", "--processes", "1", "--json"]
    result = CliRunner().invoke(_cli(), args)
    assert result.exit_code == 0, result.output
    figures = json.loads(result.output)
    assert (figures["items"], figures["lost"], figures["accepted_twice"]) == (100, 0, 0)
    assert figures["claims_completions_per_s"] > 0
    assert 0 < figures["steal_p50_ms"] <= figures["steal_p99_ms"]
    assert redis_client.dbsize() == 0


def test_bench_delivery_on_an_unreachable_redis_says_so_in_one_line_and_exits_1() -> None:
    """The README's rule for a client of a running server: one it cannot reach is exit 1, since
    nothing in the command line is wrong (a bad flag is 2), as for ``bench redis-memory``."""
    result = CliRunner().invoke(_cli(), ["bench", "delivery", "--redis-url", "redis://127.0.0.1:1/0"])
    assert result.exit_code == 1
    assert "bench delivery:" in result.output
    assert "Traceback" not in result.output


def test_bench_delivery_with_credentials_redis_refuses_exits_2_not_as_an_unreachable_server(
    redis_url: str,
) -> None:
    """Credentials Redis refuses are in the command line: bad input, exit 2 (README)."""
    wrong = redis_url.replace("redis://", "redis://nobody:wrong-secret@", 1)
    result = CliRunner().invoke(_cli(), ["bench", "delivery", "--redis-url", wrong])
    assert result.exit_code == 2, result.output
    assert result.output.startswith("bench delivery:")
    assert "wrong-secret" not in result.output


@pytest.mark.parametrize(
    ("url", "names"),
    [
        ("notaurl", "redis_url='notaurl': expected redis://"),
        ("redis://:s3cr/et@127.0.0.1:1/0", "redis_url='redis://***@127.0.0.1:1/0': the port is not a number"),
    ],
)
def test_a_malformed_redis_url_is_named_as_the_flag_without_its_password(url: str, names: str) -> None:
    """redis-py's own words ("Port could not be cast to integer value as 'pa'") named no flag and
    printed the part of the password before its unescaped '/' ("s3cr")."""
    result = CliRunner().invoke(_cli(), ["bench", "delivery", "--redis-url", url])
    assert result.exit_code == 2
    assert result.output.startswith(f"bench delivery: {names}")
    assert "s3cr" not in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_ctrl_c_during_bench_delivery_prints_one_line_and_leaves_no_keys(
    redis_url: str, redis_client: redis.Redis
) -> None:
    args = ["bench", "delivery", "--redis-url", redis_url, "--workers", "8", "--items-per-worker", "5000"]
    ended = interrupt([*args, "--processes", "2"], workers=2, settle_s=1.0)
    assert ended.code == 130
    assert ended.stderr.strip() == "bench delivery: interrupted"
    assert not any(alive(pid) for pid in ended.workers)
    assert redis_client.dbsize() == 0


def test_no_pipeline_calls_as_a_sidecar_does_a_round_trip_per_claim_and_per_completion(
    redis_url: str, redis_client: redis.Redis
) -> None:
    # the sidecar reports each finished item in its own call and claims apart; the pipelined batches
    # of 8 alone (16 claims+completions a round trip) were read as what the fleet's sidecars get
    args = ["bench", "delivery", "--redis-url", redis_url, "--workers", "4", "--items-per-worker", "25"]
    args += [
        "--batch",
        "1",
        "--no-pipeline",
        "--queues",
        "32",
        "--steals",
        "20",
        "--processes",
        "1",
        "--json",
    ]
    result = CliRunner().invoke(_cli(), args)
    assert result.exit_code == 0, result.output
    figures = json.loads(result.output)
    assert (figures["lost"], figures["accepted_twice"], figures["pipelined"]) == (0, 0, False)
    round_trips = figures["round_trips_per_s"] * figures["wall_s"]
    assert round_trips >= 1.9 * figures["items"]  # a claim and a completion per item, ~2 x items
    assert redis_client.dbsize() == 0


def test_the_delivery_section_shows_the_sidecar_pattern_beside_the_pipelined_target_figure() -> None:
    from service.delivery.bench import DeliveryBench, render_markdown

    def run(ops: float, pipelined: bool) -> DeliveryBench:
        return DeliveryBench(
            64, 25_600, 8 if pipelined else 1, 1.0, ops, ops / 16, 0, 0, 1024, 2000,
            0.2, 0.5, 100.0, 0.05, 0.2, 2, ops >= 10_000, True, pipelined,
        )  # fmt: skip

    text = render_markdown([run(40_000, True)], [run(7_000, False)])
    assert "`bench delivery --batch 1 --no-pipeline --json`" in text
    assert "| 2 | batch 1, as a sidecar | 7,000 |" in text
    assert "40,000 claims+completions/s pipelined in batches of 8" in text
    assert "7,000/s as a sidecar calls" in text


def test_timed_steals_run_the_deadline_guard_as_a_sidecar_steals(
    redis_url: str, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # items without planned runs (no P:due) and steals without a rate skipped the guard's reads, which
    # every steal of a sidecar that has completed something runs: the p99 left that work out
    from service.delivery import bench
    from service.delivery.protocol import Delivery

    rates: list[float | None] = []
    steal = Delivery.steal

    def recorded(self: Delivery, *args: Any, **kwargs: Any) -> Any:
        rates.append(kwargs.get("rate_tokens_per_s"))
        return steal(self, *args, **kwargs)

    monkeypatch.setattr(Delivery, "steal", recorded)
    samples, _, _ = bench.measure_steals(redis_url, "bench-guard", queues=8, steals=10)
    assert len(samples) == 10  # the guard passes a thief as fast as the owner: nothing ran out
    assert set(rates) == {bench.STEAL_RATE}
    dues = redis_client.hgetall("bench-guard:{steal}:due")
    assert dues  # the items carry their planned runs
    bench._cleanup(redis_url, "bench-guard")
