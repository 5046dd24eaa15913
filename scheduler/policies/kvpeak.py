"""Whether a worker's queue still runs all at once: the KV peak that tier-aware list scheduling keeps.

An engine that admits a whole queue at once and never preempts runs it exactly as the load estimate
says; one whose KV cache overflows recomputes preempted sequences, and the estimate turns
optimistic. So ``scheduler.policies.listsched`` lets a worker whose queue would no longer fit yield
to one whose queue still would. This module is that bookkeeping alone, per worker: how many
sequences and prompt tokens it holds, its all-at-once KV peak, and its limits. It knows nothing of
heaps or estimates, which keeps the look-up structure in ``listsched`` readable on its own.
"""

from __future__ import annotations

from scheduler.policies.problem import Problem, Unit

PEAK_MARGIN = 0.0  # share of the cache the all-at-once KV peak keeps free: none, since the peak is
# the engine's own preemption test (a step needs ``C + b <= capacity``; the simulator and the finish
# model preempt only past the whole cache). vLLM's 1% watermark is not a peak margin: it gates the
# admission of a waiting prompt (V0's ``can_allocate``; V1's optional one in ``allocate_slots``, 0 by
# default, for waiting or preempted requests only), which the finish model and the simulator apply
# there (``admission.WATERMARK``), while running sequences grow into the whole cache. At 0.01 the
# planner kept room the simulator never needs (frozen clock 4,096 x 32 seeds 0-4, cpsat/bound 1.0222
# -> 1.0204; docs/experiments.md, margin66). vLLM's 16-token blocks waste under 16 tokens a running
# sequence; the simulator does not round, and were it to, the peak should count ``count * (block -
# 1)`` here, not a flat share.


class KvPeaks:
    """Per-worker sequence count, prompt tokens and all-at-once KV peak, as plain lists.

    Lists rather than one object per worker: ``ListState._tops`` reads them inline on the hot path.
    """

    def __init__(self, problem: Problem) -> None:
        workers = len(problem.costs)
        self.prompts, self.steps = problem.prompts, problem.steps
        self.count = [0] * workers
        self.prompt_sum = [0] * workers
        self.peak = [0] * workers
        self.limit = [(1.0 - PEAK_MARGIN) * c.kv_capacity_tokens for c in problem.costs]
        self.slots = [c.max_num_seqs for c in problem.costs]
        self.least_prompt = min(problem.prompts, default=0)

    def add(self, w: int, unit: Unit) -> None:
        """Count ``unit`` into ``w``'s queue (units arrive longest first, as ``peak_after`` needs).
        The peak counts the units that start within ``w``'s slots only: past them the queue runs in
        waves, and what ``fits`` reads is whether it overflowed its cache before that."""
        count, prompts = self.count[w] + len(unit.members), self.prompt_sum[w] + unit.prompt_tokens
        if self.count[w] >= self.slots[w]:
            pass  # past its slots: the peak stays what its first slots' sequences made it
        elif len(unit.members) == 1:  # ``peak_after``'s common case, inlined: once a unit placed
            term = prompts + count * unit.steps
            if term > self.peak[w]:
                self.peak[w] = term
        else:  # a group: its members within the slots (all, unless it passes them) make the peak
            self.peak[w] = self.peak_after(w, unit, self.slots[w])
        self.count[w], self.prompt_sum[w] = count, prompts

    def fits(self, w: int, unit: Unit) -> bool:
        """Whether ``w`` still runs its whole queue at once, without preemption, with ``unit`` added;
        past its slots, whether it runs in waves of queues that did (its slots' peak within its cache).

        Why a queue over its cache within its slots fits nothing past them either: counted as fitting
        there, the first such worker to pass its slots took every unit that fitted no other worker at
        once, while every other worker over its cache yielded to it, whatever its estimate (a band round
        of the long-cot headline's oracle batch: one H100 with 1,509 units, 2,744 s against lpt's
        945 s; docs/experiments.md, "Band rounds on tight caches"). Not fitting, such workers share
        by the estimate."""
        count, limit = self.count[w] + len(unit.members), self.limit[w]
        if self.peak[w] > limit:
            return False  # over its cache within its slots: in its waves too
        if count > self.slots[w]:
            # Past its slots a queue runs in waves whatever it holds, and the estimate counts the
            # waves (D / max_num_seqs): yielding here left short-item workers idle a third of the run.
            return True
        if len(unit.members) == 1:  # the common case, inlined
            return self.prompt_sum[w] + unit.prompt_tokens + count * unit.steps <= limit
        return self.peak_after(w, unit) <= limit

    def peak_after(self, w: int, unit: Unit, within: int | None = None) -> int:
        """Peak KV of ``w``'s queue plus ``unit`` when all of it is admitted at once; with ``within``,
        of its first ``within`` sequences only (``add``: those its slots start at once).

        Units arrive longest first, so with ``j`` sequences of length >= L running, the cache holds
        ``sum of their prompts + j * L`` tokens at step L: the peak is the largest such term, and a
        new (shortest) sequence adds one term. Under that peak the engine never preempts and the
        load estimate is exact; over it, recompute preemption makes it optimistic. Projected-peak KV
        admission (``kv_admission``) admits the whole queue at once exactly when this peak fits too.
        """
        count, prompts, peak = self.count[w], self.prompt_sum[w], self.peak[w]
        if len(unit.members) == 1:
            return max(peak, prompts + unit.prompt_tokens + (count + 1) * unit.steps)
        for i in sorted(unit.members, key=lambda m: -self.steps[m]):
            if within is not None and count >= within:
                break  # the shortest members, past the slots
            count += 1
            prompts += self.prompts[i]
            peak = max(peak, prompts + count * self.steps[i])
        return peak

    def longest_fitting(self, w: int) -> int | None:
        """The most steps a single unit may have and still fit ``w`` (``fits``), for any prompt of
        the batch; None once one more sequence would pass ``w``'s slots, where every unit fits, unless
        its queue overflowed its cache within them: 0, nothing fits (``fits``).

        Below its slots a unit of ``n`` steps fits only if ``prompt_sum + p + (count + 1) * n <=
        limit``, and no ``p`` is below the batch's least: what ``ListState._park`` parks a worker on.
        """
        after_count = self.count[w] + 1
        if self.peak[w] > self.limit[w]:
            return 0  # over its limit already: nothing fits, in its slots or past them
        if after_count > self.slots[w]:
            return None
        return int((self.limit[w] - self.prompt_sum[w] - self.least_prompt) // after_count)
