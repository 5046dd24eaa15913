"""The synthetic generator's output as a ``Trace``, labelled ``source=synthetic`` on every row.

The generator lives in the pure core (``scheduler.synth``) and knows nothing of the columnar
``Trace`` of ``predictors``; this adapter is the one place that joins them, so the CLI, the replay and
the benchmark all write and read the same labelled columns.
"""

from __future__ import annotations

import numpy as np

from predictors.tracetable import FINISH_NAMES, Trace
from scheduler.synth import SOURCE_COLUMN, SOURCE_VALUE, SynthSpec, SynthTrace, generate
from scheduler.synth_profiles import synth_profile

_STOP, _LENGTH = FINISH_NAMES.index("stop"), FINISH_NAMES.index("length")


def to_trace(synth: SynthTrace) -> Trace:
    """Columns of ``synth`` as a ``Trace`` with a ``source`` column reading ``synthetic``."""
    n = len(synth)
    prompt_ids = np.empty(len(synth.prompt_ids), dtype=object)
    prompt_ids[:] = synth.prompt_ids
    source = np.empty(n, dtype=object)
    source[:] = SOURCE_VALUE
    return Trace(
        step=synth.step,
        prompt_id=prompt_ids[synth.prompt_index],
        sample_idx=synth.sample_idx,
        prompt_tokens=synth.prompt_tokens,
        output_tokens=synth.output_tokens,
        max_new_tokens=np.full(n, synth.max_new_tokens, dtype=np.int64),
        finish_reason=np.where(synth.truncated, _LENGTH, _STOP).astype(np.int8),
        reward=synth.reward,
        categorical={SOURCE_COLUMN: source},
    )


def synth_trace(profile: str, prompts: int, samples: int, steps: int, seed: int) -> Trace:
    """Generate a labelled synthetic trace; unknown profile or empty sizes raise ``InvalidInputError``."""
    spec = SynthSpec(synth_profile(profile), prompts=prompts, samples=samples, steps=steps, seed=seed)
    return to_trace(generate(spec))
