"""A lease of one item sized for the holdings' admission tests: its prompt, its predicted length and
its cap are what a reservation is made of. The holdings and failing-holdings tests build it alike,
rather than one importing it from the other's test module."""

from __future__ import annotations

from service.delivery.records import DeliveryItem, Lease


def sized_lease(key: str, prompt: int = 100, predicted: float = 900.0, cap: int = 4000) -> Lease:
    """Item ``key`` of schedule ``s`` for ``w``: ``prompt`` tokens, ``predicted`` output, ``cap`` at
    most; token 1, attempt 1."""
    item = DeliveryItem(key, key, 0, prompt, cap, predicted)
    return Lease("s", "w", item, token=1, deadline_ms=0, attempt=1)
