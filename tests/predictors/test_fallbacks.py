"""The fallbacks' rules: prompt-length bins of enough rows, stated defaults, a spread from history."""

from __future__ import annotations

import math

import numpy as np
import pytest

from predictors.fallbacks import GlobalPrior, PriorDefaults, pooled_log_sd
from predictors.priorcounts import MAX_BINS, MIN_BIN_ROWS
from predictors.promptstats import stats_of
from predictors.tracetable import Trace
from scheduler.trace import TraceRow


def _columns(prompts: list[int], outputs: list[int]) -> tuple[np.ndarray, np.ndarray]:
    return np.array(prompts, dtype=np.int64), np.array(outputs, dtype=np.int64)


@pytest.mark.parametrize(("rows", "bins"), [(49, 1), (120, 2), (400, MAX_BINS), (4_000, MAX_BINS)])
def test_the_prior_cuts_as_many_bins_as_rows_allow_each_of_min_bin_rows_or_more(rows: int, bins: int) -> None:
    prior = GlobalPrior.of(*_columns(list(range(100, 100 + rows)), [200] * rows))
    assert len(prior.edges) + 1 == bins
    counts = np.bincount(np.searchsorted(prior.edges, np.arange(100, 100 + rows), side="right"))
    assert counts.min() >= MIN_BIN_ROWS or bins == 1


def test_with_no_history_the_prior_answers_the_stated_shares_of_the_cap() -> None:
    prior = GlobalPrior.of(*_columns([], []), PriorDefaults(p50_share=0.5, p90_share=0.9))
    p50, p90 = prior.predict(np.array([10]), np.array([1_000]))
    assert (p50[0], p90[0]) == (500.0, 900.0)


def test_many_prompts_of_one_shortest_length_do_not_merge_the_longer_prompts_bin_away() -> None:
    prompts, outputs = [100] * 200 + [1_000 + i for i in range(100)], [100] * 200 + [2_000] * 100
    prior = GlobalPrior.of(*_columns(prompts, outputs))
    p50, _ = prior.predict(np.array([100, 1_050]), np.array([4_096, 4_096]))
    assert p50.tolist() == [100.0, 2_000.0]


def test_with_one_sample_a_prompt_a_step_the_spread_comes_from_each_prompt_s_steps() -> None:
    lengths = {"a": [100, 200], "b": [400, 100]}  # two steps, one sample of each prompt a step
    rows = [TraceRow(s, p, 0, 50, n[s], 4096, "stop", 1.0, {}) for p, n in lengths.items() for s in (0, 1)]
    sd = pooled_log_sd(stats_of(Trace.from_rows(rows), before=2))
    deviations = [np.log(n) - np.mean(np.log(n)) for n in lengths.values()]
    expected = math.sqrt(sum(float(np.sum(d**2)) for d in deviations) / 2)  # one degree of freedom each
    assert sd == pytest.approx(expected)
