"""The replay report's labels: Gantt panel titles show a makespan at a precision that tells steps
apart, and the headline names the pool so that it can be replayed again."""

from __future__ import annotations

import pytest

from service.replay.report import panel_title
from service.workerspec import parse_workers, pool_label


@pytest.mark.parametrize(
    ("makespan_s", "shown"),
    [(0.42, "0.4"), (7.25, "7.2"), (99.94, "99.9"), (99.96, "100"), (100.0, "100"), (1234.6, "1,235")],
)
def test_a_panel_title_keeps_a_decimal_below_100_seconds(makespan_s: float, shown: str) -> None:
    # Whole seconds titled a sub-second step "lpt: makespan 0 s".
    assert panel_title("lpt", makespan_s) == f"lpt: makespan {shown} s"


@pytest.mark.parametrize(
    "spec", ["8xH100,8xAscend910B", "2xH100:64,2xA100", "2xH100:64,2xH100", "1xH200:1,3xH200:512,1xH100:256"]
)
def test_the_pool_label_is_a_spec_that_gives_the_same_pool_back(spec: str) -> None:
    # The label counted devices only: 2xH100:64,2xH100 read "4xH100", the 64 lost from every table,
    # chart and report of a replay that set it.
    inventory = parse_workers(spec)
    again = parse_workers(pool_label(inventory))
    assert [(w.device, w.max_num_seqs) for w in again.workers] == [
        (w.device, w.max_num_seqs) for w in inventory.workers
    ]
