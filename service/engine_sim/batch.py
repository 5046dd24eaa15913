"""A continuous-batching engine paced by the wall clock: the timing core of ``engine-sim``.

It SIMULATES an inference engine; no model runs. Every running sequence gains one token per decode
step, and a step lasts ``step_time(b, C)`` seconds from the roofline cost model (``b`` running
sequences holding ``C`` cached tokens), plus ``prefill_time(p)`` for the prompts admitted at that step.
So a lone request runs at single-sequence speed and each one slows down as concurrency grows, exactly
as the planner and the simulator assume.

Admission follows vLLM: first come first served, up to ``max_num_seqs`` sequences and while the KV
cache has room for the sequence's context and one more step. When a step would overflow the cache,
the newest running sequence is preempted and recomputed later, which is what KV admission control in
the sidecar exists to avoid. What a preempted sequence keeps, and whether admission keeps some of the
cache free, are the rules of the engine it plays (``scheduler.sim_rules``, by name): ``vllm-v1``, the
default as in the service (``SERVICE_ENGINE``), keeps its output and re-enters with a prefill of
prompt plus output, with no watermark; ``vllm-v0`` restarts it from nothing and admits under a 1%
watermark, the planner's finish model.

Rather than sleeping once per step (thousands of wake-ups per second at a small time scale), the loop
computes the wall time of the next *event* (a sequence finishing or the cache filling up) from the
cumulative step times and sleeps until then. An arrival or a cancellation wakes it early; it then lets
the step in progress finish and re-plans at that step boundary.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from scheduler.costmodel import WorkerCost
from scheduler.sim_rules import EngineRules, engine_rules
from service.engines import SERVICE_ENGINE


class PromptTooLongError(ValueError):
    """The sequence (prompt plus what it is to generate) cannot fit in the engine's KV cache at all."""


@dataclass(frozen=True, slots=True)
class Generation:
    """What a finished request reports."""

    tokens: int  # tokens generated (the requested count: the simulation never stops early)
    queued_s: float  # wall seconds spent waiting for admission (first admission)
    run_s: float  # wall seconds from first admission to the last token
    preemptions: int  # times the engine evicted it for lack of KV and recomputed it


@dataclass(frozen=True, slots=True)
class EngineStats:
    """A snapshot of the engine, for ``/sim/stats`` and tests."""

    running: int  # sequences in the current batch
    waiting: int  # sequences waiting for a slot or KV room
    kv_tokens: int  # tokens held in the KV cache by the running sequences
    finished: int  # requests completed since start
    cancelled: int  # requests withdrawn by their client
    preemptions: int  # recompute preemptions since start
    max_running: int  # the largest batch seen since start
    tokens_generated: int  # tokens produced by completed requests
    tokens_lost: int  # output tokens preempted sequences threw away, to generate again (vllm-v0)
    modelled_s: float  # modelled seconds of the prefills and decode steps run: the engine's busy time


@dataclass(eq=False)
class _Sequence:
    prompt_tokens: int
    target_tokens: int
    done: asyncio.Future[Generation]
    arrived_at: float
    admitted_at: float | None = None
    generated: int = 0
    preemptions: int = 0

    @property
    def context(self) -> int:
        """Tokens in its KV cache now: the prompt and what it generated so far."""
        return self.prompt_tokens + self.generated

    @property
    def remaining(self) -> int:
        """Tokens still to generate before it reaches its target length."""
        return self.target_tokens - self.generated


@dataclass
class SimulatedEngine:
    """One simulated engine; ``generate`` is safe to call from many tasks of one event loop."""

    cost: WorkerCost  # step-time model of the configured device, model and time scale
    clock: Callable[[], float] = time.monotonic
    rules: EngineRules = field(default_factory=lambda: engine_rules(SERVICE_ENGINE))  # what eviction
    # keeps and what admission leaves free: the engine played, the one the service plans for by default
    _running: list[_Sequence] = field(default_factory=list, init=False)
    _waiting: deque[_Sequence] = field(default_factory=deque, init=False)
    _wake: asyncio.Event | None = field(default=None, init=False)
    _loop_task: asyncio.Task[None] | None = field(default=None, init=False)
    _finished: int = field(default=0, init=False)
    _cancelled: int = field(default=0, init=False)
    _preemptions: int = field(default=0, init=False)
    _max_running: int = field(default=0, init=False)
    _tokens: int = field(default=0, init=False)
    _lost: int = field(default=0, init=False)
    _modelled_s: float = field(default=0.0, init=False)

    async def generate(self, prompt_tokens: int, output_tokens: int) -> Generation:
        """Run one request to ``output_tokens`` tokens; cancelling the caller withdraws it."""
        if prompt_tokens + max(1, output_tokens) > self.cost.kv_capacity_tokens:
            # vLLM never meets this (it refuses to start with max_model_len above its cache); here
            # the sequence would be preempted and readmitted forever, alone, never finishing
            raise PromptTooLongError(
                f"prompt of {prompt_tokens} tokens plus {output_tokens} to generate exceeds the KV cache "
                f"of {self.cost.kv_capacity_tokens}"
            )
        loop = asyncio.get_running_loop()
        seq = _Sequence(prompt_tokens, max(0, output_tokens), loop.create_future(), self.clock())
        if seq.target_tokens == 0:
            return Generation(0, 0.0, 0.0, 0)
        self._waiting.append(seq)
        self._kick()
        try:
            return await asyncio.shield(seq.done)
        except asyncio.CancelledError:
            self._withdraw(seq)
            raise

    def stats(self) -> EngineStats:
        """The engine's counters now."""
        return EngineStats(
            running=len(self._running),
            waiting=len(self._waiting),
            kv_tokens=sum(s.context for s in self._running),
            finished=self._finished,
            cancelled=self._cancelled,
            preemptions=self._preemptions,
            max_running=self._max_running,
            tokens_generated=self._tokens,
            tokens_lost=self._lost,
            modelled_s=self._modelled_s,
        )

    async def close(self) -> None:
        """Stop the batch loop (server shutdown)."""
        if self._loop_task is not None:
            self._loop_task.cancel()
            await asyncio.gather(self._loop_task, return_exceptions=True)
            self._loop_task = None

    # -- internals ---------------------------------------------------------------------------------

    def _kick(self) -> None:
        if self._wake is None:
            self._wake = asyncio.Event()
        if self._loop_task is None or self._loop_task.done():
            self._loop_task = asyncio.get_running_loop().create_task(self._run())
        self._wake.set()

    def _withdraw(self, seq: _Sequence) -> None:
        """A cancelled request leaves the queue at once and the batch at the next step boundary."""
        if seq in self._waiting:
            self._waiting.remove(seq)
        self._cancelled += 1
        if not seq.done.done():
            seq.done.cancel()
        if self._wake is not None:
            self._wake.set()

    async def _run(self) -> None:
        try:
            await self._loop()
        except Exception as exc:  # a bug here must fail the requests, never hang them
            for seq in [*self._running, *self._waiting]:
                if not seq.done.done():
                    seq.done.set_exception(exc)
            raise

    async def _loop(self) -> None:
        assert self._wake is not None
        while True:
            self._drop_cancelled()
            self._make_room()
            prefill_s = self._admit()
            if not self._running:
                self._wake.clear()
                await self._wake.wait()
                continue
            steps = await self._run_chunk(prefill_s)
            self._advance(steps)

    def _drop_cancelled(self) -> None:
        self._running = [s for s in self._running if not s.done.done()]

    def _make_room(self) -> None:
        """Preempt the newest sequences until one more step fits in the KV cache (vLLM's recompute).

        Under ``resume_preempted`` (vLLM V1's ``_preempt_request``, SGLang's retraction) the victim
        keeps its output: its blocks are freed, and re-admission prefills prompt plus output. Otherwise
        (the planner's ``vllm-v0``) it restarts from nothing, its output lost."""
        while self._running and self._kv_after_step() > self.cost.kv_capacity_tokens:
            victim = self._running.pop()
            if not self.rules.resume_preempted:
                self._lost += victim.generated
                victim.generated = 0
            victim.preemptions += 1
            self._preemptions += 1
            self._waiting.appendleft(victim)

    def _kv_after_step(self) -> int:
        return sum(s.context for s in self._running) + len(self._running)

    def _admit(self) -> float:
        """Admit waiting sequences FCFS while slots and KV allow; return the prefill seconds they add."""
        prefill_s = 0.0
        now = self.clock()
        while self._waiting and len(self._running) < self.cost.max_num_seqs:
            head = self._waiting[0]
            if not self._fits(head):
                break
            self._waiting.popleft()
            if head.admitted_at is None:
                head.admitted_at = now
            self._running.append(head)
            prefill_s += self.cost.prefill_time(head.context)  # prompt plus any output it kept
        self._max_running = max(self._max_running, len(self._running))
        return prefill_s

    def _fits(self, head: _Sequence) -> bool:
        """Whether ``head``'s context (prompt plus kept output) and one more step fit beside the running
        ones under the KV cache less the engine's watermark (vLLM V0's block manager kept 1% free).
        An empty engine always admits its head, as the simulator's does: ``generate`` refused any
        sequence the whole cache cannot hold, and under a watermark a queue could otherwise stall."""
        if not self._running:
            return True
        capacity = self.cost.kv_capacity_tokens
        limit = capacity - self.rules.watermark * capacity
        return self._kv_after_step() + head.context + 1 <= limit

    def _chunk_bounds(self, prefill_s: float) -> tuple[int, list[float]]:
        """Steps until the next event, and the cumulative wall time after each of them."""
        batch = len(self._running)
        context = sum(s.context for s in self._running)
        until_done = min(s.remaining for s in self._running)
        until_full = (self.cost.kv_capacity_tokens - context) // batch
        steps = max(1, min(until_done, until_full))
        step_times = (self.cost.step_time(batch, context + i * batch) for i in range(steps))
        return steps, list(itertools.accumulate(step_times, initial=prefill_s))[1:]

    async def _run_chunk(self, prefill_s: float) -> int:
        """Sleep through the chunk; an early wake shortens it to the end of the step in progress."""
        assert self._wake is not None
        steps, cumulative = self._chunk_bounds(prefill_s)
        start = self.clock()
        while True:
            remaining = start + cumulative[steps - 1] - self.clock()
            if remaining <= 0:
                break
            self._wake.clear()
            try:  # not wait_for, which on 3.11 drops a cancel that meets a wake-up
                async with asyncio.timeout(remaining):
                    await self._wake.wait()
            except TimeoutError:
                break
            elapsed = self.clock() - start
            steps = min(steps, bisect.bisect_right(cumulative, elapsed) + 1)
        self._modelled_s += cumulative[steps - 1]
        return steps

    def _advance(self, steps: int) -> None:
        now = self.clock()
        still: list[_Sequence] = []
        for seq in self._running:
            seq.generated += steps
            if seq.done.done():
                continue
            if seq.remaining > 0:
                still.append(seq)
                continue
            admitted = seq.admitted_at if seq.admitted_at is not None else now
            seq.done.set_result(
                Generation(seq.generated, admitted - seq.arrived_at, now - admitted, seq.preemptions)
            )
            self._finished += 1
            self._tokens += seq.generated
        self._running = still
