"""``bench service --url`` on a running service: its schedules must not reach real workers.

Named ``h100-0``..., as the docs name workers, a run against a service with sidecars sent them its
30,000 benchmark trajectories (found walking the README on a live fleet), and left them queued for
the schedules' retention. Nor may its made-up actuals reach that service's history and model unless
asked for, and then labelled synthetic.
"""

from __future__ import annotations

import io
import json

import pytest
import redis
import typer
from typer.testing import CliRunner

from service.client import SchedulerClient
from service.commands.bench_service import _measure, _progress, batch
from service.delivery import keys
from service.settings import Settings
from tests.service.api_helpers import LiveServer


def test_a_benchmark_run_leaves_no_real_workers_inbox_nor_any_queue_holding_its_work(
    live_settings: Settings, redis_client: redis.Redis
) -> None:
    body = batch(1024, 16, step=2, policy="lpt")
    with LiveServer(live_settings) as server, SchedulerClient(server.url) as client:
        result = _measure(client, body, count=2, warmup=1, advance=lambda *_: None)
        assert result.requests == 2
        for worker_id in ("h100-0", "h100-1", "910b-0", "ascend-0", "npu-0"):  # the docs' names
            assert redis_client.zcard(keys.inbox(worker_id)) == 0
        published = [meta.split("{")[1].split("}")[0] for meta in redis_client.scan_iter("rs:{*}:meta")]
        assert len(published) == 3  # the warm-up and both measured requests
        for schedule_id in published:  # announced, then cancelled: nothing queued or running
            progress = client.progress(schedule_id)
            assert (progress.queued, progress.running, progress.cancelled) == (0, 0, progress.total)
            assert redis_client.zcard(keys.inbox(next(iter(progress.workers)))) == 0


def _bench(cli: typer.Typer, url: str, *flags: str) -> tuple[dict[str, object], str]:
    """``bench service --url`` at the least measuring (2 requests a size): its JSON report, its stderr."""
    command = ["bench", "service", "--url", url, "--requests", "2", "--warmup", "0", "--json", *flags]
    result = CliRunner().invoke(cli, command)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout), result.stderr


def test_a_benchmark_run_on_a_url_leaves_its_history_and_model_alone(
    cli: typer.Typer, live_settings: Settings
) -> None:
    """It sent 10,240 made-up actuals and retrained, unlabelled: the service's next model was fitted on
    them, and said nothing of it."""
    with LiveServer(live_settings) as server, SchedulerClient(server.url) as client:
        report, _ = _bench(cli, server.url)
        models = client.models()
    assert (models.history_rows, models.version, models.stored_versions) == (0, "fallback", [])
    assert report["seeded_history"] is False


def test_a_history_seeded_on_request_is_labelled_synthetic_and_so_is_the_model_fitted_on_it(
    cli: typer.Typer, live_settings: Settings
) -> None:
    with LiveServer(live_settings) as server, SchedulerClient(server.url) as client:
        report, stderr = _bench(cli, server.url, "--seed-history")
        models = client.models()
    assert (models.history_rows, models.version, models.synthetic) == (10_240, "v1", True)
    assert report["seeded_history"] is True
    assert (
        f"sent 10240 SYNTHETIC actuals to {server.url}; retrained: predictor v1, fitted on SYNTHETIC"
        in stderr
    )


class _Terminal(io.StringIO):
    """A stream that says it is a terminal, as an interactive stderr does."""

    def isatty(self) -> bool:
        return True


def test_the_benchmarks_progress_bar_is_drawn_on_stderr_while_stdout_is_redirected(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stderr, stdout = _Terminal(), io.StringIO()
    monkeypatch.setenv("TERM", "xterm")  # not a dumb terminal, where rich draws no live display
    monkeypatch.setattr("sys.stderr", stderr)
    monkeypatch.setattr("sys.stdout", stdout)
    with _progress(quiet=False) as advance:
        advance("1,024 x 16", 3, 30)
    assert "1,024 x 16" in stderr.getvalue()
    assert stdout.getvalue() == ""
