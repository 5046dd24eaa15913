"""The sampling fields of an item's generation request, which both modes hand on: push mode merges
them into its request to the engine (``service.sidecar.engine_client``), pull mode returns them with
each lease it hands out (``service.sidecar.pull_state``). Apart from either, so that neither mode
loads the other's client or server for them (the engine client's httpx, the pull API's FastAPI).
"""

from __future__ import annotations

from typing import Any

from service.delivery.records import DeliveryItem


def sample_params(item: DeliveryItem) -> dict[str, Any]:
    """The sampling fields of ``item``'s request: its payload's ``params``, with a ``seed`` there
    taken as the prompt's base seed and offset by the sample index. The samples of one prompt are
    separate requests (``n=1``), so one seed for all would draw the same response ``n`` times; vLLM
    given ``n`` and a seed in one request draws them differently, and so does this."""
    params = dict(item.payload.get("params") or {})
    if isinstance(params.get("seed"), int):
        params["seed"] += item.sample_idx
    return params
