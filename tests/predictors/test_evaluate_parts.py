"""``evaluate.mean_over``: the scores of a part of a run, the steps in [first, stop), as
``predictor bench --rotate`` reports the steps where rotating prompts first come back apart from
the rest (its bounds split the run: no step is counted in both parts)."""

from __future__ import annotations

from predictors.evaluate import PREDICTORS, Evaluation, Scores, StepScores, mean_over


def _step(step: int, mae: float) -> StepScores:
    scores = Scores(mae=mae, mape=0.0, spearman=0.0, kendall=0.0, p90_coverage=0.0)
    return StepScores(step=step, rows=1, fit_rows=1, scores=dict.fromkeys(PREDICTORS, scores))


def test_a_part_of_a_run_holds_its_first_step_and_not_its_stop() -> None:
    run = Evaluation(steps=(_step(1, 10.0), _step(2, 20.0), _step(3, 40.0)), mean={}, note="")
    assert mean_over(run, 2, 3)["lightgbm"].mae == 20.0
    assert mean_over(run, 1, 2)["lightgbm"].mae == 10.0
    assert mean_over(run, 2)["lightgbm"].mae == 30.0
    assert mean_over(run, 4) == {}
