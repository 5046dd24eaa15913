"""Present a replay: one table (terminal, Markdown, HTML), a Gantt chart per worker, a self-contained page.

Why one module: the CLI, the HTML report and docs/benchmarks.md must show the same columns computed
the same way, so the rows are built once (``table_rows``) and only rendered differently. The Gantt
chart uses matplotlib's Agg backend (no display needed) and the HTML embeds it as base64, so the
report is a single file a user can mail or attach to an issue.
"""

from __future__ import annotations

import base64
import heapq
import html
import io
from collections.abc import Sequence
from typing import Any

from scheduler.sim_rules import DEFAULT_ENGINE
from service.replay.harness import ReplayReport, StepReplay
from service.workerspec import pool_label

COLUMNS: tuple[str, ...] = (
    "policy",
    "makespan s",
    "x round_robin",
    "x least_loaded",
    "/ lower bound",
    "bubble",
    "tokens/s",
    "tail s",
    "KV use",
    "preempted",
    "steals",
    "plan s",
)


def table_rows(report: ReplayReport, steal: bool) -> list[tuple[str, ...]]:
    """One formatted row per reported policy, in ``COLUMNS`` order: every figure of ``--json``'s
    policies (``PolicySummary``). The evictions and steals were in the JSON only, so two tables of
    a replay, stealing on and off, could be identical with nothing to say that no policy stole."""
    rows: list[tuple[str, ...]] = []
    for name, s in report.summary(steal).items():
        rows.append(
            (
                name,
                f"{s.makespan_s:,.1f}",
                f"{s.speedup_vs_round_robin:.2f}",
                f"{s.speedup_vs_least_loaded:.2f}",
                f"{s.ratio_to_lower_bound:.3f}",
                f"{s.bubble_ratio:.3f}",
                f"{s.tokens_per_s:,.0f}",
                f"{s.tail_time_s:,.1f}",
                f"{s.kv_use:.2f}",
                f"{s.preemptions:,}",
                f"{s.steals:,}",
                f"{s.plan_wall_s:.2f}",
            )
        )
    return rows


def markdown_table(report: ReplayReport, steal: bool) -> str:
    """The table as GitHub Markdown, for docs/benchmarks.md."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(row) + " |" for row in table_rows(report, steal)]
    return "\n".join(lines)


def headline(report: ReplayReport, steal: bool) -> str:
    """One line that says what was replayed, for every rendering; a synthetic trace's figures say
    so first (they were given no label: a replay of ``trace synth``'s output read as a recorded run),
    and an engine other than the default is named (its figures are not the default's)."""
    inv = report.config.inventory
    pool = pool_label(inv)
    steps = ", ".join(str(s.step) for s in report.steps)
    word = "step" if len(report.steps) == 1 else "steps"  # "steps 1:" read as a miscount of one
    engine = report.config.engine
    return (
        ("SYNTHETIC trace, " if report.synthetic else "")
        + f"{word} {steps}: {sum(s.trajectories for s in report.steps):,} trajectories on {pool} "
        f"({inv.model.name}), stealing {'on' if steal else 'off'}, "
        + (f"played as {engine}, " if engine != DEFAULT_ENGINE else "")
        + f"lower bound {report.lower_bound_s:,.1f} s"
    )


def unlearned_note(report: ReplayReport) -> str:
    """What to know of a replayed step that had no earlier step to learn from (a trace's first,
    which a replay without ``--steps`` includes), or "": its length-aware plans stood on the prior
    alone, and its figures, summed with the others', read as the predictor's without a word."""
    blind = next((s.step for s in report.steps if s.unlearned), None)
    if blind is None:
        return ""
    later = next((s.step for s in report.steps if not s.unlearned), None)
    hint = f"; --steps {later}- leaves it out" if later is not None else ""
    return (
        f"step {blind} is the trace's first: no earlier step to learn lengths from, so its "
        f"length-aware plans used the length prior alone{hint}"
    )


def chart_title(report: ReplayReport, steal: bool) -> str:
    """The Gantt chart's title: its step, and what the headline says of the pool and the trace. The
    chart is a file of its own (``--plot``), and its title named the step alone, not the pool, the
    model, nor a synthetic trace."""
    inv = report.config.inventory
    return (
        ("SYNTHETIC trace, " if report.synthetic else "")
        + f"step {report.steps[-1].step} on {pool_label(inv)} ({inv.model.name}): trajectories per worker "
        f"(stealing {'on' if steal else 'off'})"
    )


def gantt_png(step: StepReplay, policies: Sequence[str], steal: bool, title: str | None = None) -> bytes:
    """A PNG with one panel per policy: one row per worker, one bar per trajectory, from start to end;
    ``title`` (``chart_title``) heads it and is the PNG's ``Title`` text too."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(
        len(policies), 1, figsize=(11, 2.2 + 1.6 * len(policies)), squeeze=False, sharex=True
    )
    for ax, name in zip(axes[:, 0], policies, strict=True):
        _gantt_panel(ax, step, name, steal)
    longest = max(step.runs[(name, steal)].result.makespan_s for name in policies)
    axes[-1, 0].set_xlim(0, max(longest, step.lower_bound_s) * 1.02)  # shared by every panel
    axes[-1, 0].set_xlabel("seconds since the step started")
    title = title or f"step {step.step}: trajectories per worker (stealing {'on' if steal else 'off'})"
    fig.suptitle(title)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, metadata={"Title": title})
    plt.close(fig)
    return buffer.getvalue()


def _gantt_panel(ax: Any, step: StepReplay, name: str, steal: bool) -> None:
    """Draw one policy's timeline; a worker's concurrent trajectories stack in lanes inside its row."""
    from matplotlib.collections import PolyCollection

    run = step.runs[(name, steal)]
    workers = [w.worker_id for w in run.plan.workers]
    row_of = {w: i for i, w in enumerate(workers)}
    by_worker: dict[str, list[tuple[float, float]]] = {w: [] for w in workers}
    for item in run.result.items:
        by_worker[item.worker_id].append((item.start_s, item.end_s))
    boxes: list[list[tuple[float, float]]] = []
    lanes_of: list[int] = []
    for worker, spans in by_worker.items():
        spans.sort()
        lanes = _lanes(spans)
        depth = max(lanes, default=0) + 1
        for (start, end), lane in zip(spans, lanes, strict=True):
            low = row_of[worker] + 0.05 + 0.9 * lane / depth
            high = low + 0.9 / depth
            boxes.append([(start, low), (end, low), (end, high), (start, high)])
            lanes_of.append(lane)
    palette = [f"C{k}" for k in range(10)]
    # One collection per panel: thousands of Rectangle patches take minutes to draw, a collection not.
    # An edge in the bar's own colour draws a lane thinner than a pixel (64 running at once on a worker):
    # without it Agg dropped some such bars whole, the one that set the makespan among them.
    colors = [palette[k % 10] for k in lanes_of]
    ax.add_collection(PolyCollection(boxes, facecolors=colors, edgecolors=colors, linewidths=0.5))
    ax.axvline(step.lower_bound_s, color="black", linestyle="--", linewidth=1, label="lower bound")
    ax.axvline(run.result.makespan_s, color="red", linewidth=1, label="makespan")
    ax.set_yticks([i + 0.5 for i in range(len(workers))], workers, fontsize=6)
    ax.set_ylim(0, len(workers))
    ax.set_title(panel_title(name, run.result.makespan_s), fontsize=9, loc="left")
    ax.legend(loc="lower right", fontsize=7)


def panel_title(name: str, makespan_s: float) -> str:
    """A Gantt panel's title: whole seconds hid sub-second steps ("makespan 0 s"), so one decimal
    below 100 s, whole seconds above (where a tenth is noise)."""
    seconds = f"{makespan_s:,.1f}" if round(makespan_s, 1) < 100 else f"{makespan_s:,.0f}"
    return f"{name}: makespan {seconds} s"


def _lanes(spans: Sequence[tuple[float, float]]) -> list[int]:
    """Interval partitioning of spans sorted by start: each gets the lowest lane free at its start."""
    free: list[int] = []
    busy: list[tuple[float, int]] = []  # (end, lane)
    out = []
    for start, end in spans:
        while busy and busy[0][0] <= start:
            heapq.heappush(free, heapq.heappop(busy)[1])
        lane = heapq.heappop(free) if free else len(busy)
        heapq.heappush(busy, (end, lane))
        out.append(lane)
    return out


def html_report(report: ReplayReport, steal: bool, png: bytes) -> str:
    """A self-contained HTML page: what was replayed, the table, the Gantt chart inline."""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in COLUMNS)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>"
        for row in table_rows(report, steal)
    )
    image = base64.b64encode(png).decode("ascii")
    per_step = "".join(
        f"<li>step {s.step}: {s.trajectories:,} trajectories, lower bound {s.lower_bound_s:,.1f} s, "
        f"prediction MAE {s.prediction_mae:,.0f} tokens"
        + (" (no earlier step to learn from: planned on the length prior)" if s.unlearned else "")
        + "</li>"
        for s in report.steps
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>rollout-scheduler replay</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:4px 8px;text-align:right}}td:first-child{{text-align:left}}</style>
</head><body>
<h1>rollout-scheduler replay</h1>
<p>{html.escape(headline(report, steal))}</p>
<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>
<p>Makespans, tail times, evictions and steals are summed over steps, bubble ratios and KV use averaged;
speed-ups and the ratio to the lower bound are ratios of summed makespans. Definitions: docs/replay.md.</p>
<ul>{per_step}</ul>
<h2>Gantt chart of step {report.steps[-1].step}</h2>
<img alt="Gantt chart per worker" src="data:image/png;base64,{image}" style="max-width:100%">
<p>Replay wall time {report.wall_s:.1f} s.</p>
</body></html>
"""
