"""``write_all``: a command's outputs written all or none, whatever their names."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.errors import InvalidInputError
from service.outpaths import write_all


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
