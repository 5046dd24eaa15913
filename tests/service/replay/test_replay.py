"""The replay harness: fair, deterministic, leakage-free, and strict about what it is asked."""

from __future__ import annotations

import dataclasses
import inspect
import re
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest

from predictors.predictor import LengthPredictor
from predictors.traceio import read_trace
from predictors.tracetable import Trace
from scheduler.costmodel import worker_cost
from scheduler.devices import device_profile
from scheduler.errors import InvalidInputError
from scheduler.simulator import SimOptions, simulate, with_engine
from scheduler.types import Inventory, Worker
from service.replay.harness import ORACLE, ReplayConfig, ReplayReport, parse_policies, replay
from service.replay.report import headline
from service.replay.steps import select_steps
from service.settings import Settings
from service.workerspec import parse_workers
from tests.scheduler.fake_clock import SteppingClock

POOL = parse_workers("2xH100,1xAscend910B", model="7b")


def _config(policies: tuple[str, ...], steps: tuple[int, ...], **kwargs: object) -> ReplayConfig:
    settings: dict[str, object] = {"time_budget_s": 0.2, **kwargs}
    return ReplayConfig(POOL, policies, steps, **settings)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def report(small_trace: Trace) -> ReplayReport:
    policies = ("round_robin", "least_loaded", "lpt", "cpsat", ORACLE)
    return replay(small_trace, _config(policies, (1, 2), steal_modes=(False, True)))


@pytest.mark.parametrize("steal", [False, True])
def test_each_baseline_has_a_speedup_of_one_over_itself(report: ReplayReport, steal: bool) -> None:
    summary = report.summary(steal)
    assert summary["round_robin"].speedup_vs_round_robin == pytest.approx(1.0)
    assert summary["least_loaded"].speedup_vs_least_loaded == pytest.approx(1.0)


@pytest.mark.parametrize("steal", [False, True])
def test_no_policy_beats_the_lower_bound_of_the_true_lengths(report: ReplayReport, steal: bool) -> None:
    for name, s in report.summary(steal).items():
        assert s.ratio_to_lower_bound >= 1.0 - 1e-9, name
        assert 0.0 <= s.bubble_ratio <= 1.0, name


def test_empty_outputs_in_a_trace_do_not_push_the_bound_past_the_plays(small_trace: Trace) -> None:
    """A trace may record an output of 0 tokens; the bound counts it one step, so the plays must."""
    empty = dataclasses.replace(small_trace, output_tokens=np.zeros(len(small_trace), dtype=np.int64))
    result = replay(empty, _config(("round_robin", "lpt", ORACLE), (1,)))
    for name, s in result.summary(True).items():
        assert s.ratio_to_lower_bound >= 1.0 - 1e-9, name


def test_summed_figures_add_up_over_steps(report: ReplayReport) -> None:
    s = report.summary(True)["lpt"]
    makespans = [step.runs[("lpt", True)].result.makespan_s for step in report.steps]
    assert s.makespan_s == pytest.approx(sum(makespans))
    tokens = sum(step.output_tokens for step in report.steps)
    assert s.tokens_per_s == pytest.approx(tokens / sum(makespans))
    assert report.lower_bound_s == pytest.approx(sum(step.lower_bound_s for step in report.steps))


def test_the_json_has_the_bound_and_every_figure_per_policy(report: ReplayReport) -> None:
    out = report.to_json(True)
    assert out["lower_bound_s"] == pytest.approx(report.lower_bound_s)
    policies = out["policies"]
    assert isinstance(policies, dict)
    assert set(policies) == {"round_robin", "least_loaded", "lpt", "cpsat", ORACLE}
    for figures in policies.values():
        for key in ("makespan_s", "bubble_ratio", "speedup_vs_round_robin", "speedup_vs_least_loaded"):
            assert key in figures
        for key in ("ratio_to_lower_bound", "tokens_per_s", "tail_time_s"):
            assert key in figures


def _documented_json() -> tuple[list[str], list[str]]:
    """docs/replay.md's ``--json`` object: its keys in order, and each policy's figures in order."""
    text = (Path(__file__).resolve().parents[3] / "docs" / "replay.md").read_text()
    shown = " ".join(text.split("- `--json`: `", 1)[1].split("}}}`", 1)[0].split())
    top, _, figures = shown.partition("{name: {")
    return re.findall(r'"([a-z_]+)"', top), re.findall(r"[a-z_]+", figures)


def test_the_json_has_the_keys_and_figures_docs_replay_md_lists_in_its_order(report: ReplayReport) -> None:
    """A script reads the JSON by the doc's keys: ``engine`` (2026-12-04) was added to both by hand."""
    out = report.to_json(True)
    keys, figures = _documented_json()
    assert list(out) == keys
    policies = out["policies"]
    assert isinstance(policies, dict)
    assert [list(f) for f in policies.values()] == [figures] * len(policies)


def test_the_oracle_plans_on_the_true_lengths(report: ReplayReport) -> None:
    """Planned on the lengths it is played with, the oracle's forecast is its play, worker by worker
    (docs/simulator.md, "Agreement with the planner": 1e-9); a plan made on predictions is not. Until
    2026-12-07 this test checked only the policy's name and that predictions erred, which held with
    the oracle planning on the predictions too (audit61b)."""
    for step in report.steps:
        assert step.prediction_mae > 0  # the other policies did not see the truth
        for steal in (False, True):
            oracle, lpt = step.runs[(ORACLE, steal)], step.runs[("lpt", steal)]
            assert oracle.plan.policy == "cpsat"
            for worker in oracle.plan.workers:
                played = oracle.result.worker_finish_s[worker.worker_id]
                assert played == pytest.approx(worker.predicted_finish_s, rel=1e-9, abs=1e-9)
            assert oracle.result.makespan_s == pytest.approx(oracle.plan.predicted_makespan_s, rel=1e-9)
            assert lpt.result.makespan_s != pytest.approx(lpt.plan.predicted_makespan_s, rel=1e-3)


def test_a_replay_is_deterministic_apart_from_wall_times(small_trace: Trace) -> None:
    config = _config(("lpt",), (2,))

    def figures(report: ReplayReport) -> dict[str, object]:
        return {k: v for k, v in asdict(report.summary(True)["lpt"]).items() if k != "plan_wall_s"}

    assert figures(replay(small_trace, config)) == figures(replay(small_trace, config))


def test_a_replay_gives_the_same_figures_on_a_host_so_loaded_each_step_seems_to_take_a_second(
    small_trace: Trace, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = _config(("lpt", "cpsat"), (2,))

    def figures(report: ReplayReport) -> dict[str, dict[str, object]]:
        summary = report.summary(True).items()
        return {name: {k: v for k, v in asdict(s).items() if k != "plan_wall_s"} for name, s in summary}

    idle = figures(replay(small_trace, config))
    monkeypatch.setattr(time, "perf_counter", SteppingClock(start=-1e6).now)
    assert figures(replay(small_trace, config)) == idle
    loaded_on_the_wall = figures(replay(small_trace, dataclasses.replace(config, wall_clock=True)))
    assert loaded_on_the_wall != idle  # the service's clock gives up phases on such a host


def test_a_step_is_planned_without_seeing_its_own_or_later_lengths(small_trace: Trace) -> None:
    altered = small_trace.take(np.arange(len(small_trace)))
    later = altered.step >= 1
    object.__setattr__(altered, "output_tokens", np.where(later, 1, altered.output_tokens))
    config = _config(("lpt",), (1,))
    original = replay(small_trace, config).steps[0].runs[("lpt", True)].plan
    changed = replay(altered, config).steps[0].runs[("lpt", True)].plan
    assert original.assignments() == changed.assignments()


def test_progress_is_reported_once_per_unit_of_work(small_trace: Trace) -> None:
    from service.replay.harness import work_units

    config = _config(("lpt",), (1, 2))
    labels: list[str] = []
    replay(small_trace, config, labels.append)
    assert len(labels) == work_units(config)


@pytest.mark.parametrize(
    ("text", "expected"), [("1-2", (1, 2)), ("2", (2,)), ("0,2", (0, 2)), ("1-", (1, 2)), (None, (0, 1, 2))]
)
def test_step_ranges_select_the_steps_present(
    small_trace: Trace, text: str | None, expected: tuple[int, ...]
) -> None:
    assert select_steps(small_trace, text) == expected


@pytest.mark.parametrize("text", ["7-9", "a", "3-1", "-2", "0_2", "\u0662", "0-\u0662"])
def test_a_step_range_without_rows_or_malformed_is_refused(small_trace: Trace, text: str) -> None:
    with pytest.raises(InvalidInputError, match="steps"):
        select_steps(small_trace, text)


def test_a_step_range_without_rows_names_the_one_step_a_trace_has(small_trace: Trace) -> None:
    # It said "(it has steps 0-0)".
    one_step = small_trace.take(small_trace.step == small_trace.step.min())
    with pytest.raises(InvalidInputError, match=r"selects no step of the trace \(it has step 0\)$"):
        select_steps(one_step, "7-9")


@pytest.mark.parametrize(
    ("text", "named"),
    [("1,5", "5 selects"), ("0,5,7-9", "5 and 7-9 select"), ("5,1-", "5 selects"), ("2, 3-", "3- selects")],
)
def test_each_listed_step_or_range_without_rows_is_refused_by_name(
    small_trace: Trace, text: str, named: str
) -> None:
    # --steps 1,5 on a trace without step 5 replayed step 1 and said nothing of 5.
    with pytest.raises(InvalidInputError, match=rf"{named} no step of the trace \(it has steps 0-2\)$"):
        select_steps(small_trace, text)


def test_a_range_with_a_gap_plays_the_steps_it_holds(small_trace: Trace) -> None:
    gapped = small_trace.take(small_trace.step != 1)
    assert select_steps(gapped, "0-2") == (0, 2)
    with pytest.raises(InvalidInputError, match=r"1 selects no step of the trace \(it has steps 0,2\)$"):
        select_steps(gapped, "0-2,1")


@pytest.mark.parametrize("text", ["", "  "])
def test_an_empty_step_range_is_refused_not_read_as_every_step(small_trace: Trace, text: str) -> None:
    # --steps "$STEPS" with STEPS unset replayed every step of the trace (minutes on a long one), where
    # --workers "" is refused as empty.
    with pytest.raises(InvalidInputError, match=r"steps=.*empty"):
        select_steps(small_trace, text)


def test_policies_are_checked_against_the_registry() -> None:
    assert parse_policies("lpt, oracle") == ("lpt", ORACLE)
    assert "cpsat" in parse_policies("all")
    with pytest.raises(InvalidInputError, match="policies"):
        parse_policies("lpt,magic")


@pytest.mark.parametrize("text", ["lpt,,cpsat", "lpt,", ",lpt", "lpt, ,cpsat"])
def test_an_empty_policy_item_is_refused_as_workers_and_steps_refuse_one(text: str) -> None:
    """It was skipped: a stray comma, or a name lost in a script's join, ran the others without a word."""
    with pytest.raises(InvalidInputError) as refused:
        parse_policies(text)
    assert str(refused.value).startswith(f"policies={text!r}: ")


@pytest.mark.parametrize(("text", "repeated"), [("lpt,lpt", "lpt"), ("cpsat, lpt,cpsat", "cpsat")])
def test_a_policy_named_twice_is_refused_naming_the_flag_and_the_value(text: str, repeated: str) -> None:
    """The repeat was dropped without a word: a name typed twice may stand for another left out."""
    with pytest.raises(InvalidInputError) as refused:
        parse_policies(text)
    assert str(refused.value) == f"policies={text!r}: names {repeated} more than once; each is played once"


def test_the_engine_named_plays_every_plan_by_its_rules_and_lpt_plans_for_it(small_trace: Trace) -> None:
    """Each plan is played by the named engine's rules (the JSON says which), on caches small enough
    to evict. The length-blind plans are the same in both engines; lpt's, under vLLM admission, is
    told the engine and judges its orders on draws played by its rules (``robust_order.draw_rules``):
    here V1's judging reorders a queue."""
    workers = tuple(Worker(f"w{i}", device_profile("H100"), kv_capacity_tokens=60_000) for i in range(2))
    pool = Inventory(workers, POOL.model)
    reports = {
        engine: replay(small_trace, ReplayConfig(pool, ("lpt",), (2,), time_budget_s=0.2, kv_admission=False,
                                                 steal_modes=(False,), engine=engine))
        for engine in ("vllm-v0", "vllm-v1")
    }  # fmt: skip
    v0, v1 = (reports[e].steps[0] for e in ("vllm-v0", "vllm-v1"))
    assert reports["vllm-v1"].to_json(False)["engine"] == "vllm-v1"
    assert ", played as vllm-v1, " in headline(reports["vllm-v1"], False)
    assert "played as" not in headline(reports["vllm-v0"], False)  # the default goes unsaid
    for name in ("round_robin", "least_loaded", "lpt"):
        played, before = v1.runs[(name, False)], v0.runs[(name, False)]
        assert (played.plan.workers == before.plan.workers) is (name != "lpt")
        assert played.result.makespan_s != before.result.makespan_s  # evictions played otherwise
        options = with_engine(SimOptions(kv_admission=played.plan.kv_admission), "vllm-v1")
        actual = {r.key: r.output_tokens for r in played.result.items}
        assert played.result == simulate(played.plan, v1.batch, actual, pool, options)


def test_kv_use_is_a_share_of_the_cache_when_nothing_is_preempted(small_trace: Trace) -> None:
    reserved = replay(small_trace, _config(("lpt",), (2,), kv_admission=True, steal_modes=(False,)))
    run = reserved.steps[0].runs[("lpt", False)]
    assert run.plan.kv_admission
    assert run.result.preemptions == 0  # KV admission reserves, so nothing is evicted
    assert 0.0 < run.kv_use <= 1.0


def test_on_real_math100_cpsat_keeps_the_plan_the_quantiles_expect_to_finish_first(shared_data: Path) -> None:
    trace = read_trace(shared_data / "math100_x8.trace.csv")
    pool = parse_workers("4xH100", model="7b")
    config = ReplayConfig(pool, ("lpt", "cpsat"), (1,), time_budget_s=2.0)
    step = replay(trace, config).steps[0]
    cpsat, lpt = step.runs[("cpsat", True)], step.runs[("lpt", True)]
    assert cpsat.plan.status == "ROBUST_LPT"  # its band plan was 4% faster on the predictions only
    assert cpsat.result.makespan_s <= lpt.result.makespan_s


def test_on_real_math100_a_mixed_pool_keeps_the_batch_off_the_slow_kind_or_plans_round_robins(
    shared_data: Path,
) -> None:
    """Step 1 fits the pool's slots, so every sample starts at once and the makespan is one
    sample's time: the one predicted at 554 tokens that ran 2,107 ran on an Ascend 910B in the
    plan balanced on the predictions (30.5 s), where round_robin's split ran 16.7 s by luck. The
    at-once hedge keeps the batch on the H100s (17.2 s); the length-blind bar returns round
    robin's plan instead where that is expected to end sooner on the same draws (16.7 s)."""
    trace = read_trace(shared_data / "math100_x8.trace.csv")
    pool = parse_workers("2xH100,2xAscend910B", model="7b")
    step = replay(trace, ReplayConfig(pool, ("round_robin", "lpt", "cpsat"), (1,))).steps[0]
    blind = step.runs[("round_robin", True)]
    for policy in ("lpt", "cpsat"):
        run = step.runs[(policy, True)]
        off_slow = all(not w.items for w in run.plan.workers if w.worker_id.startswith("ascend"))
        barred = [w.items for w in run.plan.workers] == [w.items for w in blind.plan.workers]
        assert off_slow or barred
        assert run.result.makespan_s <= 1.05 * blind.result.makespan_s


def test_policies_played_in_worker_processes_give_what_they_give_in_turn(small_trace: Trace) -> None:
    """Whatever order the runs of all steps end in on the pool (they are played across steps,
    ``service.replay.pool``), the report is the one played in turn, in step and policy order."""
    policies = ("round_robin", "lpt", ORACLE)
    # a budget no plan of this small batch comes near, so no search is cut short in either run
    serial = replay(small_trace, _config(policies, (0, 1, 2), time_budget_s=20.0))
    labels: list[str] = []
    config = _config(policies, (0, 1, 2), time_budget_s=20.0, processes=2)
    parallel = replay(small_trace, config, labels.append)
    assert [s.step for s in parallel.steps] == [0, 1, 2]
    for one, other in zip(serial.steps, parallel.steps, strict=True):
        assert list(one.runs) == list(other.runs)
        assert one.batch == other.batch
        for key, run in one.runs.items():
            assert run.plan.workers == other.runs[key].plan.workers
            assert run.result.makespan_s == other.runs[key].result.makespan_s
    assert _without_plan_times(serial.to_json(True)) == _without_plan_times(parallel.to_json(True))
    assert sorted(labels) == sorted([f"step {s}: predicted" for s in (0, 1, 2)] + [
        f"step {s}: {name}" for s in (0, 1, 2) for name in ("round_robin", "least_loaded", "lpt", ORACLE)
    ])  # fmt: skip


def _without_plan_times(summary: dict[str, object]) -> dict[str, object]:
    """A ``to_json`` object less ``plan_wall_s``, the one figure the host's speed sets."""
    policies = summary["policies"]
    assert isinstance(policies, dict)
    trimmed = {
        name: {k: v for k, v in figures.items() if k != "plan_wall_s"} for name, figures in policies.items()
    }
    return {**summary, "policies": trimmed}


@pytest.mark.parametrize("budget", [0.0, -1.0, float("nan"), float("inf")])
def test_a_bad_time_budget_is_refused_before_any_step_is_fitted(small_trace: Trace, budget: float) -> None:
    """The planner refused it only at the first plan, after that step's predictor fit."""
    labels: list[str] = []
    with pytest.raises(InvalidInputError, match="time_budget_s"):
        replay(small_trace, _config(("lpt",), (1, 2), time_budget_s=budget), labels.append)
    assert labels == []


def test_a_trajectory_no_worker_can_hold_is_refused_by_step_and_prompt_before_any_fit(
    small_trace: Trace,
) -> None:
    """The planner refused it only when its step came up, after the earlier steps had been replayed,
    naming ``trajectories[i]`` of a batch the user never sees rather than the trace's row."""
    largest = max(worker_cost(w, POOL.model).kv_capacity_tokens for w in POOL.workers)
    row = int(np.flatnonzero(small_trace.step == 2)[3])
    prompts = small_trace.prompt_tokens.copy()
    prompts[row] = largest  # with any cap >= 1, prompt + cap exceeds every worker's KV cache
    too_long = dataclasses.replace(small_trace, prompt_tokens=prompts)
    labels: list[str] = []
    with pytest.raises(InvalidInputError) as caught:
        replay(too_long, _config(("lpt",), (1, 2)), labels.append)
    message = str(caught.value)
    prompt, sample = str(small_trace.prompt_id[row]), int(small_trace.sample_idx[row])
    assert f"step 2, prompt {prompt!r}, sample {sample}" in message
    assert f"{largest:,}" in message
    assert labels == []


def test_the_service_the_replay_and_the_predictor_default_to_one_planning_quantile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a caller of LengthPredictor.predict that leaves the quantile out plans on what the service and
    # the replay plan on (it was p90 while both planned on p50)
    monkeypatch.delenv("ROLLOUT_DEFAULT_QUANTILE", raising=False)
    default = inspect.signature(LengthPredictor.predict).parameters["quantile"].default
    assert Settings().default_quantile == default
    assert _config(("lpt",), (1,)).quantile == default
