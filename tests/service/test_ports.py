"""Picked ports: free, outside the range the kernel hands to outgoing connections, never repeated."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from service import ports
from service.ports import free_port


def test_a_picked_port_can_be_bound_on_loopback() -> None:
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
        sock.listen()


def test_picks_lie_below_the_ephemeral_range_that_outgoing_connections_use() -> None:
    low = ports._ephemeral_low()
    picked = [free_port() for _ in range(50)]
    if low - 1 > ports.LOWEST:  # the default ranges (Linux 32768-60999, macOS/Windows 49152-65535)
        assert all(ports.LOWEST <= port < low for port in picked)
    else:  # a range reconfigured down to below 20000: the kernel's picks (next test)
        assert all(port >= low for port in picked)
    with (
        socket.create_server(("127.0.0.1", 0)) as server,
        socket.create_connection(server.getsockname()) as client,  # an outgoing connection
    ):
        assert client.getsockname()[1] >= low


def test_a_process_never_gets_the_same_port_twice() -> None:
    picked = [free_port() for _ in range(200)]
    assert len(set(picked)) == len(picked)


def test_a_port_in_use_is_not_picked(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    with socket.create_server(("127.0.0.1", 0)) as held:
        picks = iter([held.getsockname()[1], free])
        monkeypatch.setattr(ports._random, "randint", lambda low, high: next(picks))
        assert free_port() == free


def test_without_room_below_the_ephemeral_range_the_kernel_picks(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    squeezed = tmp_path / "ip_local_port_range"
    squeezed.write_text("1024\t65535\n")
    monkeypatch.setattr(ports, "EPHEMERAL_RANGE", squeezed)
    port = free_port()
    assert 1024 <= port <= 65535
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_processes_given_different_shares_of_the_range_never_pick_the_same_port(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Parallel test workers pick at once: each gets a slice, so no two can pick one port."""
    monkeypatch.setattr(ports, "_handed_out", set())
    monkeypatch.setattr(ports, "_slice", ports._slice)
    low = ports._ephemeral_low()
    picks: list[set[int]] = []
    for index in range(3):
        ports.share_range(index, 3)
        picks.append({free_port() for _ in range(40)})
    assert len(picks[0] | picks[1] | picks[2]) == sum(len(share) for share in picks)  # disjoint
    assert all(ports.LOWEST <= port < low for share in picks for port in share)
    width = (low - ports.LOWEST) // 3
    assert all(ports.LOWEST + width <= port < ports.LOWEST + 2 * width for port in picks[1])


@pytest.mark.parametrize(("index", "count"), [(0, 0), (2, 2), (-1, 2)])
def test_a_share_outside_the_range_of_shares_is_refused(index: int, count: int) -> None:
    with pytest.raises(ValueError, match=f"slice {index} of {count}"):
        ports.share_range(index, count)


def test_a_port_another_socket_listens_on_is_refused_as_in_use() -> None:
    with socket.create_server(("127.0.0.1", 0)) as holder:
        port = holder.getsockname()[1]
        assert ports.unservable("127.0.0.1", port) == f"127.0.0.1:{port} is already in use"


def test_an_address_this_host_does_not_have_is_refused_as_one_that_cannot_be_bound() -> None:
    # 192.0.2.1 is TEST-NET-1 (RFC 5737), never a local interface's address
    reason = ports.unservable("192.0.2.1", 8000)
    assert reason is not None
    assert reason.startswith("192.0.2.1:8000 cannot be bound (")
    assert reason.islower()  # the system's words in the sentence, not capitalised as one


def test_a_free_port_is_servable() -> None:
    port = free_port()
    assert ports.unservable("127.0.0.1", port) is None
