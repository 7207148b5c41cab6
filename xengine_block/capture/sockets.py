"""Receive-side UDP socket facts shared by every capture source (``UdpSource``, the service's
``ServiceSource``): the receive buffer actually obtained, and the datagrams the kernel dropped.

A datagram that arrives while the socket's buffer is full is dropped by the kernel before
spead2 can read it; the capture then only sees a heap ``missing``. The kernel counts those
drops per socket (``/proc/net/udp``, last column), which tells a receiver that fell behind
(this host: more buffer, more cores) from loss on the network.
"""

from __future__ import annotations

import logging
import os
import socket

log = logging.getLogger(__name__)

#: Linux: set the receive buffer past net.core.rmem_max (needs CAP_NET_ADMIN).
_SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)

#: Where Linux lists its UDP sockets (one per address family), with each socket's drops.
PROC_UDP = ("/proc/net/udp", "/proc/net/udp6")


def set_receive_buffer(sock: socket.socket, size: int, what: str) -> int:
    """Ask for a ``size``-byte receive buffer; return what the kernel granted.

    ``SO_RCVBUFFORCE`` first (exceeds net.core.rmem_max where the process has CAP_NET_ADMIN),
    else ``SO_RCVBUF``, which the kernel caps at rmem_max; a shortfall is logged as a warning
    naming ``what`` (e.g. the endpoint), since packets arriving while the receiver is off the
    CPU are then lost. Linux reports twice the payload room it grants.
    """
    try:
        sock.setsockopt(socket.SOL_SOCKET, _SO_RCVBUFFORCE, size)
    except OSError:  # not permitted: the kernel's rmem_max applies
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, size)
    granted = sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
    if granted < size:
        log.warning("%s: UDP receive buffer %d bytes, %d asked (raise net.core.rmem_max): "
                    "packets may be lost while the receiver is off the CPU", what, granted,
                    size)
    return granted


def socket_drops(sock: socket.socket, proc_files: tuple[str, ...] = PROC_UDP) -> int | None:
    """Datagrams the kernel dropped for ``sock`` since it was made (its receive buffer was
    full), from the socket's line in ``/proc/net/udp`` (found by inode); None where there is
    no such table (not Linux) or the socket is not listed (closed)."""
    try:
        inode = str(os.fstat(sock.fileno()).st_ino)
    except (OSError, ValueError):  # closed
        return None
    for path in proc_files:
        try:
            with open(path) as f:
                next(f, None)  # header
                for line in f:
                    fields = line.split()
                    # sl local rem st tx:rx tr:when retrnsmt uid timeout inode ref ptr drops
                    if len(fields) >= 13 and fields[9] == inode:
                        return int(fields[12])
        except OSError:
            continue
    return None


def sockets_drops(socks: list[socket.socket]) -> int:
    """:func:`socket_drops` summed over ``socks``, those the kernel says nothing of as 0."""
    return sum(n for n in map(socket_drops, socks) if n is not None)
