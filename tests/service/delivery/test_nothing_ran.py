"""``errors.nothing_ran``: only Redis's own refusal of the command proves none of it ran; a cluster
client's answers to its last try (CLUSTERDOWN, TRYAGAIN, a redirect too many) do not, nor does no
answer at all."""

from __future__ import annotations

import pytest
import redis
from redis.exceptions import AskError, ClusterDownError, MovedError, TryAgainError

from service.delivery.errors import nothing_ran


def test_a_refusal_of_the_command_itself_proves_nothing_ran() -> None:
    assert nothing_ran(redis.ResponseError("OOM command not allowed when used memory > 'maxmemory'"))


@pytest.mark.parametrize(
    "error",
    [
        ClusterDownError("CLUSTERDOWN The cluster is down"),
        TryAgainError("TRYAGAIN Multiple keys request during rehashing of slot"),
        AskError("3999 127.0.0.1:6381"),
        MovedError("3999 127.0.0.1:6381"),
        redis.TimeoutError("Timeout reading from socket"),
        redis.ConnectionError("Connection refused"),
    ],
    ids=lambda error: type(error).__name__,
)
def test_an_answer_to_a_last_try_or_no_answer_proves_nothing(error: Exception) -> None:
    assert not nothing_ran(error)
