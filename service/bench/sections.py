"""The ``make bench`` sections that wrap CLI benchmarks: predictors, service latency, Redis memory.

Each runs the same ``rollout-scheduler ...`` command a user would (as a subprocess, with ``--json``)
and renders its figures as Markdown, so the table in docs/benchmarks.md always sits beside the exact
command that produced it. ``service.bench.report`` lists these in ``SECTIONS``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
MATH100 = SHARED_DATA / "math100_x8.trace.csv"


def run_json(*args: str) -> Any:
    """Run ``rollout-scheduler ARGS --json`` in this interpreter and parse its standard output."""
    command = [sys.executable, "-m", "service.cli", *args, "--json"]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed: {done.stderr.strip()[-400:]}")
    return json.loads(done.stdout)


def _command(*args: str) -> str:
    return "`rollout-scheduler " + " ".join(args) + " --json`"


def predictors_section() -> str:
    """Accuracy on the real math100 trace, accuracy under drift, and fit/predict speed."""
    lines: list[str] = []
    if MATH100.is_file():
        args = ("predictor", "eval", "../shared/data/math100_x8.trace.csv")
        result = run_json("predictor", "eval", str(MATH100))["predictors"]
        lines += [
            f"Real data, fit on step 0, score step 1: {_command(*args)}",
            "",
            "| predictor | MAE (tokens) | MAPE | Spearman | Kendall | p90 coverage |",
            "|---|---|---|---|---|---|",
            *(_accuracy_row(name, m) for name, m in result.items()),
            "",
            "Targets: lightgbm MAE <= 56.3 (per-prompt history mean), Spearman >= 0.87, "
            "p90 coverage in [0.85, 0.95].",
            "",
        ]
    else:
        lines += [f"Real-data evaluation skipped: {MATH100} is absent.", ""]
    lines += _drift_lines()
    speed_args = ("bench", "predictor")
    speed = run_json(*speed_args)
    lines += [
        "",
        f"Speed: {_command(*speed_args)}",
        "",
        "| fit rows | fit wall s | fit CPU s | predict rows | predict wall ms, warm (median) "
        "| predict CPU ms, warm | predict wall ms after new actuals (median) "
        "| predict wall ms, full re-fold (median) |",
        "|---|---|---|---|---|---|---|---|",
        f"| {speed['rows']:,} | {speed['fit_s']} | {speed['fit_cpu_s']} | {speed['predict_rows']:,} "
        f"| {speed['predict_warm_ms']} | {speed['predict_warm_cpu_ms']} | {speed['predict_cold_ms']} "
        f"| {speed['predict_refold_ms']} |",
        "",
        "Targets: fit on 1,000,000 rows <= 30 s; predict 32,768 rows <= 50 ms (2 cores). Warm: the "
        "history already folded for the step. After new actuals: the first predict once the last "
        "step's actuals arrived, which folds them into the history first, as the service's predict "
        "does (it syncs the actuals stream before each predict, `service/learning/models.py`) and as every "
        "step's `POST /schedule` after the last step's reports is; only those rows are folded, onto "
        "the stats cached for the step before. Full re-fold: the first predict after a late report "
        "of an old step, which folds the whole history again, as every predict after an append does "
        "once a history capped by `ROLLOUT_ACTUALS_MAXLEN` is full (each append trims old rows).",
    ]
    return "\n".join(lines)


def _accuracy_row(name: str, m: dict[str, Any]) -> str:
    cells = [m.get(k) for k in ("mae", "mape", "spearman", "kendall", "p90_coverage")]
    shown = ["-" if c is None else f"{c:.3f}" if isinstance(c, float) else str(c) for c in cells]
    return f"| {name} | " + " | ".join(shown) + " |"


def _drift_lines() -> list[str]:
    """LightGBM vs the per-prompt history mean on drifting multi-epoch synthetic traces."""
    lines = [
        "Multi-epoch synthetic traces with upward length drift (target: lightgbm MAE >= 15% lower than "
        "the per-prompt history mean):",
        "",
        "| command | history-mean MAE | lightgbm MAE | change |",
        "|---|---|---|---|",
    ]
    for profile, drift in (
        ("short-cot", None),
        ("long-cot", None),
        ("short-cot", "0.05"),
        ("long-cot", "0.05"),
    ):
        args = ["bench", "predictor-drift", "--profile", profile, *(["--drift", drift] if drift else [])]
        report = run_json(*args)
        scores = report["predictors"]
        history, lgbm = scores["prompt_history_mean"]["mae"], scores["lightgbm"]["mae"]
        lines.append(
            f"| {_command(*args)} | {history:.1f} | {lgbm:.1f} | {100 * (lgbm / history - 1):+.1f}% |"
        )
    return lines


def service_section() -> str:
    """End-to-end POST /schedule latency against a service this command starts."""
    args = ("bench", "service", "--prompt-chars", "800")
    report = run_json(*args)
    lines = [
        f"{_command(*args)} (starts `serve` with an embedded valkey-server; default policy and budget;"
        " each prompt carries 800 characters of text)",
        "",
        "| batch | p50 ms | p95 ms | requests/s | server p50 per stage (ms) | statuses "
        "| at-once hedge judged |",
        "|---|---|---|---|---|---|---|",
    ]
    for size in report["sizes"]:
        stages = ", ".join(f"{k} {v}" for k, v in size["server_p50_ms"].items())
        lines.append(
            f"| {size['trajectories']:,} x {size['workers']} | {size['p50_ms']} | {size['p95_ms']} "
            f"| {size['requests_per_s']} | {stages} | {size['statuses']} "
            f"| {judged_count(size.get('at_once', {}))} |"
        )
    lines += ["", "Targets: p50 <= 150 ms at 1,024 x 16; p95 <= 1 s at 4,096 x 32 (2 cores).", ""]
    lines.append(_service_reading(report["sizes"][0]["requests"]))
    return "\n".join(lines)


def ordinal(n: int) -> str:
    """``n`` as an English ordinal: 1st, 2nd, 3rd, 11th, 21st, 29th."""
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def _service_reading(requests: int) -> str:
    """How the service table's figures are computed, which its cells alone do not say."""
    rank = max(1, -(-requests * 95 // 100))
    return (
        f"p50 and p95 are client side (HTTP and JSON included), p95 by nearest rank over the {requests} "
        f"measured requests of a size: the {ordinal(rank)} fastest. Each stage's figure is that stage's "
        "median over the requests, so the stages need not add up to `total_ms` (the server's own median); "
        "client p50 less `total_ms` is HTTP, JSON and the client. No actuals arrive between the "
        "requests, so every predict is warm (the history already folded), where a trainer's step "
        "follows its last step's reports (the predictor table's figure after new actuals)."
    )


def redis_memory_section() -> str:
    """Redis memory per published and per finished schedule, for sizing (docs/operations.md)."""
    args = ("bench", "redis-memory", "--prompt-chars", "800", "--output-chars", "4000")
    report = run_json(*args)
    lines = [
        f"{_command(*args)}: MEMORY USAGE summed over a schedule's keys and the index keys its publish"
        " makes (each worker's inbox, the active index), the schedule planned by lpt and built as the"
        " service publishes one (planned runs, paces, KV caps). The published bytes include the"
        " answer stored for a retry (`P:answer`, compressed), shown on its own with its JSON's size.",
        "",
        "| schedule | published | per trajectory | finished (with results) | per trajectory "
        "| stored answer (`P:answer`) | per trajectory |",
        "|---|---|---|---|---|---|---|",
    ]
    for size in report["sizes"]:
        lines.append(
            f"| {size['trajectories']:,} x {size['workers']} | {_mib(size['published_bytes'])} "
            f"| {size['published_per_trajectory']:,.0f} B | {_mib(size['finished_bytes'])} "
            f"| {size['finished_per_trajectory']:,.0f} B | {_answer_cells(size)} |"
        )
    return "\n".join(lines)


def _answer_cells(size: dict[str, Any]) -> str:
    """The stored answer's size, beside its uncompressed JSON's, and per trajectory."""
    answer, as_json = size["answer_bytes"], size["answer_json_bytes"]
    per = answer / size["trajectories"]
    return f"{answer / 1024:.1f} KiB ({as_json / 1024:.1f} KiB as JSON) | {per:.1f} B"


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.2f} MiB"


def judged_count(at_once: dict[str, int]) -> str:
    """How many of the measured plans the at-once hedge judged, of those it was asked on, and how
    many it was not asked on: whether the service's users get the hedged plan (docs/api.md,
    ``at_once_hedge``)."""
    judged = at_once.get("kept", 0) + at_once.get("fastest", 0)
    asked = judged + at_once.get("unjudged", 0)
    text = f"{judged} of {asked} (fastest {at_once.get('fastest', 0)})"
    return text + (f", {at_once['none']} not asked" if at_once.get("none") else "")
