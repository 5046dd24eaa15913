"""The listening TCP sockets of this network namespace, by inode: what ``child_port`` asks every 50 ms.

Why not ``/proc/PID/net/tcp``. The kernel builds that table by walking every bucket of its
established-connection hash, however few sockets there are: 4.1-4.4 ms of system CPU per read here
(four sockets in it), two tables (IPv4, IPv6) a poll, twenty polls a second for as long as a child
imports, ~1.1-1.6 CPU-s of the test process per ``serve`` start on a loaded host. Asked through a
``NETLINK_SOCK_DIAG`` socket for listening sockets alone, the kernel walks only its listening hash:
~0.07 ms for both families. Where the kernel has no such socket (no ``inet_diag``), the tables are
read as before (``table_listeners``), so the answer is the same either way, only dearer.
"""

from __future__ import annotations

import socket
import struct
from pathlib import Path

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20  # the request's message type
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
TCP_LISTEN = 10  # a socket's state (include/net/tcp_states.h); 0A in /proc/net/tcp
HEADER = struct.Struct("=IHHII")  # nlmsghdr: length, type, flags, sequence, port id
# inet_diag_req_v2: family, protocol, extensions, pad, states (a bit per state), then a zeroed sockid
REQUEST = struct.Struct("=BBBBI48x")
# inet_diag_msg: family, state, timer, retransmits, then the sockid (source port first, big-endian,
# 48 bytes in all), expires, read and write queues, uid, inode
MESSAGE = struct.Struct("=BBBB2s46xIIIII")


def listeners() -> dict[int, int]:
    """Each listening TCP socket's inode and port (IPv4 and IPv6) in this process's network namespace,
    which the children the tests start share; the ``/proc`` tables where sock_diag is not there."""
    found: dict[int, int] = {}
    try:
        for family in (socket.AF_INET, socket.AF_INET6):
            found.update(diag_listeners(family))
    except OSError:  # no NETLINK_SOCK_DIAG, or no inet_diag for TCP in this kernel
        return table_listeners(Path("/proc/self/net"))
    return found


def diag_listeners(family: int) -> dict[int, int]:
    """The listening TCP sockets of ``family``, inode to port, as the kernel's sock_diag dumps them."""
    request = REQUEST.pack(family, socket.IPPROTO_TCP, 0, 0, 1 << TCP_LISTEN)
    header = HEADER.pack(HEADER.size + REQUEST.size, SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP, 1, 0)
    found: dict[int, int] = {}
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG) as diag:
        diag.sendall(header + request)
        while True:
            data, offset = diag.recv(1 << 16), 0
            while offset < len(data):
                length, kind = HEADER.unpack_from(data, offset)[:2]
                if kind == NLMSG_DONE:
                    return found
                if kind == NLMSG_ERROR:  # its payload starts with the negated errno
                    code = -struct.unpack_from("=i", data, offset + HEADER.size)[0]
                    raise OSError(code, f"sock_diag refused the dump (errno {code})")
                _, state, _, _, port, *_, inode = MESSAGE.unpack_from(data, offset + HEADER.size)
                if state == TCP_LISTEN:
                    found[inode] = int.from_bytes(port, "big")
                offset += (length + 3) & ~3  # messages are aligned to 4 bytes


def table_listeners(net: Path) -> dict[int, int]:
    """The listening TCP sockets in the ``tcp`` and ``tcp6`` tables under ``net`` (``/proc/PID/net``),
    inode to port: sock_diag's answer, read from text (and dearer, above)."""
    found: dict[int, int] = {}
    for table in ("tcp", "tcp6"):
        try:
            lines = (net / table).read_text().splitlines()[1:]
        except OSError:  # gone, or no IPv6
            continue
        for line in lines:
            fields = line.split()  # sl, local address, remote address, state, ..., inode (the tenth)
            if int(fields[3], 16) == TCP_LISTEN:
                found[int(fields[9])] = int(fields[1].rsplit(":", 1)[1], 16)
    return found
