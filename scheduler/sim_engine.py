"""One continuous-batching worker, advanced event by event: the engine inside the rollout simulator.

The model is vLLM's (see docs/simulator.md for the formulas):

- Admission, in queue order, at the start and after every completion: while a slot is free
  (``batch < max_num_seqs``) and the prompt fits under the KV cache less a watermark; with
  ``kv_admission`` only while the projected peak fits (``scheduler.admission``): the KV the running
  set plus the candidate will hold at its fullest future step, each growing one token per step until
  its PREDICTED end (``planned`` steps; one that outlives its prediction is expected to run a
  quarter of it again, ``admission.expected_remaining``). On exact lengths that never preempts.
  An empty worker always admits its head, so a queue never deadlocks. A refused head is admitted
  at the first decode step at which it fits, an event of its own (``scheduler.head_fit``), as a
  polling sidecar starts it: waiting lowers its projected peak. Sequences admitted together
  are prefilled together, once, before the next decode step.
- Decode: every running sequence appends one token per step; a step costs the cost model's
  ``step_time(b, C)`` with ``C`` the KV tokens held before the step (prompt plus generated so far).
  Between events ``b`` is fixed and ``C`` grows by ``b`` per step, so the steps are summed in
  closed form (``scheduler.stepsum.decode_time``: two arithmetic series split where memory and
  compute cross).
- Preemption: a step needs ``C + b <= capacity`` (each sequence writes one more token). When the
  next step does not fit, the newest running sequence is evicted and goes back to the head of the
  engine's waiting line, its progress lost (recompute preemption); nothing is admitted in the step
  of the eviction, and from the next decode step on the waiting head re-enters at the first step it
  fits, as vLLM retries its waiting line every step (an event of its own, not the next completion).
  With ``resume`` (what vLLM V1 does) it keeps its output tokens instead, and re-entering costs a
  prefill of prompt plus output and that much KV.
- Claiming, as the delivery sidecar does: a worker's own queue is the unclaimed part (stealable);
  without KV admission the sidecar keeps up to ``max_num_seqs`` items in flight (running or
  waiting inside the engine, where vLLM queues what does not fit yet); with KV admission it hands
  over an item only when its projected peak fits, so nothing waits inside the engine but evictions.

The engine is resumable: ``commit`` computes when the next event (a completion or a preemption)
happens and ``process`` applies it, so a coordinator can interleave many workers on one clock for
work stealing or a shared queue. Alone, ``scheduler.sim_alone`` plays a worker's queue to the end
(these methods' events, written out on locals); the same rules as ``scheduler.finish`` (the
planner's finish-time model), so plan and replay agree exactly.
State is kept in plain ints, lists and dicts: an event costs a few microseconds, whatever the lengths.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Sequence

from scheduler.admission import RunningPeak, expected_remaining
from scheduler.costmodel import WorkerCost
from scheduler.head_fit import earliest_fit, refused_until, search_from
from scheduler.sim_ledger import Ledger
from scheduler.sim_overdue import DEAD as _DEAD
from scheduler.sim_overdue import extend_overdue
from scheduler.sim_stuck import no_completion, too_long
from scheduler.stepsum import decode_time, held_time


class WorkerEngine:
    """One worker's queue, running batch and clock; see the module docstring for the rules."""

    __slots__ = ("alive", "batch", "blocked", "busy_s", "cap", "clock", "cost", "event_clock", "heap",
                 "held_s", "index", "kv_admission", "ledger", "limit", "max_seqs", "offset", "overdue",
                 "peak", "pending_run", "preempted", "prefill_tokens", "queue", "queued_work", "refusal",
                 "refused", "reserved", "resume", "stack", "step", "to_finish", "to_fit", "token",
                 "waiting", "waiting_reserve", "watch")  # fmt: skip

    def __init__(
        self,
        index: int,
        cost: WorkerCost,
        ledger: Ledger,
        *,
        watermark: float,
        kv_admission: bool,
        resume: bool = False,
        held: bool = False,
    ) -> None:
        self.index, self.cost, self.ledger = index, cost, ledger
        self.cap = cost.kv_capacity_tokens  # KV tokens the worker holds
        self.limit = self.cap - watermark * self.cap  # admission ceiling for prompts (watermark kept free)
        self.max_seqs = cost.max_num_seqs
        self.kv_admission = kv_admission
        self.resume = resume  # an evicted sequence keeps its output and re-prefills prompt+output
        self.queue: deque[int] = deque()  # own items not yet claimed by the sidecar: stealable
        self.queued_work = 0  # planned decode steps in ``queue`` (the steal rule's measure)
        self.waiting: deque[int] = deque()  # claimed, waiting inside the engine (evicted ones first)
        self.waiting_reserve = 0  # sum over ``waiting`` of (prompt + planned steps): the steal gate's
        # view of claimed items not yet running
        self.heap: list[tuple[int, int, int]] = []  # (finish step, admission token, item)
        self.alive: dict[int, tuple[int, int, int]] = {}  # running item -> (admission token, its offset
        # share, its predicted end step)
        self.peak = RunningPeak()  # the running set's predicted ends (kept only under kv_admission)
        self.overdue: list[tuple[int, int, int]] = []  # (predicted end, token, item): next to outlive
        self.stack: list[tuple[int, int]] = []  # (token, item) in admission order: newest last
        self.clock = 0.0  # seconds; the worker's own time
        self.step = 0  # decode steps run so far
        self.batch = 0  # running sequences
        self.offset = 0  # sum over running of (context at admission - admission step): context is
        # offset + batch*step, where a sequence's context at admission is its prompt (+ kept output)
        self.reserved = 0  # sum over running of (prompt + planned steps): KV at predicted final length
        self.token = 0  # admission counter
        self.blocked = False  # a preemption happened and no decode step has run since
        self.prefill_tokens = 0  # prompts admitted since the last commit, prefilled together
        self.busy_s = 0.0  # seconds spent prefilling or decoding
        self.held_s = 0.0 if held else None  # KV-token-seconds held (``held``: summed; plans skip it)
        self.preempted = 0  # evictions so far
        self.pending_run = -1  # decode steps to the pending event (-1: none pending)
        self.to_finish = 0  # steps from the pending event's start to the next completion
        self.to_fit = -1  # steps from it to the step at which the next item to start fits (-1: none)
        self.watch = -1  # an item from elsewhere (a shared head, a steal) that ``take`` refused: with
        # nothing of its own to start, its first fitting step is an event too (set by the pool)
        self.event_clock = 0.0  # time of the pending event
        self.refusal: tuple[int, int, int, tuple[int, int]] | None = None  # the last projected-peak
        # refusal: (item, step, ``peak.changes`` then, ``RunningPeak.overflow``'s answer)
        self.refused: tuple[int, int, int] | None = None  # a refusal that still holds: (item, the
        # first step it may fit at, the step its projection overflowed at): ``fits``

    def enqueue(self, items: list[int]) -> None:
        """Append ``items`` to the worker's own (unclaimed) queue, in order."""
        self.queue.extend(items)
        planned = self.ledger.planned
        self.queued_work += sum(planned[i] for i in items)

    def fits(self, item: int) -> bool:
        """Whether ``item`` may be admitted now (slot, and KV by watermark or by projected peak).

        A projected-peak refusal bounds the wait from below (``head_fit.refused_until``) as long
        as no running sequence whose projection reached the overflowing step stops (``refused``,
        dropped by ``_remove``): admissions and extensions of overdue sequences only raise the
        projection. Until then the item is refused again without the O(running) test; before,
        a head in a KV-bound wave was tested at every completion.
        """
        batch = self.batch
        if batch == 0:
            return True
        if batch >= self.max_seqs:
            return False
        ledger = self.ledger
        if self.kv_admission:
            step, kept = self.step, ledger.kept[item]
            refused = self.refused
            if refused is not None and refused[0] == item and step < refused[1]:
                return False
            if self.overdue and self.overdue[0][0] <= step:
                self._extend_overdue()
            end = step + expected_remaining(ledger.planned[item], kept)
            over = self.peak.overflow(step, ledger.prompts[item] + kept - step, end, self.cap)
            if over is not None:
                self.refusal = (item, step, self.peak.changes, over)
                self.refused = (item, refused_until(self.peak, step, end - step, over), over[0])
            return over is None
        return self.offset + batch * self.step + ledger.prompts[item] + ledger.kept[item] <= self.limit

    def may_admit(self) -> bool:
        """Admission is open: a slot is free and no preemption is waiting for a decode step."""
        return self.batch == 0 or (not self.blocked and self.batch < self.max_seqs)

    def has_room(self) -> bool:
        """Whether the worker's sidecar would take one more item from elsewhere right now.

        Its own queue must be empty. Without KV admission a slot is free while fewer than
        ``max_num_seqs`` items are in flight (running or waiting inside the engine); with it, while
        nothing waits inside the engine and admission is open (the item's projected peak is checked
        by ``take``).
        """
        if self.queue:
            return False
        if self.kv_admission:
            return not self.waiting and self.may_admit()
        return self.batch + len(self.waiting) < self.max_seqs

    def reservation_fits(self, item: int) -> bool:
        """The steal gate's KV test: ``item`` fits beside everything in flight at PREDICTED final lengths.

        Everything in flight is what runs plus what the sidecar already handed to the engine (waiting,
        evicted sequences included), each counted at prompt + predicted output. A free slot alone says
        nothing in a KV-bound regime; this keeps a thief from taking work its KV cache would have to
        evict (docs/simulator.md, "Stealing in a KV-bound regime"). Applied to steals whatever the
        admission mode.
        """
        reserve = self.ledger.reserve
        return self.reserved + self.waiting_reserve + reserve[item] <= self.cap

    def reservations_fit(self, items: Sequence[int]) -> bool:
        """``reservation_fits`` for several items together (a whole group under prefix affinity)."""
        reserve = self.ledger.reserve
        return self.reserved + self.waiting_reserve + sum(reserve[i] for i in items) <= self.cap

    def can_hold(self, item: int) -> bool:
        """Whether this worker's KV cache holds ``item`` at its cap at all: the plan keeps such items off
        a small worker, and the shared queue and stealing must too (an engine refuses a request past
        its context length)."""
        return self.ledger.need[item] <= self.cap

    def take(self, item: int) -> bool:
        """Accept ``item`` from the shared queue or a victim; report whether it was accepted.

        Without KV admission the sidecar hands it to the engine, which runs it when KV allows; with
        it, the sidecar takes it only if its projected peak fits now.
        """
        if self.kv_admission:
            if not self.may_admit() or not self.fits(item):
                return False
            self._admit(item)
            return True
        self.waiting.append(item)
        self.waiting_reserve += self.ledger.reserve[item]
        self._admit_waiting()
        return True

    def admit_own(self) -> None:
        """Claim from the own queue as the sidecar would, then admit in order (vLLM's in-order rule).
        All the room at once, past delivery's 1,000 a call: the sidecar claims again at once, stealing
        only once its queue gave nothing (tests/service/sidecar/test_claim_batch_parity.py)."""
        queue, planned, reserve = self.queue, self.ledger.planned, self.ledger.reserve
        if not self.kv_admission:
            room = self.max_seqs - self.batch - len(self.waiting)
            while room > 0 and queue:
                item = queue.popleft()
                self.queued_work -= planned[item]
                self.waiting.append(item)
                self.waiting_reserve += reserve[item]
                room -= 1
        self._admit_waiting()
        if self.kv_admission and not self.waiting and self.may_admit():
            while queue and self.fits(queue[0]):
                item = queue.popleft()
                self.queued_work -= planned[item]
                self._admit(item)

    def _admit_waiting(self) -> None:
        if not self.may_admit():
            return
        waiting, reserve = self.waiting, self.ledger.reserve
        while waiting and self.fits(waiting[0]):
            item = waiting.popleft()
            self.waiting_reserve -= reserve[item]
            self._admit(item)

    def _admit(self, item: int) -> None:
        ledger = self.ledger
        kept = ledger.kept[item]
        context = ledger.prompts[item] + kept
        if self.refused is not None and self.refused[0] == item:
            self.refused = None
        self.token += 1
        end = self.step + expected_remaining(ledger.planned[item], kept)  # as ``fits`` tested it
        self.alive[item] = (self.token, context - self.step, end)
        if self.kv_admission:
            self.peak.add(end, context - self.step)
            heapq.heappush(self.overdue, (end, self.token, item))
        heapq.heappush(self.heap, (self.step + ledger.steps[item] - kept, self.token, item))
        self.stack.append((self.token, item))
        self.batch += 1
        self.offset += context - self.step
        self.reserved += ledger.reserve[item]
        self.prefill_tokens += context
        if ledger.start[item] < 0.0:
            ledger.start[item] = self.clock
        ledger.worker[item] = self.index

    def _extend_overdue(self) -> None:
        """Give every running sequence that outlived its expected end a new one (``extend_overdue``)."""
        extend_overdue(self.overdue, self.alive, self.peak, self.ledger, self.step)

    def commit(self) -> float | None:
        """Prefill what was admitted, then schedule the next event; return its time (None: idle)."""
        if self.prefill_tokens:
            spent = self.cost.prefill_time(self.prefill_tokens)
            self.clock += spent
            self.busy_s += spent
            if self.held_s is not None:  # the running set and the prompts being prefilled
                self.held_s += (self.offset + self.batch * self.step) * spent
            self.prefill_tokens = 0
        batch = self.batch
        if batch == 0:
            self.pending_run = -1
            return None
        heap, alive = self.heap, self.alive
        while alive.get(heap[0][2], _DEAD)[0] != heap[0][1]:
            heapq.heappop(heap)
        context = self.offset + batch * self.step
        self.to_finish = heap[0][0] - self.step
        run = min(self.to_finish, (self.cap - context) // batch)
        self.to_fit = self._steps_to_fit(run)
        if self.to_fit >= 0:
            run = self.to_fit
        spent = decode_time(self.cost, batch, context, run) if run > 0 else 0.0
        self.busy_s += spent
        if self.held_s is not None and run > 0:
            self.held_s += held_time(self.cost, batch, context, run)
        self.pending_run = run
        self.event_clock = self.clock + spent
        return self.event_clock

    def process(self) -> None:
        """Apply the pending event: completions at this step, or else evict the newest sequence.

        A completion event that completed nothing would be timed again at the same step for ever
        (a play that hangs, not fails): it raises with the engine's state instead."""
        self.clock = self.event_clock
        run, self.pending_run = self.pending_run, -1
        if run > 0:
            self.step += run
            self.blocked = False
        if run != self.to_finish:
            if run != self.to_fit:
                self._preempt_newest()
            return  # at ``to_fit`` nothing changes but the step: ``admit_own`` starts the head
        heap, alive, end, step, batch = self.heap, self.alive, self.ledger.end, self.step, self.batch
        while heap and heap[0][0] == step:
            _, token, item = heapq.heappop(heap)
            if alive.get(item, _DEAD)[0] == token:
                self._remove(item)
                end[item] = self.clock
        if self.batch == batch:
            raise no_completion(self.cost.worker_id, step, batch, heap[0][0] if heap else None)

    def _steps_to_fit(self, run: int) -> int:
        """Decode steps, fewer than ``run``, after which the next item to start passes admission (-1:
        not before the next event): the step a polling sidecar (or vLLM, for an evicted sequence,
        which it retries every step) starts it at, not the next completion.

        Without KV admission the prompt test only tightens between completions (the batch grows), so
        only an eviction makes room: the waiting head (the evicted sequence) may fit one step on, once
        a decode step has run. Under it, waiting lowers the projected peak: ``scheduler.head_fit``.
        """
        if run <= 1 or self.batch >= self.max_seqs:
            return -1
        item = self._next_to_start()
        if item < 0:
            return -1
        step, ledger = self.step, self.ledger
        kept = ledger.kept[item]
        if not self.kv_admission:
            fits = self.offset + self.batch * (step + 1) + ledger.prompts[item] + kept <= self.limit
            return 1 if self.blocked and fits else -1
        if self.overdue and self.overdue[0][0] <= step:
            self._extend_overdue()
        remaining = expected_remaining(ledger.planned[item], kept)
        start = self._search_from(item, remaining)
        if start < 0:
            return -1
        at, _ = earliest_fit(self.peak, start, ledger.prompts[item] + kept, remaining, self.cap, step + run)
        return -1 if at is None else at - step

    def _search_from(self, item: int, remaining: int) -> int:
        """The first step to search ``item``'s fit from (-1: only a completion helps): past what
        ``fits``'s refusal of it at this step, beside this running set, rules out (else the next
        step), so the search does not repeat the test the refusal settled (``head_fit.search_from``)."""
        refusal = self.refusal
        if refusal is not None and refusal[:3] == (item, self.step, self.peak.changes):
            return search_from(self.peak, self.step, remaining, refusal[3])
        refused = self.refused  # an earlier refusal that still holds (``fits``)
        if refused is not None and refused[0] == item:
            # refused[1] > step here: ``fits`` tests the head again at each event from refused[1]
            # on (a refusal at this step takes the branch above), and a refused item admitted
            # later clears ``refused`` when it stops or is evicted (it ends past the overflowing
            # step). ``step + 1`` stays the floor: a search from ``step`` may find a 0-step event.
            return max(self.step + 1, refused[1])
        return self.step + 1

    def _next_to_start(self) -> int:
        """The item admission would test next (-1: none): the engine's waiting head (evicted ones
        first), else under KV admission the own queue's head, else the item ``take`` refused last."""
        if self.waiting:
            return self.waiting[0]
        if not self.kv_admission:
            return -1  # the sidecar claims its queue into ``waiting`` while a slot is free
        return self.queue[0] if self.queue else self.watch

    def _preempt_newest(self) -> None:
        ledger = self.ledger
        if self.batch == 1:
            item = next(iter(self.alive))
            prompt, steps = ledger.prompts[item], ledger.steps[item]
            raise too_long(ledger.keys[item], prompt, steps, self.cost.worker_id, self.cap)
        while True:
            token, item = self.stack.pop()
            if self.alive.get(item, _DEAD)[0] == token:
                break
        base = self._remove(item)
        if self.resume:
            ledger.kept[item] = base + self.step - ledger.prompts[item]
        self.waiting.appendleft(item)
        self.waiting_reserve += ledger.reserve[item]
        ledger.preemptions[item] += 1
        self.preempted += 1
        self.blocked = True

    def _remove(self, item: int) -> int:
        """Take ``item`` out of the running batch; return its share of ``offset``."""
        _, base, end = self.alive.pop(item)
        if self.kv_admission:
            self.peak.remove(end, base)
            if self.refused is not None and end >= self.refused[2]:
                self.refused = None  # its projection counted at the overflowing step: it may clear
        self.batch -= 1
        self.offset -= base
        self.reserved -= self.ledger.reserve[item]
        return base
