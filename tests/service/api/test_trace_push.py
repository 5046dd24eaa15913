"""``trace push``: a trace's rows become the service's history, so it predicts from its first step."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import redis
import typer
from typer.testing import CliRunner

from predictors.synthetic import synthetic_trace
from predictors.traceio import read_trace
from predictors.tracewrite import write_trace
from service.api.learning_schemas import ActualReport, ActualsAccepted
from service.client import SchedulerClient
from service.history_push import actual_reports, push
from service.settings import Settings
from tests.service.api_helpers import TRAINER, WORKER, LiveServer, with_settings

HEADER = "step,prompt_id,sample_idx,prompt_tokens,output_tokens,max_new_tokens,finish_reason,reward,level\n"


def _trace(path: Path, rows: list[str]) -> Path:
    path.write_text(HEADER + "".join(f"{row}\n" for row in rows))
    return path


def _history(tmp_path: Path) -> Path:
    """Two steps of four prompts x two samples."""
    rows = [
        f"{step},p{p},{s},{40 + p},{100 * (p + 1) + 10 * s + step},"
        f"2048,{'stop' if p else ''},{(p + s) % 2},L{p % 2}"
        for step in (0, 1)
        for p in range(4)
        for s in range(2)
    ]
    return _trace(tmp_path / "history.csv", rows)


def _sources(client: SchedulerClient, step: int) -> dict[str, int]:
    body = {
        "batch": {
            "items": [
                {"prompt_id": f"p{p}", "prompt_tokens": 40 + p, "n": 2, "max_new_tokens": 2048}
                for p in range(4)
            ]
        },
        "inventory": {"workers": [{"worker_id": "w0", "device": "H100"}]},
        "step": step,
        "publish": False,
    }
    return client.schedule(body).prediction_sources


def test_pushed_history_is_what_the_service_then_predicts_from(
    cli: typer.Typer, live_settings: Settings, redis_client: redis.Redis, tmp_path: Path
) -> None:
    settings = with_settings(live_settings, trainer_tokens=TRAINER)
    with LiveServer(settings) as server, SchedulerClient(server.url, token=TRAINER) as client:
        assert _sources(client, 2) == {"global_prior": 8}  # a fresh service knows none of them
        result = CliRunner().invoke(
            cli, ["trace", "push", str(_history(tmp_path)), "--url", server.url, "--token", TRAINER]
        )
        assert result.exit_code == 0, result.output
        assert "pushed 16 actuals" in result.output
        assert _sources(client, 2) == {"prompt_history_mean": 8}
        assert _sources(client, 0) == {"global_prior": 8}  # only steps before the one planned count
        again = CliRunner().invoke(
            cli, ["trace", "push", str(_history(tmp_path)), "--url", server.url, "--token", TRAINER]
        )
        assert "pushed 0 actuals" in again.output
        assert "16 it held already" in again.output  # not a silent 0: the history is there


def test_push_takes_its_token_from_scheduler_token_off_the_command_line(
    cli: typer.Typer, live_settings: Settings, redis_client: redis.Redis, tmp_path: Path
) -> None:
    settings = with_settings(live_settings, trainer_tokens=TRAINER)
    with LiveServer(settings) as server:
        args = ["trace", "push", str(_history(tmp_path)), "--url", server.url]
        result = CliRunner().invoke(cli, args, env={"SCHEDULER_TOKEN": TRAINER})
    assert result.exit_code == 0, result.output
    assert "pushed 16 actuals" in result.output


def test_a_refused_retrain_still_says_the_history_was_pushed(
    cli: typer.Typer, live_settings: Settings, redis_client: redis.Redis, tmp_path: Path
) -> None:
    settings = with_settings(live_settings, trainer_tokens=TRAINER, worker_tokens=WORKER)
    with LiveServer(settings) as server, SchedulerClient(server.url, token=TRAINER) as client:
        result = CliRunner().invoke(
            cli,
            ["trace", "push", str(_history(tmp_path)), "--url", server.url, "--token", WORKER, "--retrain"],
        )
        assert result.exit_code == 2, result.output  # the retrain needs a trainer's token
        assert "403" in result.output
        assert "pushed 16 actuals" in result.output  # yet the push landed, and the user is told so
        assert client.models().history_rows == 16


def test_a_trace_with_a_row_the_api_would_refuse_pushes_nothing(
    cli: typer.Typer, live_settings: Settings, redis_client: redis.Redis, tmp_path: Path
) -> None:
    bad = _trace(tmp_path / "bad.csv", ["0,p0,0,40,100,2048,stop,1,L0", "0,p 1,0,40,100,2048,stop,1,L0"])
    with LiveServer(live_settings) as server:
        before = redis_client.dbsize()
        result = CliRunner().invoke(cli, ["trace", "push", str(bad), "--url", server.url])
        assert result.exit_code == 2
        # it said "row 1.prompt_id": the row's 0-based index in the trace, on line 3 of the file
        assert (
            f"trace: {bad}: row 2 (step 0, prompt 'p 1', sample 0): prompt_id='p 1': ' ' (character 1) is"
            in result.output
        )
        assert redis_client.dbsize() == before


def test_a_trace_row_of_no_output_tokens_is_refused_at_its_line_as_the_api_refuses_it(
    cli: typer.Typer, live_settings: Settings, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """It was left out and counted (``; 1 rows without output left out``): a trace took what no
    report may say, an output of 0 tokens (an empty generation is its EOS, 1 token; learn53)."""
    bad = _trace(tmp_path / "bad.csv", ["0,p0,0,40,100,2048,stop,1,L0", "0,p1,0,40,0,2048,stop,1,L0"])
    with LiveServer(live_settings) as server:
        before = redis_client.dbsize()
        result = CliRunner().invoke(cli, ["trace", "push", str(bad), "--url", server.url])
        assert result.exit_code == 2
        assert "bad.csv:3:output_tokens" in result.output
        assert "must be >= 1" in result.output
        assert redis_client.dbsize() == before


def test_an_unreachable_service_is_one_line_and_exit_1_as_in_bench(cli: typer.Typer, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli, ["trace", "push", str(_history(tmp_path)), "--url", "http://127.0.0.1:9"]
    )
    assert result.exit_code == 1  # 2 is kept for input the user can fix
    assert result.output.strip().count("\n") == 0
    assert "service at http://127.0.0.1:9 unreachable" in result.output


def test_a_url_without_its_scheme_is_a_command_line_mistake_not_an_outage(
    cli: typer.Typer, tmp_path: Path
) -> None:
    for url in ("127.0.0.1:8000", "http://[::1"):
        result = CliRunner().invoke(cli, ["trace", "push", str(_history(tmp_path)), "--url", url])
        assert result.exit_code == 2, result.output  # 1 would say the service is down
        assert result.output.strip().count("\n") == 0
        assert "url=" in result.output
        assert "unreachable" not in result.output


class _Recording(SchedulerClient):
    """A client that records each ``report_actuals`` call (reports, outage window) and stores nothing."""

    def __init__(self) -> None:
        super().__init__("http://127.0.0.1:9")
        self.calls: list[tuple[int, float]] = []

    def report_actuals(
        self,
        reports: Sequence[ActualReport | Mapping[str, Any]],
        chunk: int = 1_000,
        outage_s: float = 60.0,
        partial: bool = False,
    ) -> ActualsAccepted:
        self.calls.append((len(reports), outage_s))
        return ActualsAccepted(accepted=len(reports), stream_length=0, time_scales={})


def test_the_first_report_goes_alone_and_unretried_and_later_batches_ride_out_an_outage(
    tmp_path: Path,
) -> None:
    """A service that does not answer the first report is down or misnamed: said at once (it was
    retried for a minute, the length of this file's unreachable-service test); once one landed, a
    restart mid-push is ridden out, the service storing a resent report once."""
    reports = actual_reports(read_trace(_history(tmp_path)), "history")
    client = _Recording()
    with client:
        pushed = push(client, reports, batch=5)
    assert client.calls == [(1, 0.0), (5, 60.0), (5, 60.0), (5, 60.0)]
    assert pushed.accepted == len(reports) == 16  # two steps x 4 x 2


def test_pushing_a_synthetic_trace_says_so_and_so_does_the_model_retrained_on_it(
    cli: typer.Typer, live_settings: Settings, redis_client: redis.Redis, tmp_path: Path
) -> None:
    synthetic = tmp_path / "synth.csv"
    write_trace(synthetic_trace("short-cot", prompts=4, samples=2, steps=2, seed=1), synthetic)
    with LiveServer(live_settings) as server, SchedulerClient(server.url) as client:
        result = CliRunner().invoke(cli, ["trace", "push", str(synthetic), "--url", server.url, "--retrain"])
        assert result.exit_code == 0, result.output
        assert f"pushed 16 SYNTHETIC actuals to {server.url}" in result.output  # was "pushed 16 actuals"
        assert "retrained: predictor v1, fitted on SYNTHETIC actuals" in result.output
        assert client.models().synthetic is True
        recorded = CliRunner().invoke(cli, ["trace", "push", str(_history(tmp_path)), "--url", server.url])
        assert "SYNTHETIC" not in recorded.output
