"""Offline replay: what each policy would have made of a recorded (or synthetic) rollout history.

For each replayed step: fit the length predictor on the EARLIER steps only, plan the step's batch
with every policy on the predicted lengths, then play each plan against the TRUE lengths in the
simulator, with and/or without work stealing. ``oracle`` is ``cpsat`` planning on the true lengths:
the best this planner could do with a perfect predictor. The lower bound is computed on the true
lengths, so "ratio to the lower bound" is distance from the physical limit of the batch that really
ran. Deterministic: fixed seeds for the predictor and the planner, and the planner's budget read on
a frozen clock (``scheduler.clock``), so the same trace and seed give the same figures on any host,
loaded or not. Metric definitions: docs/replay.md.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Executor
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, fields

import numpy as np

from predictors.model import FitConfig
from predictors.quantiles import PLANNING_QUANTILE
from predictors.synthetic import is_synthetic
from predictors.tracetable import Trace
from scheduler import clock
from scheduler.costmodel import worker_cost
from scheduler.errors import InvalidInputError
from scheduler.lowerbound import lower_bound
from scheduler.planner import plan
from scheduler.policies import POLICY_NAMES
from scheduler.sim_rules import DEFAULT_ENGINE
from scheduler.simulator import SimOptions, SimResult, simulate, with_engine
from scheduler.types import Inventory, Plan, PlanRequest, Trajectory
from service.interrupts import quiet_pool
from service.replay.batches import PreparedStep, prepare_step, true_lengths
from service.replay.pool import Job, ShippedBatch, new_replay_id, pack, play_pipelined, unpack
from service.replay.steps import check_fits
from service.workerspec import pool_label

ORACLE = "oracle"  # cpsat given the true lengths
ORACLE_POLICY = "cpsat"
BASELINES = ("round_robin", "least_loaded")  # length-blind: what speed-ups are measured against
LENGTH_BLIND = frozenset(BASELINES)

Progress = Callable[[str], None]  # called once per finished unit of work, with a label


@dataclass(frozen=True, slots=True)
class ReplayConfig:
    """What to replay and how."""

    inventory: Inventory  # the worker pool and model
    policies: tuple[str, ...]  # policies to report (``oracle`` included by name)
    steps: tuple[int, ...]  # steps to replay, ascending; each is predicted from the steps before it
    steal_modes: tuple[bool, ...] = (True,)  # simulate each plan with (True) and/or without stealing
    kv_admission: bool = True  # length-aware plans admit by projected KV peak (the CLI's default too)
    engine: str = DEFAULT_ENGINE  # the rules every plan is played by (``scheduler.sim_rules``):
    # ``vllm-v0`` (the planner's finish model) or ``vllm-v1`` (no watermark, evictions keep output);
    # the length-aware plans are told it (``PlanRequest.engine``: their hedges' draws)
    quantile: float = PLANNING_QUANTILE  # predicted quantile the planner plans on
    time_budget_s: float = 4.0  # per-plan budget, on a frozen clock (``scheduler.clock``): it sets only
    # CP-SAT's deterministic limits. ``wall_clock``: on the wall clock, as the service (figures vary)
    wall_clock: bool = False
    seed: int = 0  # planner seed
    fit_config: FitConfig | None = None  # predictor training settings; None: ``replay_fit_config``
    processes: int = 1  # policy runs (of every step) played at once in this many spawned worker processes;
    # 1: one after another in this process (same results either way). Above 1, a script that calls
    # ``replay`` must do so under ``if __name__ == "__main__":`` (spawned workers import it again)


@dataclass(frozen=True, eq=False)
class StepRun:
    """One policy's plan for one step, played in one stealing mode."""

    plan: Plan
    result: SimResult
    kv_use: float  # mean share of the pool's KV cache in use up to the makespan (``kv_use``)


@dataclass(frozen=True, eq=False)
class StepReplay:
    """Everything replayed for one step."""

    step: int
    trajectories: int
    lower_bound_s: float  # on the true lengths
    output_tokens: int  # true tokens generated in the step
    prediction_mae: float  # mean absolute error of the planned lengths, tokens
    runs: Mapping[tuple[str, bool], StepRun]  # (policy, steal) -> run
    batch: tuple[Trajectory, ...] = ()  # what the length-aware policies planned from (predicted
    # lengths); the oracle planned from the true ones (``SimResult.items``)
    history_rows: int | None = None  # rows of earlier steps its predictions learned from: 0 for a
    # trace's first; None: not recorded

    @property
    def unlearned(self) -> bool:
        """Whether no earlier step was there to learn from: its plans used the length prior alone."""
        return self.history_rows == 0


@dataclass(frozen=True, slots=True)
class PolicySummary:
    """One policy over all replayed steps (makespans and times summed, ratios averaged)."""

    makespan_s: float  # summed over steps
    bubble_ratio: float  # mean over steps of the idle share of GPU-seconds
    speedup_vs_round_robin: float  # round_robin's summed makespan / this policy's
    speedup_vs_least_loaded: float  # least_loaded's summed makespan / this policy's
    ratio_to_lower_bound: float  # summed makespan / summed lower bound
    tokens_per_s: float  # true output tokens of all steps / summed makespan
    tail_time_s: float  # summed over steps: what the last 10% of trajectories add
    plan_wall_s: float  # summed planning wall time
    kv_use: float  # mean over steps of the share of the pool's KV cache in use (the KV held)
    preemptions: int  # summed KV preemptions
    steals: int  # summed work-stealing moves


@dataclass(frozen=True, eq=False)
class ReplayReport:
    """A whole replay: per-step detail and the per-policy summary of each stealing mode."""

    config: ReplayConfig
    steps: tuple[StepReplay, ...]
    wall_s: float  # the replay's wall time
    synthetic: bool = False  # the trace carries the generator's label (``predictors.synthetic``)

    @property
    def lower_bound_s(self) -> float:
        """The true-length lower bound, summed over replayed steps."""
        return sum(s.lower_bound_s for s in self.steps)

    def summary(self, steal: bool) -> dict[str, PolicySummary]:
        """Per-policy summary in one stealing mode, in the configured policy order."""
        return {name: _summarize(self.steps, name, steal) for name in self.config.policies}

    def to_json(self, steal: bool) -> dict[str, object]:
        """The ``--json`` object: ``lower_bound_s`` and per-policy figures."""
        config = self.config
        return {
            "synthetic": self.synthetic,
            "workers": pool_label(config.inventory),  # what the table's title says, and the settings
            "model": config.inventory.model.name,  # its figures depend on, as stealing's
            "time_budget_s": config.time_budget_s,
            "wall_clock": config.wall_clock,
            "seed": config.seed,
            "lower_bound_s": self.lower_bound_s,
            "steal": steal,
            "kv_admission": config.kv_admission,
            "engine": config.engine,
            "steps": [s.step for s in self.steps],
            "trajectories": sum(s.trajectories for s in self.steps),
            "policies": {name: _as_dict(s) for name, s in self.summary(steal).items()},
        }


def parse_policies(text: str) -> tuple[str, ...]:
    """``"lpt,cpsat,oracle"`` -> names, checked against the registry; ``all`` names every policy.
    An empty item (``lpt,,cpsat``) or a repeated name (``lpt,lpt``) is refused, not skipped."""
    known = (*POLICY_NAMES, ORACLE) if ORACLE_POLICY in POLICY_NAMES else POLICY_NAMES
    names = known if text.strip() == "all" else tuple(n.strip() for n in text.split(","))
    if not any(names):
        raise InvalidInputError("policies", text, f"empty; expected some of {', '.join(known)}")
    if not all(names):  # as --workers and --steps refuse one: a stray comma may stand for a lost name
        raise InvalidInputError("policies", text, f"an empty item; expected names from {', '.join(known)}")
    for name in names:
        if name not in known:
            raise InvalidInputError("policies", name, f"unknown policy; expected some of {', '.join(known)}")
    repeated = next((name for position, name in enumerate(names) if name in names[:position]), None)
    if repeated is not None:  # was dropped without a word: a name typed twice may stand for one left out
        raise InvalidInputError("policies", text, f"names {repeated} more than once; each is played once")
    return names


def replay(trace: Trace, config: ReplayConfig, progress: Progress | None = None) -> ReplayReport:
    """Replay ``config.steps`` of ``trace``; ``progress`` is told after each plan and each fit."""
    if config.seed < 0:  # checked here, not first inside a worker process a step later
        raise InvalidInputError("seed", config.seed, "must be an integer >= 0")
    if not (math.isfinite(config.time_budget_s) and config.time_budget_s > 0):  # as above: before a fit
        raise InvalidInputError("time_budget_s", config.time_budget_s, "must be a positive finite number")
    check_fits(trace, config.steps, config.inventory)  # as above: not when its step comes up
    started = time.perf_counter()
    tick = progress or (lambda _label: None)
    with _pool(config) as pool:
        prepared = (_prepare(trace, step, config, tick) for step in config.steps)
        if pool is None:
            outcomes = tuple(_assemble(p, _play_in_turn(p, config, tick), config) for p in prepared)
        else:
            outcomes = _play_on_pool(prepared, config, tick, pool)
    wall_s = time.perf_counter() - started
    return ReplayReport(config=config, steps=outcomes, wall_s=wall_s, synthetic=is_synthetic(trace))


def _processes(config: ReplayConfig) -> int:
    """Worker processes the replay uses (1: none, it plays in this process)."""
    return min(config.processes, len(_all_policies(config)))


@contextmanager
def _pool(config: ReplayConfig) -> Iterator[Executor | None]:
    """Worker processes for the policy runs, or None to run them here in order.

    Each policy's plan and simulations depend only on the step's batch, so they run at once on the
    machine's cores (``service.replay.pool``): a 6-step replay of 4,096 x 16 took ~1.6x less wall
    time on 2 cores. Processes are spawned, not forked: the parent has LightGBM's threads running.
    """
    processes = _processes(config)
    if processes <= 1:
        yield None
        return
    with quiet_pool(processes) as pool:  # Ctrl-C: the workers stay quiet, the parent leaves at once
        yield pool


def work_units(config: ReplayConfig) -> int:
    """How many times ``replay`` calls ``progress``: one fit plus one per policy run, per step."""
    return len(config.steps) * (1 + len(_all_policies(config)))


def _all_policies(config: ReplayConfig) -> tuple[str, ...]:
    """Configured policies plus the baselines the speed-ups need (computed even when not reported)."""
    return tuple(dict.fromkeys((*BASELINES, *config.policies)))


def _prepare(trace: Trace, step: int, config: ReplayConfig, tick: Progress) -> PreparedStep:
    """``prepare_step`` with the config's predictor settings, then ``tick``."""
    prepared = prepare_step(trace, step, config.fit_config, config.quantile)
    tick(f"step {step}: predicted")
    return prepared


def _assemble(
    prepared: PreparedStep, played: Mapping[str, dict[bool, StepRun]], config: ReplayConfig
) -> StepReplay:
    """The step's record from its runs (``played``: policy -> steal -> run), in policy order."""
    rows = prepared.rows
    return StepReplay(
        step=prepared.step,
        trajectories=len(rows),
        lower_bound_s=lower_bound(prepared.truth, config.inventory).value_s,
        output_tokens=int(rows.output_tokens.sum()),
        prediction_mae=float(np.mean(np.abs(prepared.planned - rows.output_tokens))),
        runs={
            (name, steal): played[name][steal]
            for name in _all_policies(config)
            for steal in config.steal_modes
        },
        batch=prepared.predicted,
        history_rows=prepared.history_rows,
    )


def _play_in_turn(
    prepared: PreparedStep, config: ReplayConfig, tick: Progress
) -> dict[str, dict[bool, StepRun]]:
    """Every policy's runs of one step, here, one after another."""
    actual = true_lengths(prepared.truth)
    played = {}
    for name in _all_policies(config):
        batch = prepared.truth if name == ORACLE else prepared.predicted
        played[name] = _policy_runs(name, batch, actual, config)
        tick(f"step {prepared.step}: {name}")
    return played


def _play_on_pool(
    prepared: Iterator[PreparedStep], config: ReplayConfig, tick: Progress, pool: Executor
) -> tuple[StepReplay, ...]:
    """Every step's runs on ``pool``, each step's as soon as its batch exists (``replay_pool``)."""
    replay_id, steps = new_replay_id(), []

    def jobs(step: PreparedStep) -> list[Job]:
        steps.append(step)
        truth = pack(step.truth, 2 * len(steps), replay_id)
        predicted = pack(step.predicted, 2 * len(steps) + 1, replay_id)
        return [
            Job((step.step, name), (_cost_rank(name),), _shipped_runs,
                (name, truth if name == ORACLE else predicted, truth, config))
            for name in _all_policies(config)
        ]  # fmt: skip

    played = play_pipelined(
        pool,
        map(jobs, prepared),
        2 * _processes(config),
        lambda job: tick(f"step {job.key[0]}: {job.key[1]}"),
    )
    return tuple(
        _assemble(s, {name: played[(s.step, name)] for name in _all_policies(config)}, config) for s in steps
    )


def _cost_rank(policy: str) -> int:
    """Which runs the pool starts first: the longest (on the headline, per step on 2 loaded cores,
    cpsat ~10.7 s, lpt ~7.7 s, oracle ~6.5 s, a length-blind one ~0.6 s), so none is left alone at the end."""
    return {ORACLE_POLICY: 0, "lpt": 1, ORACLE: 2}.get(policy, 3 if policy in LENGTH_BLIND else 1)


def _shipped_runs(
    name: str, batch: ShippedBatch, truth: ShippedBatch, config: ReplayConfig
) -> dict[bool, StepRun]:
    """``_policy_runs`` in a worker process, from shipped batches (built once per process)."""
    return _policy_runs(name, unpack(batch), true_lengths(unpack(truth)), config)


def _policy_runs(
    name: str, batch: tuple[Trajectory, ...], actual: Mapping[str, int], config: ReplayConfig
) -> dict[bool, StepRun]:
    """One policy's plan of ``batch``, played against the true lengths in each stealing mode."""
    request, the_plan = _plan(batch, name, config)
    runs = {}
    for steal in config.steal_modes:
        options = _sim_options(request, the_plan, steal, config.engine)
        result = simulate(the_plan, batch, actual, config.inventory, options)
        runs[steal] = StepRun(the_plan, result, kv_use(result, config.inventory))
    return runs


def kv_use(result: SimResult, inventory: Inventory) -> float:
    """Mean share of the pool's KV cache in use from step start to the makespan: the KV tokens the
    running sequences held, integrated over the play (``SimResult.worker_kv_token_s``), over the
    pool's capacity times the makespan. It explains the distance to the lower bound, whose KV term
    assumes every cache full at every step. Each trajectory counted at its prompt plus half its
    output from first admission to end, as until 2026-12-07, read above 1 where sequences were
    evicted (their waits and lost progress counted as held: docs/experiments.md, replay58).
    """
    held = sum(result.worker_kv_token_s.values())
    capacity = sum(worker_cost(w, inventory.model).kv_capacity_tokens for w in inventory.workers)
    return held / (capacity * result.makespan_s) if result.makespan_s > 0 else 0.0


def _sim_options(request: PlanRequest, the_plan: Plan, steal: bool, engine: str) -> SimOptions:
    """Play the plan under the constraints it was planned under (a ``Plan`` does not record them),
    by the rules of the replay's ``engine`` (``scheduler.sim_rules``; the planner's model is V0's).

    A replay's requests never exclude workers nor ask for prefix affinity (``ReplayConfig`` has no
    such settings; a trace records neither), so both stay off; taking them from the request keeps the
    simulator's shared queue and stealing honouring whatever the planner was told if that changes.
    """
    options = SimOptions(
        steal=steal,
        kv_admission=the_plan.kv_admission,
        excluded_workers=request.excluded_workers,
        prefix_affinity=request.prefix_affinity,
    )
    return with_engine(options, engine)


def _plan(batch: tuple[Trajectory, ...], name: str, config: ReplayConfig) -> tuple[PlanRequest, Plan]:
    """The request a replayed policy plans from, and its plan."""
    policy = ORACLE_POLICY if name == ORACLE else name
    request = PlanRequest(
        trajectories=batch,
        inventory=config.inventory,
        time_budget_s=config.time_budget_s,
        kv_admission=config.kv_admission and policy not in LENGTH_BLIND,
        seed=config.seed,
        engine=config.engine,
    )
    with nullcontext() if config.wall_clock else clock.frozen():  # frozen: plans by counts, not time
        return request, plan(request, policy)


def _summarize(steps: Sequence[StepReplay], name: str, steal: bool) -> PolicySummary:
    runs = [s.runs[(name, steal)] for s in steps]
    makespan = max(sum(r.result.makespan_s for r in runs), 1e-12)  # an all-empty replay divides safely

    def total(policy: str) -> float:
        return sum(s.runs[(policy, steal)].result.makespan_s for s in steps)

    return PolicySummary(
        makespan_s=makespan,
        bubble_ratio=float(np.mean([r.result.bubble_ratio for r in runs])),
        speedup_vs_round_robin=total("round_robin") / makespan,
        speedup_vs_least_loaded=total("least_loaded") / makespan,
        ratio_to_lower_bound=makespan / sum(s.lower_bound_s for s in steps),
        tokens_per_s=sum(s.output_tokens for s in steps) / makespan,
        tail_time_s=sum(r.result.tail_time_s for r in runs),
        plan_wall_s=sum(r.plan.wall_time_s for r in runs),
        kv_use=float(np.mean([r.kv_use for r in runs])),
        preemptions=sum(r.result.preemptions for r in runs),
        steals=sum(r.result.steals for r in runs),
    )


def _as_dict(summary: PolicySummary) -> dict[str, float | int]:
    return {f.name: getattr(summary, f.name) for f in fields(summary)}
