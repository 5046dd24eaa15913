"""Training examples from a trace: every row, featurised with only what preceded it.

Walking the steps in order, a row whose prompt ran in an earlier step gets that history as its prior
(the case served in production); a row in its prompt's first step gets its siblings of the same step
as prior instead (leave-one-out, ``gap`` = 0), so that even a one-step trace teaches the model how a
sample relates to the other samples of its prompt. A row with neither is not an example: such
prompts are answered by the global prior.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from predictors.drift import projected
from predictors.features import FeatureSpec, base_length, build_features
from predictors.promptprior import PriorRows, prior_from_stats, prior_leave_one_out
from predictors.promptstats import PromptStats, stats_of, walk_steps
from predictors.queries import NO_CAP, QueryBatch
from predictors.tracetable import FloatArray, IntArray, Trace


@dataclass(frozen=True, eq=False)
class TrainingSet:
    """Feature matrix and target, one example per usable trace row."""

    features: FloatArray  # examples x spec.names
    target: FloatArray  # log(length) - log(base)
    base: FloatArray  # the base length each target is relative to
    rows: IntArray  # trace row of each example
    steps: tuple[int, ...]  # steps covered by the trace
    longest_gap: int = 0  # most steps an example's prompt had gone unrun (0: sibling priors only)


def training_set(trace: Trace, spec: FeatureSpec) -> TrainingSet:
    """All examples of the trace, step by step (vectorised within each step).

    Each step's rows are written into one matrix sized for every row of the trace, where pages never
    written are never resident: the steps' blocks joined at the end (``np.concatenate``) held them
    and the matrix at once, twice the matrix at the fit's peak (2 M examples of 18 features: 0.27 GiB
    each), and the freed blocks stayed with the process (glibc keeps the heap)."""
    x = np.empty((len(trace), len(spec.names)))
    at = 0
    bases: list[FloatArray] = []
    kept: list[IntArray] = []
    steps: list[int] = []
    longest = 0
    for step, stats, rows, groups in walk_steps(trace):
        steps.append(step)
        queries = QueryBatch.from_trace(trace.take(rows), NO_CAP)
        prior = prior_from_stats(stats, queries.prompt_id)
        first = ~prior.seen  # the prompt's first step: its siblings stand in for history
        if not np.all(first):
            longest = max(longest, step - int(prior.last_step[~first].min()))
        merged = _merge(prior, prior_leave_one_out(trace, groups, rows[first]), first)
        usable = merged.seen
        if not np.any(usable):
            continue
        block = build_features(merged, queries, step, stats.trend, spec)[usable]
        x[at : at + len(block)] = block
        at += len(block)
        bases.append(base_length(merged)[usable])
        kept.append(rows[usable])
    if not kept:
        empty = np.empty((0, len(spec.names)))
        return TrainingSet(
            empty, np.empty(0), np.empty(0), np.empty(0, dtype=np.int64), tuple(steps), longest
        )
    base = np.concatenate(bases)
    rows_all = np.concatenate(kept)
    y = np.log(np.maximum(trace.output_tokens[rows_all].astype(np.float64), 1.0))
    return TrainingSet(x[:at], y - np.log(base), base, rows_all, tuple(steps), longest)


def _merge(history: PriorRows, sibling: PriorRows, first: np.ndarray) -> PriorRows:
    """History where the prompt has any; the siblings' prior (given for ``first`` rows only) elsewhere."""
    if not np.any(first):
        return history
    merged = {}
    for name in PriorRows.__dataclass_fields__:
        column = getattr(history, name).copy()
        column[first] = getattr(sibling, name)
        merged[name] = column
    return PriorRows(**merged)


def served_examples(history: Trace, rows: Trace, spec: FeatureSpec) -> tuple[FloatArray, FloatArray]:
    """(features, target) of ``rows``, rows kept out of ``history``, featurised as serving would.

    A row whose prompt ran in an earlier step of ``history`` reads that history, as a training
    example does. A row in its prompt's first step would, as a training example, take its siblings
    as prior, leaving itself out; that prior moves with its own length (an outlier's siblings have
    a lower mean, maximum and spread), so a booster fitted on such rows widens the p90 where the
    prior looks so, which a served query's prior (it does not depend on the query) never does.
    Such a row is featurised instead as serving featurises the next step: a new sample of its
    prompt, the prior its siblings in ``history``. Rows with neither are left out (serving
    answers them from the global prior, not the model).

    The target of a row of a prompt seen before is taken from the base serving predicts from: moved
    by the drift over the part of its gap longer than any the history holds (``drift.projected``);
    one featurised beside its siblings ran in their step, no drift between them. Read from the unmoved
    base, the first step back of prompts rotating every K-th step (a gap no row of the calibration's
    fit holds) gave residuals of the whole drift serving projects away: under +5%/step the next
    model's shift was 0.21 log, its p90 covered 0.978 of the step after (review45b)."""
    parts: list[tuple[FloatArray, FloatArray]] = []
    steps = np.unique(rows.step).tolist()
    stats_at = _stats_before(history, sorted({*steps, *(s + 1 for s in steps)}))
    for step in steps:
        now = rows.take(rows.step == step)
        queries = QueryBatch.from_trace(now, NO_CAP)
        earlier, through = stats_at[step], stats_at[step + 1]
        prior = prior_from_stats(earlier, queries.prompt_id)
        first = ~prior.seen
        for stats, chosen, at in ((earlier, ~first, step), (through, first, step + 1)):
            ids = queries.prompt_id[chosen]
            prior = prior_from_stats(stats, ids)
            x = build_features(prior, queries.take(np.flatnonzero(chosen)), at, stats.trend, spec)
            y = np.log(np.maximum(now.output_tokens[chosen].astype(np.float64), 1.0))
            # serving's base, moved by the drift over the gap (a sibling's ``step + 1`` spans none)
            base = projected(prior, stats, stats.positions(ids), at)[0] if at == step else base_length(prior)
            parts.append((x[prior.seen], (y - np.log(base))[prior.seen]))
    if not parts:
        return np.empty((0, len(spec.names))), np.empty(0)
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def _stats_before(history: Trace, befores: list[int]) -> dict[int, PromptStats]:
    """``stats_of(history, b)`` for each of ``befores`` (ascending), from one fold over the history:
    calling ``stats_of`` for each folded every earlier step again, quadratic in a long run's steps."""
    out: dict[int, PromptStats] = {}
    pending = list(befores)
    for step, stats, _, _ in walk_steps(history):
        while pending and pending[0] <= step:  # no history row lies in [b, step): same stats
            before = pending.pop(0)
            out[before] = dataclasses.replace(stats, before=before)
    if pending:
        last = stats_of(history, pending[-1])
        out.update({b: dataclasses.replace(last, before=b) for b in pending})
    return out
