"""The engines the simulator can play: each a named set of the rules in which vLLM versions differ.

Why named. The simulator's rules (``scheduler.sim_engine``) have two knobs on which the model and
vLLM V1 part: the share of KV kept free when admitting (V0's block manager kept a 1% watermark; V1's
KV cache manager keeps none by default) and what an evicted sequence keeps (the model's default
restarts it from nothing, its progress lost, as issue 6 words it and the planner's finish model
assumes; V1 keeps its output and re-prefills prompt plus output on resume,
``Scheduler._preempt_request``, as V0's recompute preemption did). So ``vllm-v0`` is named for its
watermark: it is the planner's model, not a play of vLLM V0. A
replay that compares policies against the vLLM baseline should say which engine it played, by name,
not by two loose settings: ``replay --engine``. docs/simulator.md, "Fidelity to vLLM V1 and SGLang",
has the sources and the measured difference.

- ``vllm-v0``: the default, and the planner's finish model (``scheduler.finish``): a 1% watermark,
  an evicted sequence restarts. Plan and replay agree exactly on exact lengths in every admission mode.
- ``vllm-v1``: no watermark, an evicted sequence keeps its output and re-enters with a prefill of
  prompt plus output (charged at prefill cost, and holding that much KV). Under projected-peak
  admission exact lengths never evict, so plan and replay still agree there; under vLLM admission
  the plan (its finishes on the V0 model) and the play differ. A plan request names the engine
  (``PlanRequest.engine``) for its hedges' draws (``robust_order.draw_rules``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from scheduler.errors import UnknownNameError


@dataclass(frozen=True, slots=True)
class EngineRules:
    """The rules one engine plays by, beyond those every engine shares."""

    watermark: float  # share of KV kept free when admitting without projected-peak admission
    resume_preempted: bool  # an evicted sequence keeps its output (True) or restarts from nothing


DEFAULT_ENGINE = "vllm-v0"
ENGINES: Mapping[str, EngineRules] = MappingProxyType(
    {
        DEFAULT_ENGINE: EngineRules(watermark=0.01, resume_preempted=False),
        "vllm-v1": EngineRules(watermark=0.0, resume_preempted=True),
    }
)


def engine_rules(name: str) -> EngineRules:
    """The rules of the engine called ``name``; an unknown name is an ``UnknownNameError`` naming
    the known ones."""
    rules = ENGINES.get(name)
    if rules is None:
        raise UnknownNameError("engine", name, list(ENGINES))
    return rules
