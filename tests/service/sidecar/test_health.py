"""The push-mode liveness probe: 200 while the sidecar's loop turns, 503 once it has stopped."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import socket
import struct
import time
from pathlib import Path

import httpx
import pytest
import redis

from service.delivery.protocol import Delivery
from service.embedded import EmbeddedServer
from service.ports import free_port
from service.sidecar.engine_client import EngineClient, EngineOptions
from service.sidecar.health import HealthServer, Probes
from service.sidecar.holdings import Holdings
from service.sidecar.metrics import exposition, pull_exposition
from service.sidecar.runner import RunnerSettings, Sidecar
from service.sidecar.session import SessionSettings, SessionStats, WorkerSession
from service.sidecar.timings import Durations
from tests.service.metrics_docs import DOCS, documented_metrics, exported_metrics
from tests.service.sidecar.health_probes import probes_of
from tests.service.sidecar.procs import bound_url, cluster, item, publish, run_until, wait_http, wait_until


def _sidecar(
    redis_url: str, holdings: Holdings | None = None, engine_url: str = "http://127.0.0.1:9"
) -> Sidecar:
    holdings = Holdings(8, None) if holdings is None else holdings
    session = WorkerSession(Delivery.from_url(redis_url), holdings, SessionSettings("w0"))
    settings = RunnerSettings(idle_poll_s=0.02, engine_wait_s=0.05)
    return Sidecar(session, EngineClient.open(EngineOptions(engine_url)), settings)


def test_a_loop_that_turned_lately_is_alive_and_says_what_the_sidecar_holds(redis_url: str) -> None:
    with probes_of(_sidecar(redis_url), stale_s=5.0) as app:
        answer = app.get("/health")
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "application/json"
    body = answer.json()
    assert body["status"] == "ok"
    assert (body["worker_id"], body["held"], body["engine_up"]) == ("w0", 0, False)


def test_held_counts_what_runs_on_the_engine_and_a_lease_claimed_ahead_is_counted_waiting(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """A lease claimed but not started (its KV does not fit beside the running item yet) is not on the
    engine: counted in ``held`` it over-reported what the engine holds; it is ``waiting``, in the
    probe's body and in the gauges alike."""
    items = [item("a", 0, 600), item("b", 0, 600)]  # 700 KV tokens each at predicted length
    publish(Delivery.from_url(redis_url), "kv", {"w0": items}, kv_admission=True)
    runner = _sidecar(redis_url, Holdings(4, 1000))
    for _ in items:  # under KV admission a claim takes one item
        asyncio.run(runner.session.claim(1))
    started = runner.session.holdings.start_fitting()
    body = Probes(runner, "w0").health()
    text = exposition(runner, "w0").decode()
    assert [h.lease.key for h in started] == ["a#0"]
    assert {k: v for k, v in json.loads(body.body).items() if k in ("held", "waiting")} == {
        "held": 1,
        "waiting": 1,
    }
    assert 'rollout_sidecar_held{worker_id="w0"} 1.0' in text
    assert 'rollout_sidecar_waiting{worker_id="w0"} 1.0' in text


def test_a_sidecar_still_connecting_to_redis_is_alive_but_not_ready(redis_url: str) -> None:
    with probes_of(None) as app:
        assert (app.get("/health").status_code, app.get("/health").json()["status"]) == (200, "connecting")
        assert app.get("/ready").status_code == 503


def test_a_sidecar_is_ready_once_a_claim_reached_redis(
    redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    with cluster(tmp_path) as procs:
        runner = _sidecar(redis_url, engine_url=procs.engine_threads({"engine": 0.01})["engine"])
        with probes_of(runner) as app:
            assert app.get("/ready").status_code == 503  # nothing asked of Redis yet
            run_until(runner, lambda: runner.redis_up)  # the loop claims once its engine answers
            assert app.get("/ready").status_code == 200
            assert app.get("/ready").json()["redis_up"] is True


def test_a_sidecar_process_waiting_for_a_redis_cluster_that_is_down_answers_liveness_meanwhile(
    tmp_path: Path,
) -> None:
    dead = free_port()  # nothing listens on ``dead``: the cluster is down
    with cluster(tmp_path) as procs:
        flags = ["--cluster", "--health-port", "0"]
        sidecar = procs.sidecar("w0", f"http://127.0.0.1:{free_port()}", f"redis://127.0.0.1:{dead}", *flags)
        health = bound_url(sidecar)  # the kernel's pick
        wait_http(f"{health}/health", sidecar)
        assert httpx.get(f"{health}/health").json()["status"] == "connecting"
        assert httpx.get(f"{health}/ready").status_code == 503
        wait_until(lambda: "unreachable" in sidecar.log.read_text(), 10, "a retry logged")
        assert sidecar.popen.poll() is None  # still trying, not given up


def test_a_loop_silent_past_the_limit_is_reported_stalled_with_503(redis_url: str) -> None:
    runner = _sidecar(redis_url)
    runner.last_turn = time.monotonic() - 6.0
    with probes_of(runner, stale_s=5.0) as app:
        answer = app.get("/health")
    assert answer.status_code == 503
    assert answer.json()["status"] == "stalled"
    assert answer.json()["loop_silent_s"] >= 6.0


def test_a_sidecar_waiting_for_its_engine_keeps_turning(redis_client: redis.Redis, redis_url: str) -> None:
    runner = _sidecar(redis_url)  # nothing answers on port 9: the engine is still "loading"
    before = runner.last_turn
    started = time.monotonic()
    run_until(runner, lambda: time.monotonic() - started > 0.5)
    assert runner.last_turn - before >= 0.3  # polled the engine, and said so, all along


def test_the_server_answers_from_its_own_thread_and_stops(redis_url: str) -> None:
    server = HealthServer(_sidecar(redis_url), "w0", "127.0.0.1", 0)  # the kernel's pick
    server.start()
    url = f"http://127.0.0.1:{server.port}/health"
    try:
        wait_http(url, None, timeout_s=10.0)
        assert httpx.get(url).json()["worker_id"] == "w0"
    finally:
        server.stop()
    with pytest.raises(httpx.TransportError):
        httpx.get(url, timeout=1.0)


def test_a_client_that_connects_and_sends_nothing_is_hung_up_on_and_probes_still_answer() -> None:
    """A silent connection held a server thread for good (a slow-loris): now it is closed once it has
    been silent for the client timeout (0.2 s here; the wait below is only a bound on a hang)."""
    with probes_of(None, client_timeout_s=0.2) as app:
        port = httpx.URL(str(app.base_url)).port
        assert port is not None
        with socket.create_connection(("127.0.0.1", port), timeout=10.0) as silent:
            try:
                received = silent.recv(1)
            except ConnectionResetError:
                received = b""
        assert received == b""  # end of stream: the server closed it, not the 10 s bound
        assert app.get("/health").json()["status"] == "connecting"


def test_a_prober_that_hangs_up_before_its_reply_leaves_no_traceback_in_the_log(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """A probe whose timeout ran out while the sidecar was paused (SIGSTOP in the chaos soak of
    2026-12-04) hung up before its reply: ``socketserver`` printed a traceback per such probe to
    stderr (``BrokenPipeError``, or ``ConnectionResetError`` reading the request), raw text among the
    sidecar's JSON log lines. A hang-up is the prober's business; the next probe is answered."""
    with probes_of(None) as app:
        port = httpx.URL(str(app.base_url)).port
        assert port is not None
        for _ in range(10):
            with socket.create_connection(("127.0.0.1", port), timeout=5.0) as rude:
                rude.sendall(b"GET /health HTTP/1.1\r\nHost: probe\r\n\r\n")
                # close with a reset (linger 0), as a prober that gives up mid-reply does
                rude.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        assert app.get("/health").json()["status"] == "connecting"
    assert "Traceback" not in capfd.readouterr().err


def test_a_health_port_already_taken_fails_the_start_instead_of_a_probe_that_never_answers(
    redis_url: str,
) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        server = HealthServer(_sidecar(redis_url), "w0", "127.0.0.1", taken.getsockname()[1])
        with pytest.raises(OSError):
            server.start()


def test_the_health_port_exposes_the_sidecars_counters_for_prometheus(redis_url: str) -> None:
    runner = _sidecar(redis_url)
    runner.session.stats.claimed, runner.session.stats.failed, runner.session.stats.cancelled = 7, 2, 3
    with probes_of(runner) as app:
        answer = app.get("/metrics")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain")
    text = answer.text
    assert 'rollout_sidecar_claimed_total{worker_id="w0"} 7.0' in text
    assert 'rollout_sidecar_failed_total{worker_id="w0"} 2.0' in text
    assert 'rollout_sidecar_cancelled_total{worker_id="w0"} 3.0' in text  # apart from stale and lost
    assert 'rollout_sidecar_held{worker_id="w0"} 0.0' in text
    assert 'rollout_sidecar_engine_up{worker_id="w0"} 0.0' in text


def test_every_metric_a_sidecar_exports_is_documented_with_its_labels_and_no_other(redis_url: str) -> None:
    exported = exported_metrics(exposition(_sidecar(redis_url), "w0").decode())
    docs = (DOCS / "sidecar.md").read_text()
    section = docs.split("**Metrics (`--health-port`).**", 1)[1].split("\n\n", 1)[0]
    assert "every series labelled `worker_id`" in " ".join(section.split())
    assert set(exported) == set(documented_metrics(section))
    assert set(exported.values()) == {frozenset({"worker_id"})}


def _pull_metrics_row() -> str:
    """docs/sidecar.md's pull API table row for ``GET /metrics``."""
    rows = (DOCS / "sidecar.md").read_text().splitlines()
    return next(row for row in rows if row.startswith("| `GET /metrics` |"))


def test_the_pull_api_metrics_row_names_every_series_pull_mode_exports_and_those_it_lacks(
    redis_url: str,
) -> None:
    """The row shows the counters as ``{claimed,...,<last>}_total``, then the gauges, and names the
    push mode's series pull mode lacks: until 2026-12-04 nothing held it, and a new counter (the
    2026-12-04 ``inherited``) could be exported without the row's list ending at it."""
    pull = set(exported_metrics(pull_exposition(_sidecar(redis_url).session, Durations()).decode()))
    push = set(exported_metrics(exposition(_sidecar(redis_url), "w0").decode()))
    row = _pull_metrics_row()
    lacking = re.search(r"; no (.*?) \(", row)
    assert lacking is not None
    assert push - pull == {f"rollout_sidecar_{name}" for name in re.findall(r"`([a-z_]+)`", lacking[1])}
    counters = [field.name for field in dataclasses.fields(SessionStats)]
    assert f"`rollout_sidecar_{{{counters[0]},...,{counters[-2]},{counters[-1]}}}_total`" in row
    others = set(documented_metrics(row))  # the elided brace is no name: the gauges and histogram
    assert others | {f"rollout_sidecar_{name}_total" for name in counters} == pull


def test_a_sidecar_with_every_slot_busy_is_not_ready_once_its_heartbeats_find_redis_gone(
    tmp_path: Path,
) -> None:
    """A full sidecar claims nothing, so only its heartbeats meet a Redis outage: /ready said 200."""
    server = EmbeddedServer().start()
    with cluster(tmp_path) as procs:
        engine = procs.engine_threads({"engine": 0.05})["engine"]
        try:
            publish(
                Delivery.from_url(server.url), "full", {"w0": [item(f"p{i}", 0, 20_000) for i in range(2)]}
            )
            session = WorkerSession(
                Delivery.from_url(server.url),
                Holdings(2),
                SessionSettings("w0", heartbeat_interval_s=0.1, retry_for_s=0.5),
            )
            runner = Sidecar(
                session,
                EngineClient.open(EngineOptions(engine)),
                RunnerSettings(idle_poll_s=0.02, drain_timeout_s=0.5),
            )
            with probes_of(runner) as app:
                ready: list[int] = []

                def killed_while_full() -> bool:
                    if not ready and runner.redis_up and runner.session.holdings.free_slots() == 0:
                        ready.append(app.get("/ready").status_code)
                        server.kill()
                    return bool(ready) and session.heartbeats_failing

                run_until(runner, killed_while_full)
                assert ready == [200]
                assert app.get("/ready").status_code == 503
                assert app.get("/ready").json()["redis_up"] is False
        finally:
            server.stop()


def test_the_metrics_say_whether_redis_answers_as_the_readiness_probe_does(
    redis_url: str, tmp_path: Path
) -> None:
    """A sidecar cut off from Redis claims nothing: its metrics said so only by counters standing
    still, while ``engine_up`` answered for its engine."""
    with cluster(tmp_path) as procs:
        runner = _sidecar(redis_url, engine_url=procs.engine_threads({"engine": 0.01})["engine"])
        assert 'rollout_sidecar_redis_up{worker_id="w0"} 0.0' in exposition(runner, "w0").decode()
        run_until(runner, lambda: runner.redis_up)
        assert 'rollout_sidecar_redis_up{worker_id="w0"} 1.0' in exposition(runner, "w0").decode()
