"""The step's set and the rule's reads on a real 3-master Redis Cluster: ``rs:step:<step>`` is one key
(one slot, any node), and each part's ``P:st`` and results stream are read in that part's own slot,
so a part that settled before any of its reports and a result the client skips are seen there too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.delivery import CompletionOutcome, Delivery, Lease, TrajectoryResult
from service.delivery import keys as keyspace
from tests.cluster import LocalCluster
from tests.service.api_helpers import actual_history, actual_report, batch_body

DONE = TrajectoryResult(output_tokens=40, output="ok")
ABORTED = TrajectoryResult(output_tokens=0, finish_reason="abort")


def _fitted(client: TestClient, model_dir: Path) -> list[int]:
    version = client.post("/models/retrain").json()["version"]
    steps: list[int] = json.loads((model_dir / f"v{int(version[1:]):06d}" / "metadata.json").read_text())[
        "steps"
    ]
    return steps


def _report(client: TestClient, leases: list[Lease], schedule_id: str) -> None:
    reports = [
        actual_report(2, int(lease.item.prompt_id[1:]), lease.item.sample_idx) | {"schedule_id": schedule_id}
        for lease in leases
    ]
    assert client.post("/actuals", json={"actuals": reports}).status_code == 200


@pytest.mark.slow
def test_a_settled_unreported_part_and_an_aborted_result_are_read_in_their_slots_on_redis_cluster(
    cluster_app: TestClient, redis_cluster: LocalCluster, tmp_path: Path
) -> None:
    assert cluster_app.post("/actuals", json={"actuals": actual_history(steps=2)}).status_code == 200
    delivery, items = Delivery(redis_cluster.client()), batch_body()["batch"]["items"]
    leases: dict[str, list[Lease]] = {}
    for sid, part in (("step-2a", items[:4]), ("step-2b", items[4:])):
        body = batch_body(step=2, schedule_id=sid) | {"batch": {"items": part}}
        assert cluster_app.post("/schedule", json=body).status_code == 200
        leases[sid] = [*delivery.claim(sid, "w0", 64), *delivery.claim(sid, "w1", 64)]
        for n, lease in enumerate(leases[sid]):
            result = ABORTED if (sid, n) == ("step-2a", 0) else DONE
            assert delivery.complete(lease, result) is CompletionOutcome.ACCEPTED
    _report(cluster_app, leases["step-2a"][1:], "step-2a")  # all but the aborted one, which says no length
    # step-2b settled, reported nothing: only its set names it
    assert _fitted(cluster_app, tmp_path) == [0, 1]
    _report(cluster_app, leases["step-2b"], "step-2b")
    assert _fitted(cluster_app, tmp_path) == [0, 1, 2]


@pytest.mark.slow
def test_entries_of_two_steps_are_kept_in_their_own_slots_in_one_round_trip_on_redis_cluster(
    redis_cluster: LocalCluster,
) -> None:
    """``keep_planning``'s one pipeline writes each step's planning zset in its own slot (the two
    names hash apart), pushing entries that are there and creating none."""
    client = redis_cluster.client()
    delivery = Delivery(client)
    delivery.enter_planning(2, "a", 1_000)
    delivery.enter_planning(3, "b", 1_000)
    first = {
        step: float(client.zscore(keyspace.step_planning(step), m) or 0) for step, m in ((2, "a"), (3, "b"))
    }
    delivery.keep_planning({2: ["a", "gone"], 3: ["b"]}, 600_000)
    for step, member in ((2, "a"), (3, "b")):
        key = keyspace.step_planning(step)
        assert client.pttl(key) > 500_000
        assert float(client.zscore(key, member) or 0) > first[step] + 500_000
    assert client.zscore(keyspace.step_planning(2), "gone") is None
