"""Slot and KV admission: what a sidecar may start, and when."""

from __future__ import annotations

import sys
import threading
import time

from service.sidecar.holdings import Holdings, lease_id, reservation_tokens
from tests.service.sidecar.sized_leases import sized_lease


def test_an_item_reserves_its_prompt_plus_its_predicted_length_capped_at_max_tokens() -> None:
    assert reservation_tokens(sized_lease("a").item) == 1000
    assert reservation_tokens(sized_lease("b", predicted=9000.4).item) == 4100
    assert reservation_tokens(sized_lease("c", predicted=10.2).item) == 111


def test_kv_admission_starts_items_only_while_their_reservations_fit_the_cache() -> None:
    holdings = Holdings(max_in_flight=8, kv_capacity_tokens=2500)
    first, second, third = (holdings.add(sized_lease(k), kv_admission=True) for k in "abc")
    for held in (first, second):
        assert holdings.can_start(held)
        held.started = True
    assert holdings.reserved() == 2000
    assert not holdings.can_start(third)
    holdings.remove(("s", "a", 1))
    assert holdings.can_start(third)


def test_an_item_larger_than_the_whole_cache_still_starts_when_nothing_runs() -> None:
    holdings = Holdings(max_in_flight=8, kv_capacity_tokens=500)
    huge = holdings.add(sized_lease("a"), kv_admission=True)
    assert holdings.can_start(huge)


def test_without_the_plan_flag_or_a_known_cache_only_slots_limit_admission() -> None:
    unflagged = Holdings(max_in_flight=2, kv_capacity_tokens=500)
    unknown_cache = Holdings(max_in_flight=2, kv_capacity_tokens=None)
    for holdings, flag in ((unflagged, False), (unknown_cache, True)):
        a, b = holdings.add(sized_lease("a"), flag), holdings.add(sized_lease("b"), flag)
        a.started = True
        assert holdings.can_start(b)
        assert holdings.free_slots() == 0


def test_the_steal_budget_is_the_cache_minus_every_held_reservation_whatever_the_admission_mode() -> None:
    holdings = Holdings(max_in_flight=8, kv_capacity_tokens=2500)
    running = holdings.add(sized_lease("a"), kv_admission=False)  # reserves nothing for admission...
    running.started = True
    holdings.add(sized_lease("b", predicted=9000.0), kv_admission=False)  # ...nor does a waiting lease
    assert holdings.steal_budget() == 2500 - 1000 - 4100  # ...but both count against a steal
    holdings.remove(("s", "b", 1))
    assert holdings.steal_budget() == 1500


def test_a_sidecar_that_does_not_know_its_kv_cache_steals_by_slots_alone() -> None:
    holdings = Holdings(max_in_flight=8, kv_capacity_tokens=None)
    holdings.add(sized_lease("a"), kv_admission=True)
    assert holdings.steal_budget() is None


def test_an_items_concurrency_is_the_mean_number_in_flight_while_it_ran() -> None:
    now = [0.0]
    holdings = Holdings(max_in_flight=8, clock=lambda: now[0])
    a, b, c = (holdings.add(sized_lease(k), kv_admission=False) for k in "abc")
    holdings.start(a)  # t=0: a alone
    now[0] = 2.0
    holdings.start(b)  # t=2: a and b
    now[0] = 4.0
    holdings.start(c)  # t=4: a, b and c
    now[0] = 6.0
    holdings.remove(("s", "c", 1))  # t=6: c done, a and b again
    now[0] = 8.0
    assert holdings.mean_concurrency(a) == (1 * 2 + 2 * 2 + 3 * 2 + 2 * 2) / 8
    assert holdings.mean_concurrency(b) == (2 * 2 + 3 * 2 + 2 * 2) / 6


def test_an_item_that_ran_alone_reports_a_concurrency_of_one() -> None:
    now = [10.0]
    holdings = Holdings(max_in_flight=8, clock=lambda: now[0])
    held = holdings.add(sized_lease("a"), kv_admission=False)
    holdings.start(held)
    assert holdings.mean_concurrency(held) == 1.0  # no time passed yet
    now[0] = 13.0
    assert holdings.mean_concurrency(held) == 1.0


def test_once_the_decode_rate_is_known_a_sequence_near_its_end_leaves_room_for_the_next() -> None:
    now = [0.0]
    holdings = Holdings(max_in_flight=8, kv_capacity_tokens=1500, clock=lambda: now[0])
    first, second = (
        holdings.add(sized_lease("a"), kv_admission=True),
        holdings.add(sized_lease("b"), kv_admission=True),
    )
    holdings.start(first)
    holdings.observe(output_tokens=500, wall_time_s=50.0)  # 10 tokens/s per sequence
    assert not holdings.can_start(second)  # both would reach 1,000 tokens together
    now[0] = 80.0  # the first has ~800 tokens out, 100 to go: the pair peaks at 1,200
    assert holdings.can_start(second)


def test_a_sequence_past_its_prediction_is_expected_to_run_a_quarter_of_it_again() -> None:
    now = [0.0]
    holdings = Holdings(max_in_flight=8, kv_capacity_tokens=2200, clock=lambda: now[0])
    first = holdings.add(sized_lease("a"), kv_admission=True)
    holdings.start(first)
    holdings.observe(output_tokens=100, wall_time_s=10.0)  # 10 tokens/s per sequence
    now[0] = 200.0  # ~2,000 tokens out against 900 predicted: it holds 2,100, with 25 more expected
    # (extensions of 225 steps: 2,000 is 200 into its fifth), peaking at 2,125 beside nothing else
    assert not holdings.can_start(holdings.add(sized_lease("b"), kv_admission=True))  # 2,125 + 125 > 2,200
    assert holdings.can_start(holdings.add(sized_lease("c", prompt=10, predicted=100.0), kv_admission=True))


def test_completions_without_tokens_or_time_teach_no_rate() -> None:
    holdings = Holdings(max_in_flight=8, kv_capacity_tokens=1500)
    holdings.observe(output_tokens=0, wall_time_s=3.0)
    holdings.observe(output_tokens=10, wall_time_s=0.0)
    assert holdings.decode_rate() is None


def test_kv_admission_counts_what_other_schedules_run_on_the_same_engine() -> None:
    # the engine's cache holds every running sequence, whatever its schedule's admission mode
    now = [0.0]
    holdings = Holdings(max_in_flight=8, kv_capacity_tokens=2500, clock=lambda: now[0])
    unflagged = holdings.add(sized_lease("a"), kv_admission=False)
    holdings.start(unflagged)  # 1,000 tokens at its predicted end
    flagged = holdings.add(sized_lease("b"), kv_admission=True)
    holdings.start(flagged)
    candidate = holdings.add(sized_lease("c"), kv_admission=True)
    assert holdings.reserved() == 2000
    assert not holdings.can_start(candidate)  # before a rate: 3 x 1,000 reserved > 2,500
    holdings.observe(output_tokens=900, wall_time_s=900.0)  # one token a second
    assert not holdings.can_start(candidate)  # all three would reach 1,000 tokens together
    now[0] = 600.0  # a and b hold 700 each, 300 to go: with c, 1,000 + 1,000 + 400 at step 300
    assert holdings.can_start(candidate)


def test_the_health_thread_counts_what_runs_while_the_event_loop_adds_and_removes_leases() -> None:
    """The health server's thread reads ``in_flight`` (/health, /ready, /metrics) while the loop
    changes the holdings: iterating the dict itself, a probe raised "dictionary changed size during
    iteration" and its prober got no answer (with 2000 leases, within a fraction of a second)."""
    holdings = Holdings(max_in_flight=4000)
    for i in range(2000):
        holdings.start(holdings.add(sized_lease(f"k{i}"), kv_admission=False))
    errors: list[BaseException] = []
    done = threading.Event()

    def probe() -> None:
        while not done.is_set():
            try:
                holdings.in_flight()
            except RuntimeError as error:
                errors.append(error)
                return

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # thread switches as often as a busy sidecar's are likely
    prober = threading.Thread(target=probe)
    prober.start()
    try:
        until = time.monotonic() + 1.0
        while time.monotonic() < until and not errors:  # the loop: leases come and go
            holdings.start(holdings.add(sized_lease("churn"), kv_admission=False))
            holdings.remove(("s", "churn", 1))
    finally:
        done.set()
        prober.join()
        sys.setswitchinterval(switch)
    assert errors == []


def test_the_thiefs_busy_time_is_its_longest_predicted_remainder_at_the_rate_in_milliseconds() -> None:
    """What the steal deadline guard is told (``busy_ms``): a waiting item counts whole, a started one
    from its start, the longest wins; in milliseconds, as the steal script compares them."""
    now = [100.0]
    holdings = Holdings(4, clock=lambda: now[0])
    waiting = holdings.add(sized_lease("a", predicted=900.0), kv_admission=False)
    started = holdings.add(sized_lease("b", predicted=1500.0), kv_admission=False)
    holdings.start(started)
    now[0] = 110.0  # 10 s at 50 tokens/s: 500 of its 1,500 tokens decoded
    assert holdings.busy_ms(None) == 0
    assert holdings.busy_ms(50.0) == 20_000  # 1,000 tokens left of b, against 900 of the waiting a
    holdings.remove(("s", "b", 1))
    assert holdings.busy_ms(50.0) == 18_000
    assert waiting.started is False


def test_a_lease_held_again_counts_in_flight_only_from_its_restore() -> None:
    """``restore`` (a pull failure report unanswered, held again): the time it was off the holdings
    counts at the count it had then, so a neighbour's mean concurrency is not raised by that gap."""
    now = [0.0]
    holdings = Holdings(max_in_flight=8, clock=lambda: now[0])
    dropped, neighbour = (holdings.add(sized_lease(k), kv_admission=False) for k in "ab")
    holdings.start(dropped)
    holdings.start(neighbour)
    now[0] = 10.0
    holdings.remove(lease_id(dropped.lease))
    now[0] = 20.0
    holdings.restore(dropped)
    now[0] = 30.0
    assert holdings.mean_concurrency(neighbour) == (2 * 10 + 1 * 10 + 2 * 10) / 30


def test_a_failing_pull_lease_holds_no_slot_kv_reservation_steal_budget_or_busy_time() -> None:
    """Held only until its failure report is answered (``PullState.abandon``): the worker was told it
    lost it, so nothing the engine is reckoned to run includes it; still held, it is still counted."""
    holdings = Holdings(max_in_flight=2, kv_capacity_tokens=2500, clock=lambda: 0.0)
    failing = holdings.add(sized_lease("a", predicted=3000.0), kv_admission=True)
    running = holdings.add(sized_lease("b"), kv_admission=True)
    for held in (failing, running):
        holdings.start(held)
    failing.failing = True
    waiting = holdings.add(sized_lease("c", predicted=1400.0), kv_admission=True)
    assert (len(holdings), holdings.in_flight(), holdings.waiting()) == (3, 1, [waiting])
    assert (holdings.free_slots(), holdings.reserved(), holdings.steal_budget()) == (0, 1000, 0)
    assert holdings.can_start(waiting)  # b's 1000 and c's 1500 fit; a's 3100 beside them did not
    assert holdings.busy_ms(rate=100.0) == 14_000  # c's 1400 tokens; a's 3000 made it 30 s
