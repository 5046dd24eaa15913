"""A sidecar's client over ``rediss://`` speaks TLS and hangs up as one over ``redis://`` does.

``service.delivery.hangable`` gives each client a connection class of its own, a subclass of the one
the URL's scheme asks for. A cluster client built from a ``rediss://`` URL takes the URL's TLS class
over the one given, so its node connections could not refuse: the URL goes on as ``redis://`` there,
the TLS carried by the class. The embedded valkey has no TLS: a terminator stands in front of it (as
in tests/service/api/test_redis_tls.py), and a cluster node announces the terminator's port.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import trustme

from service.delivery.hangable import HungUpError, hangable, hangable_cluster
from service.delivery.protocol import Delivery
from service.delivery.stored import REPLY_DECODING
from service.embedded import EmbeddedServer
from service.sidecar.hang_up import hang_up
from tests.cluster import one_node_cluster
from tests.service.tls_terminator import TlsTerminator


@pytest.fixture(params=["plain", "cluster"])
def over_tls(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Delivery]:
    """A ``Delivery`` over ``rediss://`` (its CA file given), built as a sidecar builds its own."""
    ca = trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    cluster = request.param == "cluster"
    server = one_node_cluster() if cluster else EmbeddedServer().start()
    terminator = TlsTerminator(server.port, context)
    if cluster:  # the slot map names the TLS endpoint, which the node clients then reach
        with redis.Redis(port=server.port) as admin:
            admin.config_set("cluster-announce-port", terminator.port)
    url = f"rediss://127.0.0.1:{terminator.port}"
    build = hangable_cluster if cluster else hangable
    try:
        yield Delivery(build(url, ssl_ca_certs=str(ca_file), socket_timeout=10.0, **REPLY_DECODING))
    finally:
        terminator.close()
        server.stop()


def test_a_client_over_rediss_answers_over_tls_and_refuses_once_hung_up(over_tls: Delivery) -> None:
    """Answered through the terminator, which relays TLS only (a plain connection gets no reply);
    then hung up, each later call is refused, on a cluster's nodes too."""
    assert isinstance(over_tls.schedules_for("w0"), list)
    hang_up(over_tls)
    with pytest.raises(HungUpError):
        over_tls.schedules_for("w0")
