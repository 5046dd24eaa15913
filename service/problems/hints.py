"""Where a field refused as unknown belongs, when it is one a trainer brings from its engine or RL
framework: ``max_tokens`` (vLLM's ``SamplingParams``, OpenAI's body), ``n``, ``logprobs``, a
``temperature`` set on an item rather than in its ``sampling``.

pydantic's own word for them is "Extra inputs are not permitted", which names the field but not
what to do: a trainer that sent ``sampling.logprobs`` could not tell that engine fields without a
name here go in ``sampling.extra``, nor one that sent ``sampling.max_tokens`` that the cap is each
item's ``max_new_tokens``. ``service.problems.details`` adds the hint here to such a refusal.
"""

from __future__ import annotations

import re

# ``service.api.schemas.Sampling``'s own fields
# (``tests/service/problems/test_field_hints.py`` holds them equal)
SAMPLING_FIELDS = frozenset(
    {
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "presence_penalty",
        "frequency_penalty",
        "repetition_penalty",
        "stop",
        "stop_token_ids",
        "seed",
        "extra",
    }
)
CAP_NAMES = frozenset({"max_tokens", "max_completion_tokens", "max_response_length", "max_length"})
CAP = "the cap is each item's max_new_tokens (batch.items[i].max_new_tokens)"
SIDECAR_OWNED = {  # engine fields the sidecar sets for every request, and where the trainer says them
    "n": "samples per prompt are each item's n (batch.items[i].n)",
    "best_of": "samples per prompt are each item's n (batch.items[i].n)",
    "stream": "the sidecar sends each sample as one unstreamed request",
    "stream_options": "the sidecar sends each sample as one unstreamed request",
    "prompt": "each item carries its own prompt or messages (batch.items[i].prompt)",
    "messages": "each item carries its own prompt or messages (batch.items[i].messages)",
    "model": "the engine's model id is the sidecar's (--engine-model); the top-level model is the preset",
    "rollout": "the sidecar sets it for engine-sim",
}
# names a trainer may give a prompt's token ids (veRL's ``input_ids``, SGLang's ``Engine.generate``
# ``input_ids``, and the like): here they are the item's ``prompt_token_ids``
TOKEN_ID_NAMES = frozenset({"input_ids", "prompt_ids", "token_ids", "tokens"})
_ITEM = re.compile(r"batch\.items\[\d+\]")


def hint(path: str) -> str | None:
    """What to send instead of the unknown field at ``path`` (``sampling.logprobs``,
    ``batch.items[3].max_tokens``); None when there is nothing better to say than that it is unknown."""
    parent, _, name = path.rpartition(".")
    if parent == "sampling" or parent.endswith(".sampling"):
        return _in_sampling(parent, name)
    if _ITEM.fullmatch(parent):
        if name in CAP_NAMES:
            return "the cap is max_new_tokens"
        if name in TOKEN_ID_NAMES:
            return f"a prompt's token ids go in {parent}.prompt_token_ids (with prompt_tokens their count)"
        return f"sampling fields go in {parent}.sampling" if name in SAMPLING_FIELDS else None
    if parent == "" and name in SAMPLING_FIELDS:
        return "sampling fields go in sampling"
    if parent == "" and (name in CAP_NAMES or name == "n"):
        return CAP if name in CAP_NAMES else SIDECAR_OWNED["n"]
    return None


def _in_sampling(parent: str, name: str) -> str:
    """The hint for an unknown field of a ``sampling`` object: where the trainer says it, or that an
    engine field without a name here goes in ``extra``, sent as given."""
    if name in CAP_NAMES:
        return CAP
    if name in SIDECAR_OWNED:
        return SIDECAR_OWNED[name]
    example = f'{{"extra": {{"{name}": ...}}}}'
    return f"an engine field without a name here goes in {parent}.extra, sent as given: {example}"
