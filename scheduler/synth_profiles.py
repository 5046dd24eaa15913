"""The documented parameters of the synthetic trace generator, one profile per rollout regime.

Every number here is either fitted to a figure of the real data in ``../shared/data`` (its README) or,
where the real data has no such figure, an assumption stated as one. docs/synth.md lists each
parameter with the figure it reproduces and the generator's measured value next to the real one.

The model (scheduler/synth.py):

- reward: each prompt has a solve logit ``a_i ~ N(logit_mean, logit_sd)``; a share of prompts is never
  solved; the logit drifts up by ``drift_per_step`` and wanders by ``N(0, step_sd)`` each step; each of
  the K samples is correct with probability ``sigmoid(logit)``.
- length: ``log L = log(median_tokens) + hardness_slope * h_i + prompt_sigma * u_i
  + prompt_tokens_slope * log(p_i / prompt median) + incorrect_gap * [wrong]
  + drift_per_step * t + s_i * z``, where ``h_i = -z-score of a_i`` (``unsolvable_hardness`` for
  never-solved prompts) and the within-prompt spread ``s_i`` is itself log-normal across prompts
  (some prompts answer almost identically, some ramble). Lengths are capped at ``max_new_tokens``;
  a capped sample is marked ``finish_reason=length`` and judged incorrect.
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.errors import UnknownNameError


@dataclass(frozen=True, slots=True)
class RewardDynamics:
    """How likely each prompt is to be solved, and how that moves over training steps."""

    logit_mean: float  # mean solve logit of a solvable prompt at step 0
    logit_sd: float  # spread of solve logits across prompts (sets the U-shaped reward histogram)
    unsolvable_share: float  # share of prompts the policy never solves (reward stays 0)
    drift_per_step: float  # logit gained per step by every solvable prompt (training progress)
    step_sd: float  # per-step random-walk noise of a prompt's logit (slow decorrelation)


@dataclass(frozen=True, slots=True)
class LengthModel:
    """How long each sample's output is, in tokens."""

    median_tokens: float  # median length of a correct answer to a prompt of average hardness at step 0
    prompt_sigma: float  # log-sd of prompt-to-prompt length differences not explained by hardness
    hardness_slope: float  # log-length per standard deviation of prompt hardness
    prompt_tokens_slope: float  # elasticity of output length to prompt length
    within_sigma_median: float  # median over prompts of the within-prompt log-sd
    within_sigma_spread: float  # log-sd across prompts of that within-prompt log-sd
    incorrect_gap: float  # log-length added to an incorrect sample of the same prompt
    drift_per_step: float  # log-length added per training step (responses grow during RL)
    max_new_tokens: int  # generation cap; longer samples are truncated and marked "length"


@dataclass(frozen=True, slots=True)
class PromptLengths:
    """How long the prompts are (log-normal)."""

    median_tokens: float  # median prompt length, tokens
    sigma: float  # log-sd of prompt length


@dataclass(frozen=True, slots=True)
class SynthProfile:
    """One rollout regime: rewards, output lengths and prompt lengths."""

    name: str  # profile name as the CLI spells it
    reward: RewardDynamics
    length: LengthModel
    prompt: PromptLengths
    unsolvable_hardness: float = 2.0  # hardness z-score of a never-solved prompt (97.7th percentile)


# Reward dynamics fitted (Nelder-Mead, 1,209 prompts x 8 samples x 51 steps) to
# oneshot_rlvr_reward_history.csv: mean reward 0.335 at epoch 0 and 0.491 at epoch 50, 36% of
# prompts with 0/8 and 7.6% with 8/8 correct at epoch 0, lag-1 correlation 0.917, lag-40 0.857, and
# the share of prompts never solved through epoch 5 (18.1%) and epoch 50 (8.3%): most of the epoch-0
# 0/8 mass is hard-but-solvable (a wide, low logit distribution), not a block that stays at 0.
_RLVR_REWARD = RewardDynamics(
    logit_mean=-1.34,
    logit_sd=2.83,
    unsolvable_share=0.053,
    drift_per_step=0.028,
    step_sd=0.067,
)

SHORT_COT = SynthProfile(
    name="short-cot",
    reward=_RLVR_REWARD,
    length=LengthModel(
        # Fitted to math100_x8.trace.csv (Qwen2.5-Math-Instruct on MATH): correct answers average
        # 378 tokens, incorrect 514 (+36%); within-prompt CV averages 0.128 (median 0.081).
        median_tokens=405.0,
        prompt_sigma=0.20,
        hardness_slope=0.13,
        prompt_tokens_slope=0.25,  # real log-log correlation of prompt and output length: 0.31
        within_sigma_median=0.09,
        within_sigma_spread=0.85,
        incorrect_gap=0.11,  # within-prompt incorrect/correct ratio of mixed prompts: median 1.12
        drift_per_step=0.005,  # assumption: +0.5%/step (no lengths in the RL history; see docs)
        max_new_tokens=4096,  # the real trace's cap
    ),
    # DeepScaleR prompts in oneshot_rlvr_reward_history.csv: median 80 tokens, log-sd 0.50.
    prompt=PromptLengths(median_tokens=80.0, sigma=0.50),
)

LONG_COT = SynthProfile(
    name="long-cot",
    reward=_RLVR_REWARD,
    length=LengthModel(
        # Published long chain-of-thought rollout statistics (thinking-mode models on competition
        # code): median ~11k tokens, 90th percentile at the cap, ~20% truncated at the cap; the
        # median and the hardness slope are fitted to the first and the last (seeds 0-2, step 0).
        median_tokens=9_900.0,
        prompt_sigma=0.30,
        hardness_slope=0.22,
        prompt_tokens_slope=0.05,
        within_sigma_median=0.22,  # assumption: long CoT varies more within a prompt than short CoT
        within_sigma_spread=0.5,
        incorrect_gap=0.11,  # same within-prompt gap as short CoT (assumption)
        drift_per_step=0.01,  # assumption: +1%/step, long-CoT RL runs grow their responses
        max_new_tokens=16_384,
    ),
    prompt=PromptLengths(median_tokens=600.0, sigma=0.5),  # assumption: competition-code statements
)

PROFILES: dict[str, SynthProfile] = {p.name: p for p in (SHORT_COT, LONG_COT)}


def synth_profile(name: str) -> SynthProfile:
    """Return the built-in profile ``name`` (``short-cot`` or ``long-cot``)."""
    key = name.strip().lower()
    if key not in PROFILES:
        raise UnknownNameError("profile", name, list(PROFILES))
    return PROFILES[key]
