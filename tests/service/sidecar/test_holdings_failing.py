"""A failing pull lease (``Held.failing``: listed lost past its hold bound, held only until its
failure report is answered) runs nothing on the engine, so the KV gate does not count it as running:
where it is the only started lease, the engine is idle, and an item larger than the whole cache
starts (``Holdings.can_start``'s "nothing runs" rule: nothing waits for ever); reckoned running, that
item waited until the report was answered, with the engine empty."""

from __future__ import annotations

from service.sidecar.holdings import Holdings
from tests.service.sidecar.sized_leases import sized_lease


def test_an_item_larger_than_the_cache_starts_beside_only_a_failing_lease() -> None:
    holdings = Holdings(max_in_flight=2, kv_capacity_tokens=2500, clock=lambda: 0.0)
    failing = holdings.add(sized_lease("a"), kv_admission=True)
    holdings.start(failing)
    failing.failing = True
    large = holdings.add(sized_lease("b", predicted=3000.0), kv_admission=True)  # reserves 3100 > 2500
    assert holdings.can_start(large)
    assert holdings.start_fitting() == [large]
