"""The suite's own LPT: measured seconds per pytest-xdist scope, so ``--dist loadscope`` starts the
longest scopes first.

Why: loadscope hands whole scopes (a module; tests/scheduler's budget tests as one) to the 5 workers from a
queue that xdist orders by test count, so a scope of a few long tests (a sidecar fleet's makespan, 31 s
in one test; a serve stopped under a paused Redis, 26 s) is handed out among the last, and the run
ends on the worker that drew it while the others sit idle (the lead's run at main 216c9c36: the last
~3 % of tests took ~3 minutes). Longest first, the rule the product's own ``lpt`` policy plans by,
leaves only short scopes for the end (helper ci53, docs/experiments.md).

The costs are a table measured from a run's JUnit XML (``scope_costs.json`` beside this module);
regenerate it after a change that moves a scope's time much:
``pytest -n 5 --dist loadscope --junitxml=/tmp/j.xml`` then ``python -m tests.scope_costs /tmp/j.xml``,
on the whole suite: the table is rewritten with the run's scopes only (a run of 26 scopes left 26
of the 137 listed).
A scope the table lacks (a new module) is estimated at the table's mean seconds per test times its
test count, and one it lists that the run does not collect (a deleted module) is passed over: a stale
table costs the run only order (tests/test_scope_costs.py drives both through xdist's scheduler). One
check is on the table itself: a listed module that no longer exists fails tests/test_scope_costs.py,
so that the table names only what is there; remove its line. The scheduler ``conftest.py`` installs
(``loadscope_longest_first``) orders the queue before each unit it hands out, so a scope put back by a
worker that died goes out at its cost too, and ``--no-loadscope-reorder`` keeps the collection's order.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
COSTS_FILE = Path(__file__).with_name("scope_costs.json")
SOLVER_SCOPE = "tests/scheduler/"  # one xdist scope: the planner's tests on the budget's clock

# The modules of tests/scheduler whose tests never plan on the wall clock: no unfrozen read of the
# planning clock (``scheduler.clock.now``), no CP-SAT solve under its wall-clock limit, no hard
# deadline read on the real clock. Their answers do not depend on how much CPU a budget buys, so each
# is a scope of its own and runs beside anything. Every other module of tests/scheduler (a new one
# too, until it is listed) plans within a wall-clock budget somewhere: those stay one scope, so at
# most one of their tests runs at a time (docs/experiments.md, "CI time"). A listed module that
# starts reading the wall clock fails (tests/scheduler/conftest.py, ``off_the_clock``), naming what
# read it: move it out of this list, or freeze its clock where the property is about the result.
OFF_THE_CLOCK: frozenset[str] = frozenset(
    {
        "test_above_others.py",
        "test_admission.py",
        "test_balance.py",
        "test_band_grid.py",
        "test_bar_draws_in_hand.py",
        "test_bar_plans_late.py",
        "test_bar_priced.py",
        "test_blind_bar.py",
        "test_blind_draws_first_play.py",
        "test_bound_share_left.py",
        "test_cap_band.py",
        "test_cost_model_docs.py",
        "test_costmodel.py",
        "test_cpsat_at_once.py",
        "test_deadline_passed_message.py",
        "test_deadlines_batch.py",
        "test_devices.py",
        "test_estimates.py",
        "test_extra_rounds.py",
        "test_finish.py",
        "test_finish_draws.py",
        "test_finish_loops.py",
        "test_gcpause.py",
        "test_gcpause_edges.py",
        "test_giveup.py",
        "test_giveup_blocks.py",
        "test_giveup_docs.py",
        "test_giveup_edges.py",
        "test_giveup_gaps.py",
        "test_giveup_prepare.py",
        "test_hot_paths.py",
        "test_least_loaded_deal.py",
        "test_lognormal.py",
        "test_low_band.py",
        "test_plan_draws.py",
        "test_plan_draws_threads.py",
        "test_problem_memos_threads.py",
        "test_problem_replaced.py",
        "test_queue_layout.py",
        "test_runs_at_once_kept.py",
        "test_sat_watch_edges.py",
        "test_sat_watch_failed_reading.py",
        "test_sat_watch_raises.py",
        "test_sim_alone.py",
        "test_sim_refit.py",
        "test_simulator_reference.py",
        "test_solver_docs.py",
        "test_steal_batch.py",
        "test_synth.py",
        "test_synth_calibration.py",
        "test_tailbound_root.py",
        "test_tailcover.py",
        "test_validation.py",
        "test_validation_types.py",
        "test_waves_scale.py",
    }
)


def scope_of(nodeid: str) -> str:
    """The xdist scope of a test: tests/scheduler's modules on the budget's clock as one (all but
    ``OFF_THE_CLOCK``), else loadscope's own (the node id less its last ``::`` part: the module, or
    the class for a test in a class)."""
    module = nodeid.split("::", 1)[0]
    if module.startswith(SOLVER_SCOPE) and module.removeprefix(SOLVER_SCOPE) not in OFF_THE_CLOCK:
        return SOLVER_SCOPE
    return nodeid.rsplit("::", 1)[0]


def load_costs(path: Path = COSTS_FILE) -> dict[str, tuple[float, int]]:
    """Scope -> (seconds measured, tests it held then); empty where the file is absent."""
    if not path.is_file():
        return {}
    raw = json.loads(path.read_text())
    return {scope: (float(seconds), int(tests)) for scope, (seconds, tests) in raw.items()}


def longest_first(tests_per_scope: Mapping[str, int], costs: Mapping[str, tuple[float, int]]) -> list[str]:
    """The scopes, the costliest first: a listed scope at its measured seconds, any other at the
    table's mean seconds per test times its test count. Ties keep the given order."""
    seconds = sum(s for s, _ in costs.values())
    tests = sum(n for _, n in costs.values())
    per_test = seconds / tests if tests else 1.0

    def cost(scope: str) -> float:
        listed = costs.get(scope)
        return listed[0] if listed is not None else per_test * tests_per_scope[scope]

    return sorted(tests_per_scope, key=cost, reverse=True)


def longest_first_queue(
    workqueue: Mapping[str, dict[str, bool]], costs: Mapping[str, tuple[float, int]]
) -> OrderedDict[str, dict[str, bool]]:
    """xdist's loadscope queue (scope -> {node id: done}) reordered ``longest_first``, an unlisted scope
    at its tests still to run. Asked before each unit goes out, not once: a worker that dies has its
    unfinished scopes put back at the queue's end (``LoadScopeScheduling.remove_node``), where the
    longest of them, the planner's, would go out last and the run end on it."""
    pending = {scope: sum(not done for done in unit.values()) for scope, unit in workqueue.items()}
    return OrderedDict((scope, workqueue[scope]) for scope in longest_first(pending, costs))


def loadscope_longest_first(config: Any, log: Any = None) -> Any:
    """xdist's loadscope scheduler with tests/scheduler as one scope (``scope_of``), handing out the
    queue ``longest_first_queue`` unless ``--no-loadscope-reorder`` (xdist 3.8) asks for the
    collection's order. It overrides two private members of ``LoadScopeScheduling`` (``_split_scope``,
    ``_assign_work_unit``) and reads its ``workqueue``: tests/test_scope_costs.py drives it through
    xdist's own code, so an xdist that renames them fails there, not by silently losing the order."""
    from xdist.scheduler import LoadScopeScheduling

    class LongestFirst(LoadScopeScheduling):  # type: ignore[misc]  # xdist ships no type hints
        workqueue: OrderedDict[str, dict[str, bool]]  # xdist's: scope -> {node id: done}
        costs = load_costs()
        reorder = getattr(config.option, "loadscopereorder", True)  # the option is xdist 3.8's

        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

        def _assign_work_unit(self, node: Any) -> None:
            if self.reorder:  # each time: a dead worker's scopes come back at the queue's end
                self.workqueue = longest_first_queue(self.workqueue, self.costs)
            super()._assign_work_unit(node)

    return LongestFirst(config, log)


def _nodeid(classname: str, name: str) -> str:
    """A JUnit test case's pytest node id: its ``classname`` is the module's dotted path, then any class."""
    parts = classname.split(".")
    for cut in range(len(parts), 0, -1):
        module = Path(*parts[:cut]).with_suffix(".py")
        if (ROOT / module).is_file():
            return "::".join([module.as_posix(), *parts[cut:], name])
    return "::".join([*parts, name])


def costs_from_junit(paths: list[Path]) -> dict[str, tuple[float, int]]:
    """Scope -> (summed test time, test count) over the JUnit XML files pytest wrote (``--junitxml``:
    each case's setup, call and teardown), at 0.1 s, the costliest first."""
    sums: dict[str, tuple[float, int]] = {}
    for path in paths:
        for case in ET.parse(path).iter("testcase"):
            scope = scope_of(_nodeid(case.get("classname", ""), case.get("name", "")))
            seconds, tests = sums.get(scope, (0.0, 0))
            sums[scope] = (seconds + float(case.get("time", "0")), tests + 1)
    ranked = sorted(sums.items(), key=lambda kv: -kv[1][0])
    return {scope: (round(seconds, 1), tests) for scope, (seconds, tests) in ranked}


def main(argv: list[str]) -> int:
    """Rewrite ``scope_costs.json`` from the JUnit XML files named in ``argv``."""
    if not argv:
        print("usage: python -m tests.scope_costs JUNIT.xml [...]", file=sys.stderr)
        return 2
    costs = costs_from_junit([Path(a) for a in argv])
    lines = [f"{json.dumps(scope)}: [{seconds}, {tests}]" for scope, (seconds, tests) in costs.items()]
    COSTS_FILE.write_text("{\n" + ",\n".join(lines) + "\n}\n")  # one scope a line: diffs read per scope
    print(f"{len(costs)} scopes, {sum(s for s, _ in costs.values()):.0f} s in all -> {COSTS_FILE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
