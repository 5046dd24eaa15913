"""``Delivery.keep_planning`` when Redis fails: a single Redis's failure is the caller's to meet (the
keeper logs it and tries again at its next tick), and on a Redis Cluster a slot no master serves fails
only its own steps, the others' entries kept (``indexes._keep_each``).

Found by mutation testing (mutants13, docs/experiments.md): the single Redis's raise and the unserved
slot's resend step by step were each removable with every test passing."""

from __future__ import annotations

import socket

import pytest
import redis
from redis.backoff import NoBackoff
from redis.crc import key_slot
from redis.retry import Retry

from service.delivery import Delivery, keys
from service.delivery.errors import SLOT_NOT_SERVED
from tests.cluster import partly_served

SHORT_MS, LONG_MS = 10_000, 600_000


def _closed_port() -> int:
    """A local port nothing listens on (bound, then closed): a connection there is refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def test_a_single_redis_that_does_not_answer_fails_the_keep_itself() -> None:
    # refused once: redis-py's default retry tried 3 more times after 1-10 s backoffs, the same error
    delivery = Delivery(redis.Redis(port=_closed_port(), retry=Retry(NoBackoff(), 0)))
    with pytest.raises(redis.ConnectionError):
        delivery.keep_planning({1: ["part"], 2: ["part"]}, LONG_MS)


def _left_ms(delivery: Delivery, step: int, member: str) -> float:
    seconds, micros = delivery.client.time()
    score = delivery.client.zscore(keys.step_planning(step), member)
    return float(score or 0) - (seconds * 1000 + micros // 1000)


@pytest.mark.slow
def test_a_slot_no_master_serves_fails_its_own_steps_and_the_others_are_kept() -> None:
    with partly_served() as cluster:
        delivery = Delivery(cluster.client())
        unserved, served = 0, next(s for s in range(1, 1_000) if _slot(s) != _slot(0))
        for step in (unserved, served):
            delivery.enter_planning(step, f"part {step}", SHORT_MS)
        for node in cluster.nodes:  # every master drops the first step's slot
            with redis.Redis(port=node.port) as client:
                client.execute_command("CLUSTER", "DELSLOTS", _slot(unserved))
        failed = delivery.keep_planning({unserved: ["part 0"], served: [f"part {served}"]}, LONG_MS)
        assert list(failed) == [unserved]
        assert isinstance(failed[unserved], SLOT_NOT_SERVED)
        assert _left_ms(delivery, served, f"part {served}") > SHORT_MS


def _slot(step: int) -> int:
    return key_slot(keys.step_planning(step).encode())
