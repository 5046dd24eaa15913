"""A ``serve`` child whose start fails its bound is ended by the helper that started it
(``serve_embedded``): the caller gets no process to end, and one left alive outlived the test with
its embedded server (the bound's failures at load ~30, ci54 and exit54, each left one)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.service.api.serve_embedded import serve_embedded
from tests.service.procfs import children

pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads the children from /proc")


def test_a_serve_that_does_not_listen_within_its_bound_is_not_left_running(tmp_path: Path) -> None:
    before = children()
    with pytest.raises(AssertionError, match="did not listen within"):
        serve_embedded(tmp_path, 1, 0.01)  # no start listens within 10 ms of its own
    assert children() - before == set()
