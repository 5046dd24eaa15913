"""The simulator's per-item ledger: what each trajectory brings to a simulation and what became of it.

Kept apart from the engine that fills it (``scheduler.sim_engine``) because three readers besides the
engine build or read one: the simulator, the steal deadlines (``scheduler.deadlines``) and the robust
ordering's plays (``scheduler.policies.robust_order``).
"""

from __future__ import annotations


class Ledger:
    """Per-item inputs and outcomes of one simulation, as parallel lists indexed by item number.

    Lists rather than one object per item keep the event loop free of attribute churn.
    """

    __slots__ = ("end", "group", "kept", "keys", "need", "pin", "planned", "preemptions", "prompts",
                 "reserve", "start", "steps", "stolen", "worker")  # fmt: skip

    def __init__(self, keys: list[str], prompts: list[int], steps: list[int], planned: list[int]) -> None:
        n = len(keys)
        self.keys = keys  # trajectory key of item i
        self.prompts = prompts  # prompt tokens (prefill, and KV from the first step)
        self.steps = steps  # decode steps it really takes (true output length)
        self.planned = planned  # decode steps the plan assumed (predicted length): steal accounting
        self.reserve = [p + s for p, s in zip(prompts, planned, strict=True)]  # KV at predicted end
        self.start = [-1.0] * n  # first admission time, seconds (-1: not yet)
        self.end = [-1.0] * n  # completion time, seconds (-1: not yet)
        self.preemptions = [0] * n  # times it was evicted and restarted
        self.worker = [-1] * n  # index of the worker that ran it (last admission)
        self.stolen = [False] * n  # taken from another worker's queue by work stealing
        self.kept = [0] * n  # output tokens kept across evictions (resume mode only; else 0)
        self.pin = [-1] * n  # index of the only worker allowed to run it (-1: any)
        self.group = list(range(n))  # prefix-sharing group number (kept whole under prefix affinity)
        self.need = [p + s for p, s in zip(prompts, steps, strict=True)]  # KV a worker must hold for it
