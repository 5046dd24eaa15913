"""The longest gap a model was fitted on (``TrainingSet.longest_gap``, kept as
``ModelMetadata.longest_gap``) is the longest any example's prompt came back after, in any step:
not the shortest gap of a step, nor the last step's. A model fitted with a longest gap of 0 (sibling
priors only) saw no recurrence at all: the whole gap is unseen, whatever the serving history holds;
only a model that does not say (``None``, saved before it kept the figure) reads the history's."""

from __future__ import annotations

import numpy as np

from predictors.dataset import training_set
from predictors.drift import unseen_gap
from predictors.features import FeatureSpec
from predictors.promptstats import stats_of
from tests.predictors.helpers import drifting_trace, mean_runs


def test_the_longest_gap_is_the_longest_of_any_step_not_the_last_steps_or_a_steps_shortest() -> None:
    """Half the prompts run at steps 0 and 5 only (a gap of 5, met at step 5), the others every
    step (a gap of 1, the only one at steps 6 and 7)."""
    trace = drifting_trace(prompts=40, samples=4, steps=8)
    rare = np.isin(trace.prompt_id, np.unique(trace.prompt_id)[:20])
    mixed = trace.take(~rare | np.isin(trace.step, [0, 5]))
    assert training_set(mixed, FeatureSpec.of(mixed)).longest_gap == 5


def test_a_model_fitted_on_no_recurrence_leaves_the_whole_gap_unseen_whatever_the_history_holds() -> None:
    stats = stats_of(mean_runs([(0, "a", 100), (2, "a", 110), (3, "b", 100)]), 4)  # a came back after 2
    a = np.array([stats.index["a"]])
    assert unseen_gap(stats, a, 5).tolist() == [1.0]  # a model that does not say: the history's 2
    assert unseen_gap(stats, a, 5, fitted_longest=0).tolist() == [3.0]
    assert unseen_gap(stats, a, 5, fitted_longest=2).tolist() == [1.0]
