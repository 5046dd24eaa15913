"""The engine the service assumes its workers run, where a request or a command names none.

A module of its own, with no imports, so that the API's schema, the engine stand-in and its command
line (which must start without loading pydantic) read one constant.
"""

from __future__ import annotations

# The engine a request's plan is played on when it names none and the operator set no other
# (``Settings.default_engine``, ``ROLLOUT_DEFAULT_ENGINE``; ``scheduler.sim_rules.ENGINES``).
# vLLM V1, not the library's ``vllm-v0``: the engines the sidecars drive today evict as V1 does
# (vLLM removed V0 in 0.11; SGLang's retraction keeps the output and re-prefills it too), and the
# service's default admission (``kv_admission`` false) is the mode where the engine decides the
# hedges (docs/api.md, "engine"). engine-sim plays it by default too (docs/engine-sim.md).
SERVICE_ENGINE = "vllm-v1"
