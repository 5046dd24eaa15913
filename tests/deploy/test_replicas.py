"""Two service replicas behind one Redis: schedules accepted concurrently on both, nothing lost or
duplicated between the plan a trainer receives and the queues the sidecars pull, and every schedule's
progress served by either replica, also after the replica that planned it is gone.

Each replica is a real ``rollout-scheduler serve`` process (tests/deploy/replicas.py). Every test runs
twice: behind one valkey-server, and behind the 3-master cluster (``serve --redis-cluster``). Counts of
lost and duplicated assignments are printed and recorded as test properties.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster

from service.delivery import Delivery
from service.delivery.keys import schedule_keys
from tests.cluster import LocalCluster
from tests.deploy.replicas import Replica
from tests.service.delivery.audit import audit
from tests.service.finished import RESULT

WORKERS = ("h100-0", "h100-1", "ascend-0", "ascend-1")
EXAMPLE_BATCH = Path(__file__).resolve().parents[2] / "deploy" / "example-batch.json"
PROMPTS, SAMPLES = 12, 4  # 48 trajectories per schedule
POSTS_PER_THREAD, THREADS_PER_REPLICA = 3, 2


def batch(step: int) -> dict[str, Any]:
    """A small GRPO step on two H100 and two Ascend 910B workers."""
    items = [
        {"prompt_id": f"s{step}-p{i}", "prompt_tokens": 64 + 8 * i, "n": SAMPLES, "max_new_tokens": 2048}
        for i in range(PROMPTS)
    ]
    for item in items:
        item["prompt"] = f"question {item['prompt_id']}"
    inventory = [{"worker_id": w, "device": "H100" if "h100" in w else "Ascend910B"} for w in WORKERS]
    return {"batch": {"items": items}, "inventory": {"workers": inventory}, "step": step, "policy": "lpt"}


@dataclass(frozen=True)
class Backend:
    """The Redis the replicas share."""

    name: str  # "single" or "cluster", for messages
    url: str  # what --redis-url gets
    cluster: bool  # whether it is a Redis Cluster
    flush: Callable[[], None]  # empty it


@pytest.fixture(scope="module", params=["single", "cluster"])
def backend(request: pytest.FixtureRequest) -> Backend:
    """One valkey-server (the session's), or the session's 3-master cluster."""
    if request.param == "cluster":
        cluster: LocalCluster = request.getfixturevalue("redis_cluster")
        return Backend("cluster", cluster.url, True, cluster.flushall)
    url: str = request.getfixturevalue("redis_url")

    def flush() -> None:
        with redis.Redis.from_url(url) as client:
            client.flushdb()

    return Backend("single", url, False, flush)


@pytest.fixture(scope="module")
def replicas(backend: Backend, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Replica]]:
    """Two replicas sharing Redis and the model store, as two pods do; started once per backend.

    Starting one costs seconds of imports on 2 cores, so the tests of a backend share them; the
    replica-down test stops replica-a, so it runs last. Redis is emptied first: the single server is
    the worker's session one, and a replica's start reads and folds whatever actuals stream the
    worker's earlier modules left under the default prefix.
    """
    backend.flush()
    root = tmp_path_factory.mktemp("replicas")
    started = [
        Replica(name, backend.url, root / "models", cluster=backend.cluster).launch()
        for name in ("replica-a", "replica-b")
    ]
    try:
        yield [replica.wait_ready() for replica in started]
    finally:
        for replica in started:
            replica.stop()


@pytest.fixture
def store(backend: Backend) -> Iterator[Any]:
    """A client on the emptied shared Redis (a cluster-aware one for the cluster)."""
    backend.flush()
    client: Any = (
        RedisCluster.from_url(backend.url, decode_responses=True)
        if backend.cluster
        else redis.Redis.from_url(backend.url, decode_responses=True)
    )
    yield client
    client.close()


@pytest.fixture
def live_replicas(replicas: list[Replica], store: Any) -> list[Replica]:
    """Both replicas, running, on an emptied Redis."""
    assert all(replica.alive for replica in replicas), "a replica was stopped by an earlier test"
    return replicas


def _post_concurrently(
    replicas: list[Replica], threads_per_replica: int = THREADS_PER_REPLICA, posts: int = POSTS_PER_THREAD
) -> list[tuple[str, dict[str, Any]]]:
    """Every thread posts its own steps to its replica at the same time; returns (replica, response)."""
    answers: list[tuple[str, dict[str, Any]]] = []
    errors: list[str] = []
    barrier = threading.Barrier(len(replicas) * threads_per_replica)

    def post(replica: Replica, first_step: int) -> None:
        with replica.client() as http:
            barrier.wait()
            for step in range(first_step, first_step + posts):
                response = http.post("/schedule", json=batch(step))
                if response.status_code != 200:
                    errors.append(f"{replica.name} step {step}: {response.status_code} {response.text}")
                else:
                    answers.append((replica.name, response.json()))

    threads = [
        threading.Thread(target=post, args=(replica, posts * (r * threads_per_replica + t)))
        for r, replica in enumerate(replicas)
        for t in range(threads_per_replica)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    return answers


def _lost_and_duplicated(client: Any, answer: dict[str, Any]) -> tuple[int, int]:
    """Compare the batch, the plan the trainer got and the queues in Redis, trajectory by trajectory."""
    step = answer["step"]
    expected = {f"s{step}-p{i}#{k}" for i in range(PROMPTS) for k in range(SAMPLES)}
    keys = schedule_keys(answer["schedule_id"])
    planned, queued = Counter[str](), Counter[str]()
    for worker, items in answer["assignments"].items():
        answered = [f"{item['prompt_id']}#{item['sample_idx']}" for item in items]
        in_redis = [str(key) for key in client.lrange(keys.queue(worker), 0, -1)]
        assert in_redis == answered, f"{worker}: the queue sidecars pull is not the plan returned"
        planned.update(answered)
        queued.update(in_redis)
    lost = len(expected - set(planned)) + len(expected - set(queued))
    duplicated = sum(n - 1 for n in planned.values() if n > 1) + sum(n - 1 for n in queued.values() if n > 1)
    return lost, duplicated


def test_two_replicas_accept_schedules_concurrently_and_lose_or_duplicate_no_assignment(
    live_replicas: list[Replica], store: Any, backend: Backend, record_property: Any
) -> None:
    answers = _post_concurrently(live_replicas)
    assert len(answers) == 2 * THREADS_PER_REPLICA * POSTS_PER_THREAD
    assert len({a["schedule_id"] for _, a in answers}) == len(answers), "schedule ids collide"
    assert {name for name, _ in answers} == {"replica-a", "replica-b"}
    lost = duplicated = 0
    for _, answer in answers:
        counted = _lost_and_duplicated(store, answer)
        raw = audit(store, answer["schedule_id"])
        lost += counted[0] + raw.lost
        duplicated += counted[1] + raw.accepted_twice
        assert raw.total == raw.queued == PROMPTS * SAMPLES
    print(f"\nreplicas ({backend.name}): schedules={len(answers)} lost={lost} duplicated={duplicated}")
    record_property("lost", lost)
    record_property("duplicated", duplicated)
    assert (lost, duplicated) == (0, 0)


def _progress(replica: Replica, schedule_id: str) -> dict[str, Any]:
    """The schedule's progress as ``replica`` serves it, less ``elapsed_s``: that one is read on the
    lease clock at each request, so two reads of one schedule differ by the time between them."""
    with replica.client() as http:
        response = http.get(f"/schedule/{schedule_id}")
    assert response.status_code == 200, (replica.name, response.text)
    body: dict[str, Any] = response.json()
    assert body.pop("elapsed_s") >= 0
    return body


def _work_half(backend: Backend, schedule_id: str) -> int:
    """Workers claim and complete about half of each queue, straight through the delivery protocol."""
    delivery, done = Delivery.from_url(backend.url, cluster=backend.cluster), 0
    for worker in WORKERS:
        for lease in delivery.claim(schedule_id, worker, 6):
            delivery.complete(lease, RESULT)
            done += 1
    return done


def test_either_replica_serves_the_progress_of_any_schedule_even_after_its_planner_stops(
    live_replicas: list[Replica], backend: Backend
) -> None:
    replicas = live_replicas
    answers = dict(_post_concurrently(replicas, threads_per_replica=1, posts=1))
    assert set(answers) == {"replica-a", "replica-b"}
    planned_by_a = answers["replica-a"]["schedule_id"]
    done = _work_half(backend, planned_by_a)
    views = [_progress(replica, planned_by_a) for replica in replicas]
    assert views[0] == views[1], "the replicas disagree on one schedule's progress"
    assert (views[0]["total"], views[0]["done"]) == (PROMPTS * SAMPLES, done)
    assert sum(w["done"] for w in views[0]["workers"].values()) == done
    replicas[0].stop()  # the replica that planned it goes away (a pod evicted mid-step)
    after = _progress(replicas[1], planned_by_a)
    assert after == views[0]
    with replicas[1].client() as http:
        results = http.get(f"/schedule/{planned_by_a}/results").json()["results"]
        json_type = {"Content-Type": "application/json"}  # as the README's curl sends it
        example = http.post("/schedule", content=EXAMPLE_BATCH.read_bytes(), headers=json_type)
    assert len(results) == done
    assert example.status_code == 200, example.text  # the README's batch, on the surviving replica
