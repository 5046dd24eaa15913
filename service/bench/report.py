"""``make bench``: run the benchmark sections and write their tables into docs/benchmarks.md.

Each section is a (marker name, heading, function) entry in ``SECTIONS``; its Markdown lands between
``<!-- name:begin -->`` and ``<!-- name:end -->``, so re-running a section replaces only its own text
and every other section of the file (written by hand or by other entries) stays as it is. A section
that is not in the file yet is appended under its heading. To add a benchmark: write a function
returning Markdown and add one ``BenchSection`` to ``SECTIONS``.

    python -m service.bench.report --out docs/benchmarks.md [--only replay]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from predictors.tracetable import Trace
from scheduler.errors import InvalidInputError
from scheduler.sim_rules import DEFAULT_ENGINE
from scheduler.types import Inventory
from service.bench import sections as benchsections
from service.outpaths import check_file_path, write_all
from service.replay.harness import ORACLE, ReplayConfig, ReplayReport, parse_policies, replay
from service.replay.steps import select_steps

SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"

# The headline replay of issue 6, as the equivalent CLI commands.
HEADLINE_SYNTH = (
    "rollout-scheduler trace synth --profile long-cot --prompts 256 --samples 16 --steps 6 --seed 1"
)
HEADLINE_REPLAY = "rollout-scheduler replay synth.csv --workers 8xH100,8xAscend910B --model 7b --steps 3-5"
REAL_REPLAY = "rollout-scheduler replay ../shared/data/math100_x8.trace.csv --steps 1"
REAL_POOLS = ("4xH100", "2xH100,2xAscend910B")  # one kind; a mixed pool where the batch runs at once


@dataclass(frozen=True, slots=True)
class BenchSection:
    """One benchmark that owns a marked region of docs/benchmarks.md."""

    name: str  # marker name: <!-- name:begin --> ... <!-- name:end -->
    heading: str  # the ## heading written above the markers when the section is new
    build: Callable[[], str]  # runs the benchmark, returns its Markdown


def replace_section(text: str, section: str, heading: str, body: str) -> str:
    """``text`` with the region of ``section`` replaced by ``body``, or appended under ``heading``."""
    begin, end = f"<!-- {section}:begin -->", f"<!-- {section}:end -->"
    block = f"{begin}\n{body.strip()}\n{end}"
    start, stop = text.find(begin), text.find(end)
    if start >= 0 and stop > start:
        return text[:start] + block + text[stop + len(end) :]
    prefix = text.rstrip() + "\n\n" if text.strip() else "# Benchmarks\n\n"
    return f"{prefix}## {heading}\n\n{block}\n"


def machine() -> str:
    """The machine line every section quotes: figures depend on it."""
    return (
        f"{platform.machine()}, {os.cpu_count()} CPU cores visible, Python {platform.python_version()}, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )


def _replay_tables(report: ReplayReport, modes: Sequence[bool]) -> list[str]:
    from service.replay.report import headline, markdown_table

    out = []
    for steal in modes:
        out += [f"**{headline(report, steal)}**", "", markdown_table(report, steal), ""]
    return out


def _targets(report: ReplayReport, steal: bool, label: str) -> list[str]:
    """Issue 6's targets for cpsat on predicted lengths, each with its measured value."""
    s = report.summary(steal)
    cpsat, oracle = s["cpsat"], s[ORACLE]
    to_oracle = cpsat.makespan_s / oracle.makespan_s
    checks = [
        ("within 1.10x of the lower bound", cpsat.ratio_to_lower_bound, cpsat.ratio_to_lower_bound <= 1.10),
        ("within 1.05x of oracle", to_oracle, to_oracle <= 1.05),
        (
            ">= 1.3x faster than least_loaded",
            cpsat.speedup_vs_least_loaded,
            cpsat.speedup_vs_least_loaded >= 1.3,
        ),
        (
            ">= 2.0x faster than round_robin",
            cpsat.speedup_vs_round_robin,
            cpsat.speedup_vs_round_robin >= 2.0,
        ),
    ]
    lines = [f"| cpsat target ({label}) | measured | met |", "|---|---|---|"]
    lines += [f"| {what} | {value:.3f} | {'yes' if ok else 'NO'} |" for what, value, ok in checks]
    rr_ratio = s["round_robin"].ratio_to_lower_bound
    lines += [
        "",
        f"Where the bound gap comes from: oracle (cpsat on the true lengths) runs at "
        f"{oracle.ratio_to_lower_bound:.3f}x the bound with {oracle.kv_use:.0%} of the pool's KV cache in "
        f"use on average (cpsat: {cpsat.kv_use:.0%}; the KV held, see docs/replay.md), and "
        f"{oracle.preemptions:,} preemptions (cpsat: {cpsat.preemptions:,}), each paying again for "
        "what it held (decoded again as vllm-v0, prefilled again as vllm-v1), "
        "while the bound's KV term assumes a full cache doing useful work at every step.",
    ]
    counts = (
        "so the bound ratio is the target that counts" if rr_ratio <= 2.2 else "so the 2.0x target applies"
    )
    lines += ["", f"round_robin runs at {rr_ratio:.3f}x the bound ({counts})."]
    return lines


def _headline(
    trace: Trace, inventory: Inventory, kv_admission: bool, engine: str = DEFAULT_ENGINE
) -> list[str]:
    """One headline replay (steps 3-5, every policy, both stealing modes) with its target check.

    ``engine`` names the rules the plans are played by (``scheduler.sim_rules``): V0's, the planner's
    own model and the default, or V1's (no watermark, an evicted sequence keeps its output), which
    today's vLLM runs, so a reader sees the figures against the engine they deploy too.
    """
    config = ReplayConfig(
        inventory,
        parse_policies("all"),
        select_steps(trace, "3-5"),
        steal_modes=(True, False),
        kv_admission=kv_admission,
        processes=_cores(),
        engine=engine,
    )
    report = replay(trace, config)
    flag = "--kv-admission" if kv_admission else "--no-kv-admission"
    if engine != DEFAULT_ENGINE:
        flag += f" --engine {engine}"
    admission = "projected-peak KV admission" if kv_admission else "vLLM admission with preemption"
    if engine != DEFAULT_ENGINE:
        admission += f", played as {engine}"
    return [
        f"#### Length-aware plans with {admission} (`{flag}`)",
        "",
        f"`{HEADLINE_REPLAY} {flag} --steal` and `--no-steal`: two CLI runs, which `make bench` makes "
        f"as one replay playing both modes (wall time {report.wall_s:.1f} s).",
        "",
        *_replay_tables(report, (True, False)),
        *_targets(report, True, f"{admission}, stealing on"),
        "",
        *_targets(report, False, f"{admission}, stealing off"),
        "",
    ]


def replay_section() -> str:
    """The headline replay (both admission modes; projected peak also played as vLLM V1), the 6-step
    timing run and the real short-CoT trace."""
    from predictors.synthetic import synthetic_trace
    from service.workerspec import parse_workers

    trace = synthetic_trace("long-cot", prompts=256, samples=16, steps=6, seed=1)
    inventory = parse_workers("8xH100,8xAscend910B", "7b")
    lines = [
        f"Machine: {machine()}. Produced by `make bench` (`python -m service.bench.report`).",
        "",
        "### Headline: synthetic long CoT, 8xH100 + 8xAscend910B, 7B",
        "",
        f"Trace: `{HEADLINE_SYNTH} --out synth.csv` (4,096 trajectories per step). Length-blind",
        "baselines always use vLLM admission; the admission mode applies to lpt, cpsat and oracle.",
        "",
        *_headline(trace, inventory, kv_admission=True),
        *_headline(trace, inventory, kv_admission=False),
        *_headline(trace, inventory, kv_admission=True, engine="vllm-v1"),
        *_timing(trace, inventory, parse_policies("all")),
        "",
        *_real_data(),
    ]
    return "\n".join(lines)


def _timing(trace: Trace, inventory: Inventory, policies: tuple[str, ...]) -> list[str]:
    """Issue 6's speed target: 6 steps x 4,096 trajectories, every policy, stealing on."""
    config = ReplayConfig(
        inventory, policies, select_steps(trace, None), steal_modes=(True,), processes=_cores()
    )
    report = replay(trace, config)
    n = sum(s.trajectories for s in report.steps)
    return [
        "### Replay speed",
        "",
        f"Replaying all {len(report.steps)} steps ({n:,} trajectories, every policy, stealing on) took "
        f"**{report.wall_s:.1f} s** wall (target: 60 s on 2 cores). Command: "
        f"`{HEADLINE_REPLAY.replace(' --steps 3-5', '')}`.",
    ]


def _cores() -> int:
    """Worker processes for the replays, as the ``replay`` command's default: one per core."""
    return os.cpu_count() or 1


def _real_data() -> list[str]:
    """The real short-CoT trace, step 1 (the predictor fits on step 0), on one device kind and on a
    mixed pool: there the whole batch runs at once and one under-predicted sample sets the makespan
    on whichever device it lands (docs/solver.md, "Placement for lengths that are not known: a batch
    that runs at once")."""
    path = SHARED_DATA / "math100_x8.trace.csv"
    lines: list[str] = []
    for workers in REAL_POOLS:
        lines += [
            f"### Real data: math100_x8 (Qwen2.5-Math, 100 prompts x 4 samples per step), {workers}, 7B",
            "",
        ]
        if not path.is_file():
            lines += [f"Skipped: {path} is absent on this machine.", ""]
            continue
        lines += [*_real_replay(path, workers), ""]
    return lines


def _real_replay(path: Path, workers: str) -> list[str]:
    from predictors.traceio import read_trace
    from service.workerspec import parse_workers

    trace = read_trace(path)
    config = ReplayConfig(
        parse_workers(workers, "7b"),
        parse_policies("all"),
        select_steps(trace, "1"),
        steal_modes=(True, False),
        processes=_cores(),
    )
    report = replay(trace, config)
    return [
        f"`{REAL_REPLAY} --workers {workers}` (wall time {report.wall_s:.1f} s).",
        "",
        *_replay_tables(report, (True, False)),
    ]


def _solver() -> str:
    from service.commands.bench_solver import markdown_report

    return markdown_report()


def _delivery() -> str:
    from service.delivery.bench import markdown_report

    return markdown_report()


SECTIONS: tuple[BenchSection, ...] = (
    BenchSection("solver", "Solver (issue 2)", _solver),
    BenchSection("predictors", "Predictors (issue 3)", benchsections.predictors_section),
    BenchSection("service", "Service (issue 4)", benchsections.service_section),
    BenchSection("delivery", "Delivery (issue 5)", _delivery),
    BenchSection("replay", "Replay (issue 6)", replay_section),
    BenchSection("redis-memory", "Redis memory per schedule (issue 7)", benchsections.redis_memory_section),
)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the chosen sections (all by default) and rewrite their regions of ``--out``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks.md"))
    parser.add_argument("--only", action="append", help="section name to run (repeatable); default all")
    args = parser.parse_args(argv)
    chosen = [s for s in SECTIONS if not args.only or s.name in args.only]
    if args.only and len(chosen) != len(set(args.only)):
        known = ", ".join(s.name for s in SECTIONS)
        print(f"benchreport: unknown section in {args.only}; known: {known}", file=sys.stderr)
        return 2
    try:
        check_file_path("out", args.out)  # before the sections' minutes of work, not after them
        _read(args.out)
        for section in chosen:
            started = time.perf_counter()
            _write_section(args.out, section)
            print(f"{section.name}: written to {args.out} in {time.perf_counter() - started:.1f} s")
    except InvalidInputError as exc:
        print(f"benchreport: {exc}", file=sys.stderr)
        return 2
    return 0


def _write_section(out: Path, section: BenchSection) -> None:
    """Run ``section`` and replace its region of ``out``, all or none (``write_all``): a write that
    fails part-way leaves the file as it was, and no folder made for it, where writing in place left
    docs/benchmarks.md cut short, every hand-written section after the cut lost with it."""
    body = section.build()
    new = replace_section(_read(out), section.name, section.heading, body)
    write_all([("out", out, new.encode("utf-8"))])


def _read(out: Path) -> str:
    """The report's text so far ("" before the first run); one not in UTF-8 is refused, not replaced."""
    try:
        return out.read_text(encoding="utf-8") if out.is_file() else ""
    except UnicodeDecodeError:
        raise InvalidInputError("out", str(out), "is not UTF-8 text") from None


if __name__ == "__main__":
    sys.exit(main())
