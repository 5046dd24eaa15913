"""``served_examples``: a row whose prompt is new is featurised beside its siblings, which ran in its
own step (the history holds them), so its target is read from their base unmoved: no step passed
between them, and the drift of the steps before is not projected over a gap of none. With every
prompt new at each step, the targets of a step's rows are the same whatever lengths the earlier
steps ran at."""

from __future__ import annotations

import dataclasses

import numpy as np

from predictors.dataset import served_examples
from predictors.features import FeatureSpec
from predictors.tracetable import Trace
from tests.predictors.helpers import drifting_trace


def _fresh_prompts(trace: Trace, earlier_scale: float) -> Trace:
    """Each prompt renamed per step (no prompt recurs), the steps before the last scaled."""
    last = int(trace.step.max())
    ids = np.array([f"{p}@{s}" for p, s in zip(trace.prompt_id, trace.step, strict=True)], dtype=object)
    scaled = np.maximum(1, np.round(trace.output_tokens * earlier_scale))
    out = np.where(trace.step < last, scaled, trace.output_tokens)
    return dataclasses.replace(trace, prompt_id=ids, output_tokens=out.astype(trace.output_tokens.dtype))


def test_the_targets_of_rows_beside_their_siblings_ignore_the_drift_of_the_steps_before() -> None:
    base = drifting_trace(prompts=30, samples=4, steps=4, drift=0.05)
    targets = []
    for scale in (1.0, 0.5):  # the steps before the last ran at their lengths, or at half of them
        trace = _fresh_prompts(base, scale)
        scored = (trace.step == 3) & (trace.sample_idx == 0)  # its siblings: the step's other samples
        history, rows = trace.take(~scored), trace.take(scored)
        _, y = served_examples(history, rows, FeatureSpec.of(trace))
        targets.append(y)
    assert len(targets[0]) == len(rows)
    np.testing.assert_allclose(targets[0], targets[1])
