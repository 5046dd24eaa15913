"""Where simulated response lengths come from: the request, a trace, or a repeatable seeded draw."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from scheduler.errors import InvalidInputError
from service.engine_sim.lengths import LengthSource, RolloutHint, estimate_prompt_tokens, load_trace


def test_the_request_hint_sets_the_length_and_max_tokens_caps_it_with_finish_length() -> None:
    source = LengthSource()
    assert source.resolve(RolloutHint(output_tokens=300), "p", 1000).tokens == 300
    assert source.resolve(RolloutHint(output_tokens=300), "p", 1000).finish_reason == "stop"
    capped = source.resolve(RolloutHint(output_tokens=3000), "p", 1000)
    assert (capped.tokens, capped.finish_reason) == (1000, "length")


def test_a_trace_gives_lengths_by_prompt_and_sample_from_its_last_step(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    rows = [
        '{"step": 0, "prompt_id": "a", "sample_idx": 0, "prompt_tokens": 5, "output_tokens": 11}',
        '{"step": 1, "prompt_id": "a", "sample_idx": 0, "prompt_tokens": 5, "output_tokens": 70}',
        '{"step": 1, "prompt_id": "a", "sample_idx": 1, "prompt_tokens": 5, "output_tokens": 90}',
    ]
    path.write_text("\n".join(rows) + "\n")
    source = load_trace(path)
    assert source.resolve(RolloutHint("a", 1), "", 10_000).tokens == 90
    assert source.resolve(RolloutHint("a", 4), "", 10_000).tokens == 70  # unknown sample: in turn
    assert load_trace(path, step=0).resolve(RolloutHint("a", 0), "", 10_000).tokens == 11
    with pytest.raises(InvalidInputError, match="trace_step"):
        load_trace(path, step=7)


def test_without_hint_or_trace_the_draw_is_repeatable_per_prompt_and_heavy_tailed() -> None:
    source = LengthSource(median_tokens=500)
    first = [source.resolve(RolloutHint(f"p{i}", 0), "", 1 << 20).tokens for i in range(400)]
    again = [source.resolve(RolloutHint(f"p{i}", 0), "", 1 << 20).tokens for i in range(400)]
    assert first == again
    ordered = sorted(first)
    assert 350 < ordered[200] < 700  # median near the configured one
    assert ordered[360] > 2.5 * ordered[200]  # a long tail


def test_prompt_length_comes_from_the_token_ids_then_the_hint_then_text() -> None:
    assert estimate_prompt_tokens(RolloutHint(prompt_tokens=42), [7, 8, 9]) == 3  # counted as vLLM would
    assert estimate_prompt_tokens(RolloutHint(prompt_tokens=42), "x" * 400) == 42
    assert estimate_prompt_tokens(RolloutHint(), [1, 2, 3]) == 3
    assert estimate_prompt_tokens(RolloutHint(), "x" * 400) == 100


@pytest.mark.parametrize(
    ("field", "value"), [("median_tokens", 0), ("median_tokens", -5), ("sigma", math.nan)]
)
def test_a_fallback_draw_that_cannot_draw_is_refused_at_start(field: str, value: float) -> None:
    with pytest.raises(InvalidInputError, match=field):
        LengthSource(**{field: value})  # type: ignore[arg-type]
