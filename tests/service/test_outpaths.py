"""``write_all``: a command's outputs written all or none, whatever their names; and the checks made
before a command's work that its outputs can be written at all."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from scheduler.errors import InvalidInputError
from service.outpaths import check_file_path, check_folder_path, check_suffix, write_all


@pytest.mark.parametrize("name", ["r" * 250 + ".md", "\U0001f600" * 62 + ".md"], ids=["ascii", "four-byte"])
def test_a_name_as_long_as_the_file_system_takes_is_written(tmp_path: Path, name: str) -> None:
    """The temporary name beside it kept 64 characters of the target's: 64 four-byte ones, 256 bytes."""
    path = tmp_path / "new" / name
    write_all([("out", path, b"text")])
    assert path.read_bytes() == b"text"
    assert [p.name for p in path.parent.iterdir()] == [name]


def test_a_name_past_the_file_system_s_limit_leaves_nothing_and_names_the_option(tmp_path: Path) -> None:
    path = tmp_path / "new" / "deeper" / ("r" * 300 + ".md")
    with pytest.raises(InvalidInputError) as raised:
        write_all([("out", path, b"text")])
    assert str(raised.value) == f"out={str(path)!r}: cannot be written: File name too long"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("mode", [0o600, 0o640], ids=["0600", "0640"])
def test_an_output_replacing_a_file_keeps_that_file_s_permissions(tmp_path: Path, mode: int) -> None:
    """``open(path, "w")`` keeps them; the renamed temporary file came back with the default mode,
    a report its owner had made private readable by everyone again."""
    path = tmp_path / "report.html"
    path.write_bytes(b"old")
    path.chmod(mode)
    write_all([("report", path, b"new")])
    assert path.read_bytes() == b"new"
    assert stat.S_IMODE(path.stat().st_mode) == mode


def test_a_new_output_gets_the_mode_the_umask_allows(tmp_path: Path) -> None:
    path = tmp_path / "report.html"
    write_all([("report", path, b"new")])
    old = os.umask(0o022)
    os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~old


@pytest.mark.parametrize("name", ["g.png", "G.PNG", "chart.v2.Png"])
def test_a_suffix_is_matched_whatever_its_case(name: str) -> None:
    check_suffix("plot", Path(name), (".png",), "the chart is a PNG image")


@pytest.mark.parametrize("name", ["g.png.txt", "png", ".png.", "g.pn"])
def test_only_the_last_suffix_counts(name: str) -> None:
    with pytest.raises(InvalidInputError) as raised:
        check_suffix("plot", Path(name), (".png",), "the chart is a PNG image")
    assert str(raised.value) == f"plot={name!r}: must end in .png (the chart is a PNG image)"


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_a_folder_that_takes_no_new_file_is_refused_before_the_work_even_for_root() -> None:
    """``os.access`` says yes to root for ``/proc`` (and a read-only mount): ``replay --report
    /proc/r.html`` ran the whole replay, ~19 s, and only then failed to write."""
    with pytest.raises(InvalidInputError) as raised:
        check_file_path("report", Path("/proc/r.html"))
    assert str(raised.value) == "report='/proc/r.html': cannot be written here"
    with pytest.raises(InvalidInputError, match="folder this process may not write to"):
        check_folder_path("out", Path("/proc"))


def test_the_writability_check_leaves_nothing_in_the_folder(tmp_path: Path) -> None:
    check_file_path("out", tmp_path / "new" / "a.csv")
    check_folder_path("out", tmp_path)
    assert list(tmp_path.iterdir()) == []
