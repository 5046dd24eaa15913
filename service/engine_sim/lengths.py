"""Where the simulated engine gets each response's length: the request, a trace, or a seeded draw.

A real engine decides a response's length by sampling until EOS. The stand-in has no model, so the
length must come from outside, in this order:

1. the request's extra body field ``"rollout": {"output_tokens": N}`` (tests and benchmarks that know
   the "true" length set it directly);
2. a trace file (``--trace``; the project's trace format: csv, jsonl or parquet) keyed by
   ``rollout.prompt_id`` and ``rollout.sample_idx`` (an unknown sample index takes the prompt's
   samples in turn);
3. otherwise a deterministic log-normal draw seeded by the prompt id (or text) and sample index, so a
   demo shows heavy-tailed lengths that repeat across epochs, as real prompts do.

``max_tokens`` caps the length; a response that reaches the cap finishes with ``"length"``. The
request's ``ignore_eos`` and ``min_tokens`` act on the length as in vLLM (``LengthSource.resolve``).
"""

from __future__ import annotations

import hashlib
import math
import random
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from scheduler.errors import InvalidInputError

CHARS_PER_TOKEN = 4  # prompt-length estimate for text without a ``rollout.prompt_tokens`` hint


@dataclass(frozen=True, slots=True)
class RolloutHint:
    """The optional ``rollout`` object of a request body (ignored by real engines)."""

    prompt_id: str | None = None  # stable prompt identity (trace key)
    sample_idx: int = 0  # sample within the prompt's group (trace key)
    output_tokens: int | None = None  # the length to generate, when the caller knows it
    prompt_tokens: int | None = None  # the prompt length, when the caller knows it


@dataclass(frozen=True, slots=True)
class Outcome:
    """The length the engine will generate and the finish reason it will report."""

    tokens: int  # tokens to generate (<= max_tokens)
    finish_reason: str  # "stop" or "length"


@dataclass(frozen=True, slots=True)
class LengthSource:
    """Resolves a request to an output length (see the module docstring for the order)."""

    by_sample: Mapping[tuple[str, int], int] = field(default_factory=dict)  # trace: (prompt, sample)
    by_prompt: Mapping[str, tuple[int, ...]] = field(default_factory=dict)  # trace: prompt -> lengths
    median_tokens: int = 512  # median of the fallback draw
    sigma: float = 1.0  # log-space spread of the fallback draw (1.0: p90/p50 ~ 3.6)

    def __post_init__(self) -> None:
        # the draw takes log(median): a median of 0 would fail every request that falls back to it
        if self.median_tokens < 1:
            raise InvalidInputError("median_tokens", self.median_tokens, "must be >= 1")
        if not (math.isfinite(self.sigma) and self.sigma >= 0):
            raise InvalidInputError("sigma", self.sigma, "must be a finite number >= 0")

    def resolve(
        self,
        hint: RolloutHint,
        prompt_text: str,
        max_tokens: int,
        min_tokens: int = 0,
        ignore_eos: bool = False,
    ) -> Outcome:
        """Return the length to generate for one request, capped by ``max_tokens``.

        As in vLLM, ``ignore_eos`` generates to the cap (the model's own end is ignored) and
        ``min_tokens`` holds the end back until that many tokens are out."""
        wanted = max_tokens if ignore_eos else max(min_tokens, self._wanted(hint, prompt_text))
        if wanted >= max_tokens:
            return Outcome(max_tokens, "length")
        return Outcome(wanted, "stop")

    def _wanted(self, hint: RolloutHint, prompt_text: str) -> int:
        if hint.output_tokens is not None:
            return hint.output_tokens
        if hint.prompt_id is not None:
            exact = self.by_sample.get((hint.prompt_id, hint.sample_idx))
            if exact is not None:
                return exact
            samples = self.by_prompt.get(hint.prompt_id)
            if samples:
                return samples[hint.sample_idx % len(samples)]
        seed_text = hint.prompt_id if hint.prompt_id is not None else prompt_text
        return self._draw(f"{seed_text}\x00{hint.sample_idx}")

    def _draw(self, key: str) -> int:
        seed = int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big")
        value = random.Random(seed).lognormvariate(math.log(self.median_tokens), self.sigma)
        return max(1, round(value))


def estimate_prompt_tokens(hint: RolloutHint, prompt: str | list[int]) -> int:
    """Prompt length: the token-id count, else the hint, else text length / ``CHARS_PER_TOKEN``.

    Ids are counted as a real engine counts them, over the hint: a publisher whose ``prompt_tokens``
    disagrees with its ids then sees the engine's count in the result (``engine_prompt_tokens``), as
    on vLLM, rather than its own number echoed back."""
    if isinstance(prompt, list):
        return len(prompt)
    if hint.prompt_tokens is not None:
        return hint.prompt_tokens
    return max(1, math.ceil(len(prompt) / CHARS_PER_TOKEN))


def load_trace(path: Path, step: int | None = None, median_tokens: int = 512) -> LengthSource:
    """Read a trace (csv, jsonl or parquet) into a length source; ``step`` None keeps the last step."""
    from predictors.traceio import read_trace  # numpy/pyarrow: only when a trace is given

    trace = read_trace(path)
    chosen = int(trace.step.max()) if step is None else step
    rows = [r for r in trace.rows() if r.step == chosen]
    if not rows:
        raise InvalidInputError("trace_step", chosen, f"no rows of that step in {path}")
    by_sample = {(r.prompt_id, r.sample_idx): r.output_tokens for r in rows}
    grouped: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for row in rows:
        grouped[row.prompt_id].append((row.sample_idx, row.output_tokens))
    by_prompt = {pid: tuple(n for _, n in sorted(pairs)) for pid, pairs in grouped.items()}
    return LengthSource(by_sample, by_prompt, median_tokens=median_tokens)
