"""Redis clients whose every later call can be refused at once: what the sidecar's hang-up at its
shutdown (``service/sidecar/hang_up.py``) rests on.

Why a connection class. redis-py's public way to change what a connection does is the class its pool
makes them of (``connection_class``, a constructor argument of ``ConnectionPool`` and of every client,
which a cluster client hands on to its node clients). Each client built here gets a class of its own,
a subclass of the one its URL's scheme asks for (TCP, TLS, Unix socket), whose connect, send and read
first look at that class's ``hung_up`` flag: once it is set, each raises ``HungUpError`` unsent, on a
pooled connection, a new one, or a cluster node's made later for a slot map asked again. The hang-up
used to reach into the pools' private attributes instead, which a newer redis-py (``redis>=8.0`` has
no upper bound) could rename and so make a silent no-op.

A cluster client built from a ``rediss://`` URL takes the URL's TLS class over the one given
(``RedisCluster.from_url`` lets the URL win): the URL is handed on as ``redis://`` here, its TLS
carried by the class, a subclass of ``SSLConnection``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import redis
from redis.cluster import RedisCluster
from redis.connection import AbstractConnection, Connection, SSLConnection, UnixDomainSocketConnection

_BASES: dict[str, type[Connection] | type[UnixDomainSocketConnection]] = {
    "redis": Connection,
    "rediss": SSLConnection,
    "unix": UnixDomainSocketConnection,
}


class HungUpError(redis.RedisError):
    """A Redis call made after the sidecar hung up at its shutdown: refused unsent, at once."""

    def __init__(self) -> None:
        super().__init__(
            "the sidecar hung up Redis at its shutdown (service/sidecar/hang_up.py): this call was not"
            " sent; what it would have done is left to the reapers (its leases lapse and are requeued)"
        )


class Refusing(AbstractConnection):
    """What each client's connection class adds to its base: refusal once ``hung_up`` is set. Never
    made itself: ``connection_class`` mixes it into a base of its own per client."""

    hung_up: ClassVar[bool] = False  # set once, by ``hang_up``, on the client's own subclass

    @classmethod
    def refuse_from_now(cls) -> None:
        """Every connection of this class refuses from now on (those not made yet too)."""
        cls.hung_up = True

    def _refuse(self) -> None:
        if type(self).hung_up:
            raise HungUpError()

    def connect(self) -> None:
        """Refused when hung up, also when the hang-up came while the socket was opening: the close
        did not reach a socket not made yet, and a stalled server would never answer on it."""
        self._refuse()
        super().connect()  # type: ignore[no-untyped-call]
        if type(self).hung_up:
            self.disconnect()  # type: ignore[no-untyped-call]
            raise HungUpError()

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        """Refused when hung up: also the reconnect a send on a closed connection makes itself."""
        self._refuse()
        super().send_packed_command(command, check_health)  # type: ignore[no-untyped-call]

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        """Refused when hung up: a pipeline's replies too, once its sends are refused or closed."""
        self._refuse()
        return super().read_response(*args, **kwargs)


def connection_class(url: str) -> type[Refusing]:
    """A connection class of its own for one client of ``url``: the scheme's base (``ValueError``
    naming the scheme when none), with refusal mixed in."""
    scheme = url.partition("://")[0]
    base = _BASES.get(scheme)
    if base is None:
        raise ValueError(f"url scheme {scheme!r}: expected one of {sorted(_BASES)}")
    return type(f"Refusing{base.__name__}", (Refusing, base), {})


def hangable(url: str, **options: Any) -> redis.Redis:
    """A client of ``url`` built with ``options``, whose connections ``hang_up`` can make refuse."""
    return redis.Redis.from_url(url, connection_class=connection_class(url), **options)


def hangable_cluster(url: str, **options: Any) -> RedisCluster:
    """A cluster client of ``url`` built with ``options``, whose node connections ``hang_up`` can
    make refuse. The URL goes on as ``redis://``: its scheme would replace the class given, which
    carries its TLS instead."""
    kind = connection_class(url)
    return RedisCluster.from_url("redis://" + url.partition("://")[2], connection_class=kind, **options)
