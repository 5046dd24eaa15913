"""docs/benchmarks.md sections are replaced in place, and every other section survives."""

from __future__ import annotations

from pathlib import Path

import pytest

from service import benchreport
from service.benchreport import BenchSection, replace_section


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
