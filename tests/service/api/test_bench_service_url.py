"""``bench service --url`` on a running service: its schedules must not reach real workers.

Named ``h100-0``..., as the docs name workers, a run against a service with sidecars sent them its
30,000 benchmark trajectories (found walking the README on a live fleet), and left them queued for
the schedules' retention.
"""

from __future__ import annotations

import redis

from service.client import SchedulerClient
from service.commands.bench_service import _measure, batch
from service.delivery import keys
from service.settings import Settings
from tests.service.api.conftest import LiveServer


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
