"""Free loopback ports that nothing else will take before our server binds them.

A port found by binding to port 0 comes from the kernel's ephemeral range, the same range it draws
the local port of every outgoing connection from. Between our check and the server's own bind, any
client connection on the machine (a Redis client, an HTTP request of the same test run) may take
it: the fresh-clone CI run failed once on exactly that, an engine stand-in finding its port taken.
A port below the ephemeral range is only ever taken by an explicit bind, so ``free_port`` picks one
there (at random, never the same twice in a process) and checks it is free now.

Processes that pick at once (the parallel workers of one test run) could still pick the same port
between one's check and its bind; ``share_range`` gives each of them a slice of its own.
"""

from __future__ import annotations

import errno
import random
import socket
from pathlib import Path

EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")  # Linux; elsewhere the default below
DEFAULT_EPHEMERAL_LOW = 32_768  # macOS and Windows start theirs at 49152, Linux by default at 32768
LOWEST = 20_000  # picks stay above the ports well-known services listen on
TRIES = 64  # random picks before falling back to the kernel's choice

_handed_out: set[int] = set()  # ports this process already returned: two servers never get one
_random = random.Random()
_slice = (0, 1)  # (index, count): picks come from the index-th of count equal slices (share_range)


def share_range(index: int, count: int) -> None:
    """Confine this process's picks to the ``index``-th of ``count`` equal slices of the range.

    Parallel test workers each pick ports for servers they start: two picking the same free port
    before either binds it would both start on it and one fail. Disjoint slices rule that out.
    """
    if count < 1 or not 0 <= index < count:
        raise ValueError(f"slice {index} of {count}: needs 0 <= index < count")
    global _slice
    _slice = (index, count)


def free_port() -> int:
    """A loopback TCP port that is free now and outside the kernel's ephemeral range when possible."""
    lowest, highest = _slice_bounds(LOWEST, _ephemeral_low() - 1)
    if highest > lowest:
        for _ in range(TRIES):
            port = _random.randint(lowest, highest)
            if port not in _handed_out and _bindable(port):
                _handed_out.add(port)
                return port
    return _kernel_pick()


def _slice_bounds(lowest: int, highest: int) -> tuple[int, int]:
    """This process's share of ``lowest..highest`` (all of it unless ``share_range`` said otherwise)."""
    index, count = _slice
    width = (highest - lowest + 1) // count
    start = lowest + index * width
    return start, start + width - 1


def _ephemeral_low() -> int:
    """The first port of the ephemeral range (``ip_local_port_range``'s lower end on Linux)."""
    try:
        return int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return DEFAULT_EPHEMERAL_LOW


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _kernel_pick() -> int:
    """The kernel's choice of a free port: the fallback where no range outside its own is usable."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    _handed_out.add(port)
    return port


def unservable(host: str, port: int) -> str | None:
    """Why a server cannot listen on ``host:port`` (e.g. "127.0.0.1:8000 is already in use"), or None.

    Bound and released at once, with SO_REUSEADDR as uvicorn binds, so a command can refuse in one
    line before it starts anything; another process may still take the port in between.
    """
    error = bind_error(host, port)
    return None if error is None else why_unservable(host, port, error)


def bind_error(host: str, port: int) -> OSError | None:
    """The error binding ``host:port`` (as ``unservable`` binds) raises, or None: its ``errno`` says
    which of the two is to blame (``EADDRINUSE``: the port; anything else: the host)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            return error
    return None


def why_unservable(host: str, port: int, error: OSError) -> str:
    """``bind_error``'s ``error`` in words: "127.0.0.1:8000 is already in use", or for any other
    error "10.0.0.9:8000 cannot be bound (cannot assign requested address)"."""
    if error.errno == errno.EADDRINUSE:
        return f"{host}:{port} is already in use"
    return f"{host}:{port} cannot be bound ({(error.strerror or str(error)).lower()})"


def listen_refusal(host: str, port: int, port_flag: str, host_flag: str | None = None) -> str | None:
    """Why a server cannot listen on ``host:port``, naming the flag to change, or None:
    ``127.0.0.1:9100 is already in use (--pull-api=9100)``, or the host's flag when the host is to
    blame (``10.0.0.9:9102 cannot be bound (...) (--health-host='10.0.0.9')``); the port's when
    the host has no flag of its own."""
    error = bind_error(host, port)
    if error is None:
        return None
    to_blame = (
        f"{host_flag}={host!r}" if host_flag and error.errno != errno.EADDRINUSE else f"{port_flag}={port}"
    )
    return f"{why_unservable(host, port, error)} ({to_blame})"
