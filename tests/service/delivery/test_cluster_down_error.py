"""``reach.cluster_down``: which errors are a node's "CLUSTERDOWN The cluster is down", the answer that
speaks for every slot (a walk passes every schedule over after it, and raises it at once where it has
reached nothing). The cluster client raises its own error after the node's, which it was handling, so
the node's may be the error's cause or context, a link or two down.

Found by mutation testing (mutants13, docs/experiments.md): the type check, either link of the chain
and its length were each removable with every test passing."""

from __future__ import annotations

import redis
from redis.exceptions import ClusterDownError, RedisClusterException

from service.delivery.errors import cluster_down

DOWN = "The cluster is down"


def _raised_while_handling(inner: BaseException, outer: BaseException) -> BaseException:
    """``outer`` raised in the ``except`` of ``inner`` (its ``__context__``), as the client raises."""
    try:
        try:
            raise inner
        except BaseException:
            raise outer  # noqa: B904 - the context is the point
    except BaseException as error:
        return error


def _raised_from(inner: BaseException, outer: BaseException) -> BaseException:
    try:
        raise outer from inner
    except BaseException as error:
        return error


def test_a_nodes_cluster_down_reply_is_the_cluster_down() -> None:
    assert cluster_down(ClusterDownError(DOWN))


def test_a_slot_not_served_is_not_the_cluster_down() -> None:
    assert not cluster_down(ClusterDownError("Hash slot not served"))


def test_another_error_quoting_the_words_is_not_the_cluster_down() -> None:
    assert not cluster_down(redis.ResponseError(f"ERR the script said: {DOWN}"))


def test_the_clients_error_raised_while_handling_the_nodes_is_the_cluster_down() -> None:
    error = _raised_while_handling(ClusterDownError(DOWN), RedisClusterException("slots not covered"))
    assert cluster_down(error)


def test_the_clients_error_raised_from_the_nodes_is_the_cluster_down() -> None:
    error = _raised_from(ClusterDownError(DOWN), RedisClusterException("slots not covered"))
    assert cluster_down(error)


def test_the_nodes_reply_two_links_down_is_the_cluster_down() -> None:
    middle = _raised_while_handling(ClusterDownError(DOWN), redis.ConnectionError("reset"))
    error = _raised_while_handling(middle, RedisClusterException("slots not covered"))
    assert cluster_down(error)
