"""The replay's figures, worked by hand on a pool small enough to follow: an H100 and an Ascend 910B,
one slot each, and six equal trajectories (100-token prompts, 2,000 output tokens).

With one slot a worker runs one trajectory at a time, so each takes its worker's single-sequence
time, ``prefill(100)`` plus 2,000 decode steps at one sequence (``t_h`` on the H100, ``t_a`` ~1.81x
as long on the 910B). Round robin deals three to each: the 910B ends last, at ``3 t_a``. With
stealing the H100, its own three done at ``3 t_h`` while the 910B still runs its second, takes the
910B's third from the tail and ends at ``4 t_h`` (< ``3 t_a``); a shared queue (least loaded) plays
the same, stealing or not. The bound is the throughput limit: 12,000 tokens at the two workers'
one-slot peak rates. The summary of several steps combines the steps' plays as docs/replay.md's
metrics table says, and the table shows what ``--json`` gives.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from predictors.tracetable import Trace
from scheduler.costmodel import WorkerCost, worker_cost
from scheduler.simulator import SimResult
from scheduler.trace import TraceRow
from service.replay.harness import ReplayConfig, ReplayReport, replay
from service.replay.report import COLUMNS, headline, table_rows
from service.replay.workers import worker_rows
from service.workerspec import parse_workers

POOL = parse_workers("1xH100:1,1xAscend910B:1", model="7b")
PROMPT, OUTPUT, COUNT = 100, 2_000, 6
POLICIES = ("round_robin", "least_loaded", "lpt")


def _rows(step: int) -> list[TraceRow]:
    if step < 2:  # steps 0 (history) and 1 (the hand-worked step): six equal trajectories
        return [TraceRow(step, f"q{i}", 0, PROMPT, OUTPUT) for i in range(COUNT)]
    return [TraceRow(step, f"q{i}", 0, PROMPT, 500 + 700 * i) for i in range(4)]  # another mix


@pytest.fixture(scope="module")
def report() -> ReplayReport:
    trace = Trace.from_rows([row for step in (0, 1, 2) for row in _rows(step)])
    config = ReplayConfig(POOL, POLICIES, (1, 2), steal_modes=(False, True), time_budget_s=0.2)
    return replay(trace, config)


def _alone(cost: WorkerCost) -> float:
    """One trajectory alone on a worker: its prefill, then every decode step at one sequence."""
    return cost.prefill_time(PROMPT) + sum(cost.step_time(1, PROMPT + k) for k in range(OUTPUT))


def _held_alone(cost: WorkerCost) -> float:
    """The KV one trajectory alone holds, in token-seconds: its prompt over the prefill, then
    ``PROMPT + k`` tokens over decode step ``k``."""
    steps = sum((PROMPT + k) * cost.step_time(1, PROMPT + k) for k in range(OUTPUT))
    return PROMPT * cost.prefill_time(PROMPT) + steps


def test_round_robin_on_one_slot_each_ends_at_three_runs_of_the_slower_worker(report: ReplayReport) -> None:
    h100, ascend = (worker_cost(w, POOL.model) for w in POOL.workers)
    t_h, t_a = _alone(h100), _alone(ascend)
    played = report.steps[0].runs[("round_robin", False)].result
    assert played.makespan_s == pytest.approx(3 * t_a, rel=1e-9)
    assert played.steals == 0
    assert played.bubble_ratio == pytest.approx((3 * t_a - 3 * t_h) / (2 * 3 * t_a), rel=1e-9)
    assert played.tokens_per_s == pytest.approx(COUNT * OUTPUT / (3 * t_a), rel=1e-9)


def test_the_faster_worker_steals_the_slower_ones_last_trajectory_and_ends_at_four_of_its_runs(
    report: ReplayReport,
) -> None:
    h100, ascend = (worker_cost(w, POOL.model) for w in POOL.workers)
    t_h, t_a = _alone(h100), _alone(ascend)
    assert 3 * t_h < 2 * t_a  # the 910B's third is still queued when the H100 runs dry
    assert 4 * t_h < 3 * t_a  # and the H100 ends it sooner
    step = report.steps[0]
    for run in (("round_robin", True), ("least_loaded", False), ("least_loaded", True)):
        played = step.runs[run].result
        assert played.makespan_s == pytest.approx(4 * t_h, rel=1e-9), run
        assert sorted(played.worker_busy_s.values()) == pytest.approx([2 * t_a, 4 * t_h], rel=1e-9), run
        assert played.bubble_ratio == pytest.approx((4 * t_h - 2 * t_a) / (2 * 4 * t_h), rel=1e-9), run
    assert step.runs[("round_robin", True)].result.steals == 1
    assert [i.stolen for i in step.runs[("round_robin", True)].result.items] == [False] * 5 + [True]


def test_the_bound_of_one_slot_workers_is_every_token_at_their_one_sequence_peak_rates(
    report: ReplayReport,
) -> None:
    h100, ascend = (worker_cost(w, POOL.model) for w in POOL.workers)
    peak = 1 / h100.step_time(1, 0.0) + 1 / ascend.step_time(1, 0.0)
    assert report.steps[0].lower_bound_s == pytest.approx(COUNT * OUTPUT / peak, rel=1e-9)
    assert report.steps[0].lower_bound_s <= 4 * _alone(h100)


@pytest.mark.parametrize("steal", [False, True])
def test_the_summary_combines_the_steps_as_the_metrics_table_says(report: ReplayReport, steal: bool) -> None:
    """docs/replay.md, Metrics: makespans, tail times, evictions and steals summed over steps;
    bubble and KV use averaged; speed-ups and the bound ratio ratios of the summed makespans."""
    steps = report.steps
    total = {name: sum(s.runs[(name, steal)].result.makespan_s for s in steps) for name in POLICIES}
    for name, summary in report.summary(steal).items():
        runs = [s.runs[(name, steal)] for s in steps]
        assert summary.makespan_s == pytest.approx(total[name])
        assert summary.tail_time_s == pytest.approx(sum(r.result.tail_time_s for r in runs))
        assert summary.preemptions == sum(r.result.preemptions for r in runs)
        assert summary.steals == sum(r.result.steals for r in runs)
        assert summary.bubble_ratio == pytest.approx(np.mean([r.result.bubble_ratio for r in runs]))
        assert summary.kv_use == pytest.approx(np.mean([r.kv_use for r in runs]))
        assert summary.speedup_vs_round_robin == pytest.approx(total["round_robin"] / total[name])
        assert summary.speedup_vs_least_loaded == pytest.approx(total["least_loaded"] / total[name])
        bound = sum(s.lower_bound_s for s in steps)
        assert summary.ratio_to_lower_bound == pytest.approx(total[name] / bound)
    assert report.summary(True)["round_robin"].steals >= 1  # step 1's steal is in the sum


# Each column of the table and the ``--json`` figure it shows.
SHOWN = {
    "makespan s": "makespan_s",
    "x round_robin": "speedup_vs_round_robin",
    "x least_loaded": "speedup_vs_least_loaded",
    "/ lower bound": "ratio_to_lower_bound",
    "bubble": "bubble_ratio",
    "tokens/s": "tokens_per_s",
    "tail s": "tail_time_s",
    "KV use": "kv_use",
    "preempted": "preemptions",
    "steals": "steals",
    "plan s": "plan_wall_s",
}


@pytest.mark.parametrize("steal", [False, True])
def test_the_table_shows_every_figure_the_json_gives_each_policy(report: ReplayReport, steal: bool) -> None:
    """The evictions and steals were in ``--json`` only: a replay's tables with stealing on and off
    could read the same with nothing to say that no policy had stolen."""
    policies = report.to_json(steal)["policies"]
    assert isinstance(policies, dict)
    assert list(COLUMNS) == ["policy", *SHOWN]
    assert set(SHOWN.values()) == set(next(iter(policies.values())))
    for row in table_rows(report, steal):
        figures = policies[row[0]]
        for column, cell in zip(COLUMNS[1:], row[1:], strict=True):
            decimals = len(cell.partition(".")[2])
            assert float(cell.replace(",", "")) == pytest.approx(
                figures[SHOWN[column]], abs=0.5 * 10**-decimals + 1e-12
            ), (row[0], column)
    steals = {row[0]: row[COLUMNS.index("steals")] for row in table_rows(report, steal)}
    assert steals["round_robin"] == ("1" if steal else "0")


def _many(result: SimResult) -> SimResult:
    """``result`` with 12,345 evictions and 1,234 steals."""
    return dataclasses.replace(result, preemptions=12_345, steals=1_234)


def test_the_tables_evictions_and_steals_in_thousands_are_written_as_its_other_figures(
    report: ReplayReport,
) -> None:
    # a replay of the real traces evicts thousands of times: 12,345 as the makespans and tokens/s
    # write their thousands, not 12345
    step = report.steps[0]
    runs = {key: dataclasses.replace(run, result=_many(run.result)) for key, run in step.runs.items()}
    many = dataclasses.replace(report, steps=(dataclasses.replace(step, runs=runs),))
    for steal in (False, True):
        for row in table_rows(many, steal):
            assert (row[COLUMNS.index("preempted")], row[COLUMNS.index("steals")]) == ("12,345", "1,234")


def test_the_headline_counts_the_steps_it_names(report: ReplayReport) -> None:
    # A one-step replay was titled "steps 1: 6 trajectories ...", as docs/benchmarks.md's real-data
    # tables still read.
    one = dataclasses.replace(report, steps=report.steps[:1])
    assert headline(one, True).startswith("step 1: 6 trajectories on 1xH100:1,1xAscend910B:1 (7b), ")
    assert headline(report, True).startswith("steps 1, 2: 10 trajectories on ")


def test_kv_use_is_the_kv_each_worker_held_over_its_cache_and_the_time(report: ReplayReport) -> None:
    """Round robin runs three trajectories one after another on each worker: each worker holds three
    times one trajectory's KV; its row's KV use is that over its cache and its finish, the pool's is
    both workers' over the pool's cache and the makespan."""
    costs = [worker_cost(w, POOL.model) for w in POOL.workers]
    step = report.steps[0]
    run = step.runs[("round_robin", False)]
    held = [3 * _held_alone(cost) for cost in costs]
    assert list(run.result.worker_kv_token_s.values()) == pytest.approx(held, rel=1e-9)
    rows = worker_rows(step, "round_robin", False, POOL)
    for row, cost, kv in zip(rows, costs, held, strict=True):
        assert row.kv_use == pytest.approx(kv / (cost.kv_capacity_tokens * 3 * _alone(cost)), rel=1e-9)
    capacity = sum(cost.kv_capacity_tokens for cost in costs)
    assert run.kv_use == pytest.approx(sum(held) / (capacity * 3 * _alone(costs[1])), rel=1e-9)


def test_kv_use_stays_a_share_of_the_cache_on_a_step_that_evicts() -> None:
    """Twelve 20,000 + 20,000-token trajectories on one H100 under 14b: the cache (243,679 tokens)
    holds twelve prompts but six finished ones, so round robin's vLLM admission evicts. KV use
    counted each trajectory at its prompt plus half its output from first admission to end, waits
    and lost progress included: 1.137. The KV held, integrated over the play, is 0.864 of it."""
    rows = [TraceRow(step, f"q{i}", 0, 20_000, 20_000) for step in (0, 1) for i in range(12)]
    pool = parse_workers("1xH100", model="14b")
    config = ReplayConfig(pool, ("round_robin",), (1,), steal_modes=(False,), time_budget_s=0.2)
    run = replay(Trace.from_rows(rows), config).steps[0].runs[("round_robin", False)]
    assert run.result.preemptions == 10
    capacity = worker_cost(pool.workers[0], pool.model).kv_capacity_tokens
    held = run.result.worker_kv_token_s["h100-0"]
    assert run.kv_use == pytest.approx(held / (capacity * run.result.makespan_s))
    assert run.kv_use == pytest.approx(0.8636, abs=1e-4)
