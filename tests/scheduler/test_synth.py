"""The synthetic trace generator reproduces the real figures, reproducibly, and says it is synthetic."""

from __future__ import annotations

import csv
import dataclasses
import warnings
from pathlib import Path

import numpy as np
import pytest

from scheduler.errors import InvalidInputError, UnknownNameError
from scheduler.synth import MAX_DRIFT, SOURCE_COLUMN, SOURCE_VALUE, SynthSpec, SynthTrace, generate
from scheduler.synth_profiles import LONG_COT, SHORT_COT, synth_profile
from scheduler.synth_stats import LengthFigures, lag_correlation, length_figures, reward_matrix

# The real figures the README of ../shared/data states (also recomputed from the files where present).
REAL_WITHIN_PROMPT_CV = 0.128
REAL_CORRECT_MEAN = 378.0
REAL_INCORRECT_MEAN = 514.0
REAL_REWARD_LAG1 = 0.917
REAL_REWARD_START, REAL_REWARD_AT_50 = 0.335, 0.491
LONG_COT_MEDIAN = 11_000.0
LONG_COT_TRUNCATED = 0.20


@pytest.fixture(scope="module")
def rl_run() -> SynthTrace:
    """The shape of the real GRPO history: 1,209 prompts x 8 rollouts x 51 epochs."""
    return generate(SynthSpec(SHORT_COT, prompts=1209, samples=8, steps=51, seed=0))


@pytest.fixture(scope="module")
def headline() -> SynthTrace:
    """The headline replay's trace: long CoT, 256 prompts x 16 samples x 6 steps."""
    return generate(SynthSpec(LONG_COT, prompts=256, samples=16, steps=6, seed=1))


def _step_figures(trace: SynthTrace, step: int) -> LengthFigures:
    rows = trace.step == step
    return length_figures(
        trace.prompt_index[rows], trace.output_tokens[rows], trace.reward[rows], trace.truncated[rows]
    )


def test_short_cot_lengths_vary_within_a_prompt_like_real_samples(rl_run: SynthTrace) -> None:
    assert _step_figures(rl_run, 0).within_prompt_cv == pytest.approx(REAL_WITHIN_PROMPT_CV, abs=0.02)


def test_short_cot_incorrect_answers_run_longer_than_correct_ones(rl_run: SynthTrace) -> None:
    figures = _step_figures(rl_run, 0)
    assert figures.correct_mean_tokens == pytest.approx(REAL_CORRECT_MEAN, rel=0.08)
    assert figures.incorrect_mean_tokens == pytest.approx(REAL_INCORRECT_MEAN, rel=0.08)
    assert figures.incorrect_over_correct == pytest.approx(REAL_INCORRECT_MEAN / REAL_CORRECT_MEAN, abs=0.08)


def test_a_prompts_reward_persists_across_epochs(rl_run: SynthTrace) -> None:
    rewards = reward_matrix(rl_run.step, rl_run.prompt_index, rl_run.reward)
    assert lag_correlation(rewards, 1) == pytest.approx(REAL_REWARD_LAG1, abs=0.025)
    assert lag_correlation(rewards, 40) < lag_correlation(rewards, 1)


def test_mean_reward_rises_over_training_like_the_real_run(rl_run: SynthTrace) -> None:
    rewards = reward_matrix(rl_run.step, rl_run.prompt_index, rl_run.reward)
    assert rewards[:, 0].mean() == pytest.approx(REAL_REWARD_START, abs=0.03)
    assert rewards[:, 50].mean() == pytest.approx(REAL_REWARD_AT_50, abs=0.03)


def test_response_lengths_drift_upward_during_training(rl_run: SynthTrace) -> None:
    means = np.array([rl_run.output_tokens[rl_run.step == t].mean() for t in range(51)])
    assert np.corrcoef(np.arange(51), means)[0, 1] > 0.9
    assert means[-1] > 1.15 * means[0]


def test_long_cot_has_a_median_near_11k_and_a_fifth_truncated_at_the_cap(headline: SynthTrace) -> None:
    figures = _step_figures(headline, 0)
    assert figures.median_tokens == pytest.approx(LONG_COT_MEDIAN, rel=0.10)
    assert figures.p90_tokens == LONG_COT.length.max_new_tokens
    assert figures.truncated_share == pytest.approx(LONG_COT_TRUNCATED, abs=0.04)


def test_a_truncated_answer_is_never_correct_and_never_exceeds_the_cap(headline: SynthTrace) -> None:
    assert headline.output_tokens.max() == headline.max_new_tokens
    assert not np.any(headline.reward[headline.truncated] > 0)
    assert np.array_equal(headline.truncated, headline.output_tokens >= headline.max_new_tokens)


def test_lengths_drifted_far_past_the_cap_are_capped_without_a_numeric_overflow_warning() -> None:
    # At the largest drift allowed, a log-length passes exp's float range after ~700 steps (long-cot's
    # own drift gets there after ~70,000): numpy warned "overflow encountered in exp" on stderr.
    profile = dataclasses.replace(
        SHORT_COT, length=dataclasses.replace(SHORT_COT.length, drift_per_step=MAX_DRIFT)
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trace = generate(SynthSpec(profile, prompts=2, samples=2, steps=800, seed=0))
    late = trace.step >= 700
    assert np.all(trace.output_tokens[late] == trace.max_new_tokens)
    assert np.all(trace.truncated[late])


def test_the_same_seed_gives_the_same_trace_and_another_seed_a_different_one() -> None:
    a = generate(SynthSpec(SHORT_COT, prompts=20, samples=4, steps=3, seed=7))
    b = generate(SynthSpec(SHORT_COT, prompts=20, samples=4, steps=3, seed=7))
    c = generate(SynthSpec(SHORT_COT, prompts=20, samples=4, steps=3, seed=8))
    assert np.array_equal(a.output_tokens, b.output_tokens)
    assert np.array_equal(a.reward, b.reward)
    assert not np.array_equal(a.output_tokens, c.output_tokens)


def test_a_shorter_trace_is_the_prefix_of_a_longer_one_with_the_same_seed() -> None:
    short = generate(SynthSpec(LONG_COT, prompts=10, samples=2, steps=2, seed=3))
    long = generate(SynthSpec(LONG_COT, prompts=10, samples=2, steps=5, seed=3))
    assert np.array_equal(short.output_tokens, long.output_tokens[: len(short)])
    assert np.array_equal(short.reward, long.reward[: len(short)])


def test_every_row_is_labelled_synthetic_and_valid_trace_schema() -> None:
    trace = generate(SynthSpec(SHORT_COT, prompts=5, samples=3, steps=2, seed=0))
    rows = list(trace.rows())
    assert len(rows) == 5 * 3 * 2
    assert {r.features[SOURCE_COLUMN] for r in rows} == {SOURCE_VALUE}
    assert {(r.step, r.prompt_id, r.sample_idx) for r in rows} == {
        (t, f"synth-{i:06d}", k) for t in range(2) for i in range(5) for k in range(3)
    }
    assert all(r.finish_reason in {"stop", "length"} and r.max_new_tokens == 4096 for r in rows)


@pytest.mark.parametrize("field", ["prompts", "samples", "steps"])
def test_an_empty_dimension_is_rejected_by_name(field: str) -> None:
    sizes = {"prompts": 2, "samples": 2, "steps": 2, field: 0}
    with pytest.raises(InvalidInputError, match=field):
        generate(SynthSpec(SHORT_COT, seed=0, **sizes))


def test_an_unknown_profile_is_rejected_with_the_known_ones() -> None:
    with pytest.raises(UnknownNameError, match="long-cot"):
        synth_profile("medium-cot")


@pytest.mark.realdata
def test_the_figures_match_the_real_short_cot_trace_computed_the_same_way(
    shared_data: Path, rl_run: SynthTrace
) -> None:
    with (shared_data / "math100_x8.trace.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    codes = {pid: i for i, pid in enumerate(dict.fromkeys(r["prompt_id"] for r in rows))}
    real = length_figures(
        np.array([codes[r["prompt_id"]] for r in rows]),
        np.array([int(r["output_tokens"]) for r in rows]),
        np.array([float(r["reward"]) for r in rows]),
        np.array([r["finish_reason"] == "length" for r in rows]),
    )
    ours = _step_figures(rl_run, 0)
    assert ours.within_prompt_cv == pytest.approx(real.within_prompt_cv, abs=0.02)
    assert ours.incorrect_over_correct == pytest.approx(real.incorrect_over_correct, abs=0.08)


@pytest.mark.realdata
def test_reward_persistence_matches_the_real_grpo_history(shared_data: Path, rl_run: SynthTrace) -> None:
    with (shared_data / "oneshot_rlvr_reward_history.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    codes = {pid: i for i, pid in enumerate(dict.fromkeys(r["prompt_id"] for r in rows))}
    real = reward_matrix(
        np.array([int(r["epoch"]) for r in rows]),
        np.array([codes[r["prompt_id"]] for r in rows]),
        np.array([float(r["mean_reward_8rollouts"]) for r in rows]),
    )
    ours = reward_matrix(rl_run.step, rl_run.prompt_index, rl_run.reward)
    assert lag_correlation(ours, 1) == pytest.approx(lag_correlation(real, 1), abs=0.025)
    assert np.nanmean(ours[:, 0]) == pytest.approx(np.nanmean(real[:, 0]), abs=0.03)
