"""Synthetic traces from the calibrated generator (scheduler.synth) in the predictors' columnar form.

Benchmarks and drift evaluations need multi-epoch traces of any size; converting the generator's
columns directly avoids a million ``TraceRow`` objects.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from predictors.tracetable import FINISH_LENGTH, Trace
from scheduler.errors import InvalidInputError
from scheduler.synth import SOURCE_COLUMN, SOURCE_VALUE, SynthSpec, SynthTrace, generate
from scheduler.synth_profiles import synth_profile


def from_synth(synth: SynthTrace) -> Trace:
    """The generator's columns as a ``Trace`` (labelled ``source=synthetic`` like its rows)."""
    n = len(synth)
    ids = np.empty(len(synth.prompt_ids), dtype=object)
    ids[:] = synth.prompt_ids
    label = np.empty(n, dtype=object)
    label[:] = SOURCE_VALUE
    return Trace(
        step=synth.step.astype(np.int64),
        prompt_id=ids[synth.prompt_index],
        sample_idx=synth.sample_idx.astype(np.int64),
        prompt_tokens=synth.prompt_tokens.astype(np.int64),
        output_tokens=synth.output_tokens.astype(np.int64),
        max_new_tokens=np.full(n, synth.max_new_tokens, dtype=np.int64),
        finish_reason=np.where(synth.truncated, FINISH_LENGTH, 0).astype(np.int8),
        reward=synth.reward.astype(np.float64),
        categorical={SOURCE_COLUMN: label},
    )


def synthetic_trace(
    profile: str, prompts: int, samples: int, steps: int, seed: int = 0, drift: float | None = None
) -> Trace:
    """A seeded multi-epoch trace of the named profile (``short-cot`` or ``long-cot``).

    ``drift`` overrides the profile's length drift (log-length added per step): the profiles assume
    +0.5%/step (short) and +1%/step (long); evaluations of drift-aware prediction sweep it.
    """
    chosen = synth_profile(profile)
    if drift is not None:
        chosen = dataclasses.replace(chosen, length=dataclasses.replace(chosen.length, drift_per_step=drift))
    spec = SynthSpec(profile=chosen, prompts=prompts, samples=samples, steps=steps, seed=seed)
    return from_synth(generate(spec))


def rotating(trace: Trace, every: int) -> Trace:
    """The rows of prompts that run every ``every``-th step: prompt k (in sorted id order) runs at the
    steps s with s % every == k % every, as a dataset of ``every`` batches does when each pass over it
    takes ``every`` steps (veRL, OpenRLHF): between two runs of a prompt lie ``every`` steps of drift,
    where a trace of every prompt at every step has one. ``every`` = 1 keeps every row."""
    if every < 1:
        raise InvalidInputError("rotate", every, "must be an integer >= 1")
    _, code = np.unique(trace.prompt_id.astype(str), return_inverse=True)
    return trace if every == 1 else trace.take(code.ravel() % every == trace.step % every)


def is_synthetic(trace: Trace) -> bool:
    """Whether any row of ``trace`` carries the generator's label (``source=synthetic``): figures
    computed from it are the generator's, not a recorded run's, and must say so. The label survives
    a round trip through a file and ``trace import``, as an extra column does."""
    if SOURCE_COLUMN not in trace.categorical:
        return False
    return bool(np.any(trace.categorical[SOURCE_COLUMN] == SOURCE_VALUE))
