"""The figures a trace generator is calibrated against, computed the same way on real and synthetic data.

Why one module for both: a calibration claim ("within-prompt CV 0.13 like the real data") only means
something if the real figure and the generator's figure come from the same code. Inputs are plain
numpy columns (one entry per trajectory), so this stays in the pure core.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class LengthFigures:
    """Length statistics of one set of trajectories."""

    median_tokens: float  # median output length
    p90_tokens: float  # 90th percentile of output length
    truncated_share: float  # share stopped at the cap
    within_prompt_cv: float  # mean over prompts of std/mean of their samples' lengths (population std)
    correct_mean_tokens: float  # mean length of correct samples (NaN when none)
    incorrect_mean_tokens: float  # mean length of incorrect samples (NaN when none)

    @property
    def incorrect_over_correct(self) -> float:
        """How much longer incorrect answers run (real short CoT: 514/378 = 1.36)."""
        return self.incorrect_mean_tokens / self.correct_mean_tokens


def length_figures(
    prompt: IntArray, output: IntArray, reward: FloatArray, truncated: BoolArray
) -> LengthFigures:
    """Length figures of one step (or any set of rows); ``prompt`` holds integer prompt codes."""
    sums = np.bincount(prompt, weights=output)
    squares = np.bincount(prompt, weights=output.astype(np.float64) ** 2)
    counts = np.bincount(prompt)
    seen = counts > 0
    mean = sums[seen] / counts[seen]
    std = np.sqrt(np.maximum(squares[seen] / counts[seen] - mean**2, 0.0))
    correct = reward > 0.5
    return LengthFigures(
        median_tokens=float(np.median(output)),
        p90_tokens=float(np.percentile(output, 90)),
        truncated_share=float(np.mean(truncated)),
        within_prompt_cv=float(np.mean(std / mean)),
        correct_mean_tokens=float(np.mean(output[correct])) if correct.any() else float("nan"),
        incorrect_mean_tokens=float(np.mean(output[~correct])) if (~correct).any() else float("nan"),
    )


def reward_matrix(step: IntArray, prompt: IntArray, reward: FloatArray) -> FloatArray:
    """Per-prompt mean reward, shape (prompts, steps); NaN where a prompt has no row at a step."""
    steps = np.unique(step)
    column = np.searchsorted(steps, step)
    n = int(prompt.max()) + 1
    sums = np.zeros((n, len(steps)))
    counts = np.zeros((n, len(steps)))
    np.add.at(sums, (prompt, column), reward)
    np.add.at(counts, (prompt, column), 1.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / counts, np.nan)


def lag_correlation(matrix: FloatArray, lag: int = 1) -> float:
    """Pearson correlation of a prompt's mean reward with its own value ``lag`` steps later, pooled.

    The real GRPO history (oneshot_rlvr_reward_history.csv) gives 0.917 at lag 1: a prompt's
    success rate persists across epochs, which is what makes earlier epochs predictive.
    """
    before, after = matrix[:, :-lag].ravel(), matrix[:, lag:].ravel()
    both = ~(np.isnan(before) | np.isnan(after))
    return float(np.corrcoef(before[both], after[both])[0, 1])


def per_prompt_mae_ratio(fit: tuple[IntArray, IntArray], score: tuple[IntArray, IntArray]) -> float:
    """MAE of the per-prompt mean over the MAE of the global mean, both fitted on ``fit`` and scored
    on ``score`` (each ``(prompt codes, output lengths)``): how much knowing the prompt helps.

    The data README's reference predictors (math100_x8, fit on step 0, score on step 1) give
    56.3 / 120.2 = 0.468: the spread of prompt means against the within-prompt noise, on the linear
    scale a scheduler pays in. Prompts of ``score`` absent from ``fit`` are left out.
    """
    prompt, output = fit
    sums = np.bincount(prompt, weights=output)
    counts = np.bincount(prompt)
    scored_prompt, scored = score
    known = scored_prompt < len(counts)
    known[known] = counts[scored_prompt[known]] > 0
    by_prompt = sums[scored_prompt[known]] / counts[scored_prompt[known]]
    per_prompt = np.abs(scored[known] - by_prompt).mean()
    global_mean = np.abs(scored[known] - output.mean()).mean()
    return float(per_prompt / global_mean)


def solved_shares(matrix: FloatArray, column: int = 0) -> tuple[float, float]:
    """Shares of prompts with none and with all of their samples correct at one step of
    ``reward_matrix``: the U-shaped histogram of a GRPO run (real epoch 0: 36.3% and 7.6%)."""
    values = matrix[:, column]
    values = values[~np.isnan(values)]
    return float(np.mean(values == 0.0)), float(np.mean(values == 1.0))


def prompt_output_log_correlation(prompt_tokens: IntArray, output: IntArray) -> float:
    """Pearson correlation of log prompt length and log output length, one pair per row (real short
    CoT, math100_x8: 0.31): longer problem statements get somewhat longer answers."""
    return float(np.corrcoef(np.log(prompt_tokens), np.log(output))[0, 1])


def never_solved_share(matrix: FloatArray, last_column: int) -> float:
    """Share of prompts with no correct sample in any step of columns ``0..last_column`` of
    ``reward_matrix`` (steps a prompt was not seen are skipped; prompts never seen are left out).

    The real GRPO history gives 18.1% through epoch 5 and 8.3% through epoch 50: most prompts with
    0/8 at epoch 0 (36%) are solved now and then later, so a generator must not park them at 0.
    """
    window = matrix[:, : last_column + 1]
    seen = ~np.isnan(window)
    solved = np.where(seen, window, 0.0) > 0.0
    observed = seen.any(axis=1)
    return float(np.mean(~solved[observed].any(axis=1)))
