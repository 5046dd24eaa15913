"""One steal takes the same batch in ``steal.lua`` as in the simulator at the KV steal gate's bound.

``test_steal_batch_parity.py`` holds the rule's parity; here the budget the thief sends is filled to
the token by the batch: both take the items whose cumulative reservation reaches it exactly (the gate
refuses only past it: ``used > budget`` in ``tail_fit``, ``reservation_fits``'s ``<= cap``), and the
next item ends the call (mutation testing, helper mutants63).
"""

from __future__ import annotations

import pytest

from service.delivery import Delivery, PublishedSchedule
from tests.service.delivery.test_steal_batch_parity import _item, _simulated


@pytest.mark.parametrize(("budget", "taken"), [(500, 1), (1_000, 2), (1_499, 2), (1_500, 3)])
def test_a_budget_filled_to_the_token_takes_the_same_items_in_both(
    delivery: Delivery, budget: int, taken: int
) -> None:
    queue = tuple(_item(i, False) for i in range(10))  # 500 KV tokens each at the predicted length
    delivery.publish(PublishedSchedule("s", {"a": (), "b": queue}))
    stolen = [le.key for le in delivery.steal("s", "a", 5, budget_tokens=budget)]
    assert stolen == _simulated(10, 5, set(), budget, False)
    assert stolen == [f"b-{i}#0" for i in range(9, 9 - taken, -1)]
