"""docs/benchmarks.md sections are replaced in place, and every other section survives."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

import pytest

from predictors.tracetable import Trace
from scheduler.trace import TraceRow
from service.bench import report as benchreport
from service.bench.report import BenchSection, replace_section
from service.replay.harness import ORACLE, ReplayConfig, replay
from service.workerspec import parse_workers


def test_a_new_section_is_appended_under_its_heading() -> None:
    text = replace_section("# Benchmarks\n\n## Solver\n\nfast\n", "replay", "Replay", "| a |")
    assert text.startswith("# Benchmarks\n\n## Solver\n\nfast\n")
    assert text.endswith("## Replay\n\n<!-- replay:begin -->\n| a |\n<!-- replay:end -->\n")


def test_rerunning_a_section_replaces_only_its_own_region() -> None:
    first = replace_section("## Solver\n\nfast\n", "replay", "Replay", "old")
    around = first + "\n## Delivery\n\n<!-- delivery:begin -->\nkept\n<!-- delivery:end -->\n"
    second = replace_section(around, "replay", "Replay", "new")
    assert "old" not in second
    assert "new" in second
    assert "fast" in second
    assert "<!-- delivery:begin -->\nkept\n<!-- delivery:end -->" in second
    assert second.count("## Replay") == 1


def test_an_empty_file_gets_a_title() -> None:
    assert replace_section("", "replay", "Replay", "x").startswith("# Benchmarks\n\n## Replay\n")


def test_main_writes_the_chosen_sections_and_refuses_unknown_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "docs" / "benchmarks.md"
    out.parent.mkdir()
    out.write_text("## Solver\n\nkept\n")
    monkeypatch.setattr(benchreport, "SECTIONS", (BenchSection("demo", "Demo", lambda: "| 1 |"),))
    assert benchreport.main(["--out", str(out)]) == 0
    assert "kept" in out.read_text()
    assert "<!-- demo:begin -->\n| 1 |\n<!-- demo:end -->" in out.read_text()
    assert benchreport.main(["--out", str(out), "--only", "nope"]) == 2


def _demo(monkeypatch: pytest.MonkeyPatch, body: str = "| 1 |") -> None:
    monkeypatch.setattr(benchreport, "SECTIONS", (BenchSection("demo", "Demo", lambda: body),))


def test_a_report_that_cannot_be_written_is_one_line_naming_out_and_leaves_no_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A name longer than the file system takes passes every check (its folder does not exist yet):
    the write raised the OS's error, a traceback after the sections' work, and left the folders."""
    _demo(monkeypatch)
    out = tmp_path / "new" / "deeper" / ("b" * 300 + ".md")
    assert benchreport.main(["--out", str(out)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"benchreport: out={str(out)!r}: cannot be written: File name too long"
    ]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("make", "reason"), [("folder", "is a directory"), ("latin1", "is not UTF-8 text")])
def test_an_out_that_cannot_be_rewritten_is_refused_before_any_section_runs(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    make: str,
    reason: str,
) -> None:
    out = tmp_path / "benchmarks.md"
    if make == "folder":
        out.mkdir()
    else:
        out.write_bytes("caf\u00e9\n".encode("latin-1"))
    ran: list[str] = []

    def section() -> str:
        ran.append("demo")
        return ""

    monkeypatch.setattr(benchreport, "SECTIONS", (BenchSection("demo", "Demo", section),))
    assert benchreport.main(["--out", str(out)]) == 2
    assert capsys.readouterr().err.splitlines() == [f"benchreport: out={str(out)!r}: {reason}"]
    assert ran == []


def test_a_write_that_fails_part_way_leaves_the_report_as_it_was(tmp_path: Path) -> None:
    """Written in place, the file was cut at the failure: every hand-written section after it lost.
    The failure is a file size limit (RLIMIT_FSIZE) in a child process: it holds as root too."""
    out = tmp_path / "benchmarks.md"
    out.write_text("## Solver\n\nkept by hand\n")
    script = (
        "import resource, signal, sys\n"
        "from service.bench import report as benchreport\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))\n"
        "benchreport.SECTIONS = (benchreport.BenchSection('demo', 'Demo', lambda: 'x' * 10000),)\n"
        "sys.exit(benchreport.main(sys.argv[1:]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [f"benchreport: out={str(out)!r}: cannot be written: File too large"]
    assert out.read_text() == "## Solver\n\nkept by hand\n"
    assert [p.name for p in tmp_path.iterdir()] == ["benchmarks.md"]


@pytest.mark.parametrize("mode", [0o600, 0o640], ids=["0600", "0640"])
def test_a_rewritten_report_keeps_its_permissions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: int
) -> None:
    """Rewriting docs/benchmarks.md made a file its owner had kept private (0600) readable by all."""
    _demo(monkeypatch)
    out = tmp_path / "benchmarks.md"
    out.write_text("## Solver\n\nkept by hand\n")
    out.chmod(mode)
    assert benchreport.main(["--out", str(out)]) == 0
    assert "<!-- demo:begin -->" in out.read_text()
    assert stat.S_IMODE(out.stat().st_mode) == mode


def test_the_bound_gap_sentence_gives_oracles_figures_then_cpsats_the_kv_use_as_the_kv_held() -> None:
    """docs/benchmarks.md's "Where the bound gap comes from", on a replay small enough for a test: 16
    trajectories of 8,000-token prompts under 14b, whose lengths at step 1 are not those of step 0,
    so cpsat (planned on the predictions) holds less of the KV than oracle (the true lengths)."""
    pool = parse_workers("1xH100,1xAscend910B", model="14b")
    rows = [
        TraceRow(step, f"q{i}", 0, 8_000, 1_000 + ((i + 5 * step) * 3_677) % 12_000)
        for step in (0, 1)
        for i in range(16)
    ]
    policies = ("round_robin", "least_loaded", "cpsat", ORACLE)
    report = replay(Trace.from_rows(rows), ReplayConfig(pool, policies, (1,), time_budget_s=0.2))
    oracle, cpsat = report.summary(True)[ORACLE], report.summary(True)["cpsat"]
    assert f"{oracle.kv_use:.0%}" != f"{cpsat.kv_use:.0%}"  # the sentence can tell whose figure it gives
    sentence = next(line for line in benchreport._targets(report, True, "demo") if line.startswith("Where"))
    assert (
        f"oracle (cpsat on the true lengths) runs at {oracle.ratio_to_lower_bound:.3f}x the bound with "
        f"{oracle.kv_use:.0%} of the pool's KV cache in use on average (cpsat: {cpsat.kv_use:.0%}; "
        "the KV held, see docs/replay.md), and "
        f"{oracle.preemptions:,} preemptions (cpsat: {cpsat.preemptions:,})"
    ) in sentence
