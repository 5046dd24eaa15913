"""A calibrated generator of synthetic rollout traces, for replays where no real history exists.

Why a model and not resampling: the replay needs many steps of the SAME prompts (so a predictor can
learn from earlier steps), with rewards that persist and drift and lengths that grow, at sizes the real
data does not have. The generator reproduces the real data's figures (scheduler/synth_profiles.py,
docs/synth.md) and labels every row ``source=synthetic`` so a synthetic trace is never mistaken for a
recorded one.

Pure and deterministic: a seeded ``numpy.random.Generator`` per step (spawned from one SeedSequence),
no I/O. Step t of a trace does not depend on how many steps were asked for, so a 3-step trace is the
prefix of a 6-step trace with the same seed.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from scheduler.errors import InvalidInputError
from scheduler.synth_profiles import SynthProfile
from scheduler.trace import TraceRow

SOURCE_COLUMN = "source"  # the label column every synthetic row carries
SOURCE_VALUE = "synthetic"

IntArray = npt.NDArray[np.int64]
MAX_ROWS = 50_000_000  # ~2 GB of columns: past it a trace is a typo, not a benchmark
MAX_DRIFT = 1.0  # log-length per step: e^1, lengths x2.7 every step, is already no training run
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class SynthSpec:
    """What to generate."""

    profile: SynthProfile  # the rollout regime (scheduler.synth_profiles)
    prompts: int  # distinct prompts, revisited every step
    samples: int  # samples per prompt per step (the GRPO group size)
    steps: int  # training steps (epochs), numbered 0..steps-1
    seed: int = 0  # fixes every draw


@dataclass(frozen=True, eq=False)
class SynthTrace:
    """The generated trace, column by column (one entry per trajectory), step-major then prompt, sample."""

    profile: str  # the profile's name, for provenance
    prompt_ids: tuple[str, ...]  # id of prompt index i
    max_new_tokens: int  # the cap every row was generated under
    step: IntArray
    prompt_index: IntArray  # index into prompt_ids
    sample_idx: IntArray
    prompt_tokens: IntArray
    output_tokens: IntArray
    truncated: BoolArray  # stopped at the cap (finish_reason "length")
    reward: FloatArray  # 1.0 correct, 0.0 incorrect (a truncated answer is never correct)

    def __len__(self) -> int:
        return len(self.step)

    def rows(self) -> Iterator[TraceRow]:
        """The trace as ``TraceRow`` objects, each labelled ``source=synthetic``."""
        for i in range(len(self)):
            yield TraceRow(
                step=int(self.step[i]),
                prompt_id=self.prompt_ids[int(self.prompt_index[i])],
                sample_idx=int(self.sample_idx[i]),
                prompt_tokens=int(self.prompt_tokens[i]),
                output_tokens=int(self.output_tokens[i]),
                max_new_tokens=self.max_new_tokens,
                finish_reason="length" if self.truncated[i] else "stop",
                reward=float(self.reward[i]),
                features={SOURCE_COLUMN: SOURCE_VALUE},
            )


@dataclass(frozen=True, eq=False)
class _Prompts:
    """Per-prompt latent state drawn once and kept for every step."""

    logit0: FloatArray  # solve logit at step 0
    solvable: BoolArray  # False: never solved
    log_length: FloatArray  # log of the prompt's median correct length at step 0
    within_sigma: FloatArray  # within-prompt log-sd of length
    prompt_tokens: IntArray


def generate(spec: SynthSpec) -> SynthTrace:
    """Generate ``prompts x samples x steps`` trajectories under ``spec.profile``, reproducibly."""
    _validate(spec)
    root = np.random.SeedSequence(spec.seed)
    prompt_seed, *step_seeds = root.spawn(1 + spec.steps)
    prompts = _draw_prompts(spec.profile, spec.prompts, np.random.default_rng(prompt_seed))
    n, k = spec.prompts, spec.samples
    columns: list[tuple[IntArray, BoolArray, FloatArray]] = []
    logit = prompts.logit0
    for t, seed in enumerate(step_seeds):
        rng = np.random.default_rng(seed)
        if t > 0:
            logit = _step_logit(spec.profile, logit, rng)
        columns.append(_draw_step(spec.profile, prompts, logit, t, k, rng))
    steps = spec.steps
    return SynthTrace(
        profile=spec.profile.name,
        prompt_ids=tuple(f"synth-{i:06d}" for i in range(n)),
        max_new_tokens=spec.profile.length.max_new_tokens,
        step=np.repeat(np.arange(steps, dtype=np.int64), n * k),
        prompt_index=np.tile(np.repeat(np.arange(n, dtype=np.int64), k), steps),
        sample_idx=np.tile(np.arange(k, dtype=np.int64), n * steps),
        prompt_tokens=np.tile(np.repeat(prompts.prompt_tokens, k), steps),
        output_tokens=np.concatenate([c[0] for c in columns]),
        truncated=np.concatenate([c[1] for c in columns]),
        reward=np.concatenate([c[2] for c in columns]),
    )


def _validate(spec: SynthSpec) -> None:
    for name in ("prompts", "samples", "steps"):
        value = getattr(spec, name)
        if value < 1:
            raise InvalidInputError(name, value, "must be >= 1")
    rows = spec.prompts * spec.samples * spec.steps
    if rows > MAX_ROWS:
        raise InvalidInputError("prompts x samples x steps", rows, f"must be at most {MAX_ROWS:,} rows")
    if spec.seed < 0:
        raise InvalidInputError("seed", spec.seed, "must be >= 0")
    drift = spec.profile.length.drift_per_step
    if not math.isfinite(drift) or abs(drift) > MAX_DRIFT:
        raise InvalidInputError("drift", drift, f"must be a finite log-length per step within +-{MAX_DRIFT}")


def _draw_prompts(profile: SynthProfile, n: int, rng: np.random.Generator) -> _Prompts:
    """Draw each prompt's difficulty, typical length, spread and prompt length."""
    rw, ln, pr = profile.reward, profile.length, profile.prompt
    z = rng.normal(size=n)
    solvable = rng.random(n) >= rw.unsolvable_share
    hardness = np.where(solvable, -z, profile.unsolvable_hardness)
    prompt_log = rng.normal(size=n) * pr.sigma
    prompt_tokens = np.maximum(1, np.rint(pr.median_tokens * np.exp(prompt_log))).astype(np.int64)
    log_length = (
        np.log(ln.median_tokens)
        + ln.hardness_slope * hardness
        + ln.prompt_sigma * rng.normal(size=n)
        + ln.prompt_tokens_slope * prompt_log
    )
    within = ln.within_sigma_median * np.exp(ln.within_sigma_spread * rng.normal(size=n))
    return _Prompts(
        logit0=rw.logit_mean + rw.logit_sd * z,
        solvable=solvable,
        log_length=log_length,
        within_sigma=within,
        prompt_tokens=prompt_tokens,
    )


def _step_logit(profile: SynthProfile, logit: FloatArray, rng: np.random.Generator) -> FloatArray:
    """One training step of progress: every prompt drifts up and wanders a little."""
    rw = profile.reward
    return logit + rw.drift_per_step + rw.step_sd * rng.normal(size=len(logit))


def _draw_step(
    profile: SynthProfile, prompts: _Prompts, logit: FloatArray, t: int, k: int, rng: np.random.Generator
) -> tuple[IntArray, BoolArray, FloatArray]:
    """Draw the k samples of every prompt at step t: correctness first, then length given it."""
    ln = profile.length
    n = len(logit)
    p_solve = np.where(prompts.solvable, 1.0 / (1.0 + np.exp(-logit)), 0.0)
    correct = rng.random((n, k)) < p_solve[:, None]
    log_len = (
        prompts.log_length[:, None]
        + ln.incorrect_gap * ~correct
        + ln.drift_per_step * t
        + prompts.within_sigma[:, None] * rng.normal(size=(n, k))
    )
    # Capped in log space first: a long trace's drift takes a log-length past exp's float range
    # (numpy then warned of an overflow on stderr), and anything above log(cap) is the cap anyway.
    length = np.clip(np.rint(np.exp(np.minimum(log_len, math.log(ln.max_new_tokens)))), 1, ln.max_new_tokens)
    length = length.astype(np.int64)
    truncated = length >= ln.max_new_tokens
    reward = (correct & ~truncated).astype(np.float64)
    return length.ravel(), truncated.ravel(), reward.ravel()
