"""One absurd report (a clock error, a stalled engine) must not steer the next plan."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.service.api_helpers import actual_report, batch_body


def _items(answer: dict[str, object]) -> dict[str, int]:
    assignments = answer["assignments"]
    assert isinstance(assignments, dict)
    return {worker: len(queue) for worker, queue in assignments.items()}


def test_one_absurdly_fast_first_report_does_not_give_its_worker_the_whole_step(client: TestClient) -> None:
    client.post("/schedule", json=batch_body(workers=4))
    fast = actual_report(0, 3, 0, worker="w2", slowdown=1e-6)  # wall time read in the wrong unit
    client.post("/actuals", json={"actuals": [fast]})
    answer = client.post("/schedule", json=batch_body(workers=4)).json()
    assert answer["time_scale_sources"]["w2"] == "profile"
    assert _items(answer)["w2"] < 32


def test_one_absurdly_slow_first_report_does_not_starve_its_worker(client: TestClient) -> None:
    client.post("/schedule", json=batch_body(workers=4))
    client.post("/actuals", json={"actuals": [actual_report(0, 3, 0, worker="w0", slowdown=1e6)]})
    step = [actual_report(0, p, 1, worker="w0") for p in range(8)]  # the worker's real step, on time
    learned = client.post("/actuals", json={"actuals": step}).json()["time_scales"]["w0"]
    assert learned < 2.0  # the mean of nine reports, not the first one's 50x carried forward


def test_one_absurd_report_moves_a_learned_speed_little(client: TestClient) -> None:
    client.post("/schedule", json=batch_body(workers=2))
    client.post("/actuals", json={"actuals": [actual_report(0, p, 0, worker="w0") for p in range(8)]})
    stall = actual_report(0, 3, 1, worker="w0", slowdown=1e6)
    assert client.post("/actuals", json={"actuals": [stall]}).json()["time_scales"]["w0"] < 1.3


def test_one_stalled_report_among_a_steps_moves_its_batch_little(client: TestClient) -> None:
    """A batch's sample is its measured over its modelled seconds, where one report 50x late (a
    paused sidecar, a stalled engine) alone would add half its weight's share to the whole batch."""
    client.post("/schedule", json=batch_body(workers=2))
    on_time = [actual_report(0, p, i, worker="w0") for p in range(8) for i in range(3)]
    stall = actual_report(0, 3, 3, worker="w0", slowdown=1e6)
    learned = client.post("/actuals", json={"actuals": [*on_time, stall]}).json()["time_scales"]["w0"]
    assert learned < 1.2
