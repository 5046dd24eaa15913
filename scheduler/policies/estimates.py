"""Each worker's running load totals, and its estimate now or with one more unit: what list scheduling prices.

Why a module of its own. Tier-aware list scheduling (``scheduler.policies.listsched``) answers two
questions per unit: which workers are worth pricing (heaps of estimates per (kind, tier), the
ordered scan over their tops, parked workers) and what each would end at with the unit added. This
module is the second alone: the totals of every worker's queue (``load.Load``'s fields, as lists),
its scale (and its scale past its slots, where the round plans it in waves), and the estimate they
give. It knows nothing of heaps, tiers or bands, so the look-up structure in ``listsched`` reads on
its own, as the KV bookkeeping in ``kvpeak`` does. ``scheduler.policies.listrun`` reads these lists
inline and computes ``after`` operation for operation; a change here belongs there too.
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.policies.kvpeak import KvPeaks
from scheduler.policies.load import estimate, rates
from scheduler.policies.problem import Problem, Unit


class Estimates:
    """Per-worker load totals as plain lists (``listrun`` binds them to locals), with each worker's
    rates and scale; ``kv`` counts the sequences a worker holds, which decides its waves scale."""

    def __init__(
        self, problem: Problem, scale: Sequence[float], waves: Sequence[float] | None, kv: KvPeaks
    ) -> None:
        workers = len(problem.costs)
        self.rates = [rates(c) for c in problem.costs]
        self.scale, self.waves, self.kv = scale, waves, kv  # ``waves``: a worker's scale past its slots
        # running totals of each worker's units (``load.Load``'s fields, as lists)
        self.load_steps, self.load_tokens = [0] * workers, [0] * workers
        self.load_kv, self.load_prompt = [0.0] * workers, [0] * workers

    def add(self, w: int, unit: Unit) -> None:
        """Count ``unit`` into worker ``w``'s totals (``load.Load.add``)."""
        if unit.steps > self.load_steps[w]:
            self.load_steps[w] = unit.steps
        self.load_tokens[w] += unit.tokens
        self.load_kv[w] += unit.kv_steps
        self.load_prompt[w] += unit.prompt_tokens

    def now(self, w: int) -> float:
        """Worker ``w``'s estimate (scaled) for the units it holds: what ``place`` records when the
        look-up did not compute it on the way."""
        return self.scale_at(w, self.kv.count[w]) * estimate(
            self.rates[w], self.load_steps[w], self.load_tokens[w], self.load_kv[w], self.load_prompt[w]
        )

    def after(self, w: int, unit: Unit) -> float:
        """Worker ``w``'s estimate (scaled) once ``unit`` is added to it."""
        tokens = self.load_tokens[w] + unit.tokens
        scale = self.scale_at(w, self.kv.count[w] + len(unit.members))
        if tokens <= 0:
            return scale * 0.0
        # ``load.estimate`` inlined, operation for operation (the ordered scan calls this twice a unit)
        r, steps, kv = self.rates[w], self.load_steps[w], self.load_kv[w] + unit.kv_steps
        n: float = steps if steps > unit.steps else unit.steps
        if kv * r.per_full_cache > n:
            n = kv * r.per_full_cache
        if tokens * r.per_slot > n:
            n = tokens * r.per_slot
        mem = n * r.step_s + r.kv_s * kv
        cmp = n * r.overhead_s + r.seq_s * tokens + r.token_s * kv
        prefill = r.prefill_s * (self.load_prompt[w] + unit.prompt_tokens)
        return scale * ((mem if mem > cmp else cmp) + prefill)

    def least_after(self, tops: list[tuple[float, int]], unit: Unit) -> tuple[int, float]:
        """The worker of ``tops`` whose estimate with ``unit`` is least (ties: lowest index), and it:
        ``after`` inlined. A top's key is its worker's estimate now, and adding a unit never lowers
        an estimate (every term grows with the load, and so does each rounded float operation), so
        once tops are taken by key, one keyed above the best estimate so far cannot win: stop."""
        all_rates = self.rates
        load_steps, load_tokens, load_kv, load_prompt = (
            self.load_steps,
            self.load_tokens,
            self.load_kv,
            self.load_prompt,
        )
        u_steps, u_tokens, u_kv, u_prompt = unit.steps, unit.tokens, unit.kv_steps, unit.prompt_tokens
        best_after, best = 0.0, -1
        for key, w in sorted(tops):
            if key > best_after and best >= 0:
                break
            s = load_steps[w]
            tokens = load_tokens[w] + u_tokens
            if tokens <= 0:
                est = 0.0
            else:
                r = all_rates[w]
                kv = load_kv[w] + u_kv
                n = max(s if s > u_steps else u_steps, kv * r.per_full_cache, tokens * r.per_slot)
                mem = n * r.step_s + r.kv_s * kv
                cmp = n * r.overhead_s + r.seq_s * tokens + r.token_s * kv
                est = (mem if mem > cmp else cmp) + r.prefill_s * (load_prompt[w] + u_prompt)
            after = self.scale_at(w, self.kv.count[w] + len(unit.members)) * est
            if best < 0 or after < best_after or (after == best_after and w < best):
                best_after, best = after, w
        return best, best_after

    def scale_at(self, w: int, sequences: int) -> float:
        """Worker ``w``'s scale once it holds ``sequences`` trajectories: its ``waves`` entry past
        its slots (where the round reads one, ``calibrate.in_waves``), else its ``scale`` one. Never
        below the latter, so an estimate still never falls as units are added."""
        waves = self.waves
        return waves[w] if waves is not None and sequences > self.kv.slots[w] else self.scale[w]
