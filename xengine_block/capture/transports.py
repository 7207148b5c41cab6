"""Where a capture's packets come from: UDP sockets, pcap files, in-process queues, buffers.

Each source adds its transport to a spead2 stream (``attach``); the UDP source also owns its
socket (receive buffer forced where permitted, kernel drops counted: :mod:`.sockets`).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Protocol

import spead2
import spead2.recv

from .sockets import set_receive_buffer, sockets_drops
from .spead import DEFAULT_ADDRESS, DEFAULT_PORT


class Source(Protocol):
    """Where packets come from; ``attach`` adds the transport to a spead2 stream."""

    def attach(self, stream: spead2.recv.ChunkRingStream) -> None: ...


class UdpSource:
    """UDP on an explicit bind address and port (loopback by default).

    ``port=0`` binds an ephemeral port; :attr:`port` then holds the bound one after attach.
    ``buffer_size`` is the socket receive buffer: it carries the packets that arrive while the
    receiving thread is off the CPU (on a machine whose cores the X-engine also uses, for a
    few milliseconds at a time); see :func:`.sockets.set_receive_buffer` (the size obtained
    is kept in :attr:`buffer_obtained`). :meth:`dropped` counts what overflowed it.
    """

    def __init__(self, address: str = DEFAULT_ADDRESS, port: int = DEFAULT_PORT, *,
                 buffer_size: int = 64 << 20, max_size: int = 9200) -> None:
        self.address, self.port = address, port
        self.buffer_size, self.max_size = buffer_size, max_size
        self.buffer_obtained = 0  # bytes the kernel granted (it reports twice the payload room)
        self._sock: socket.socket | None = None
        self._dropped_at_close = 0

    def bind(self) -> int:
        """Bind now (before senders start); returns the port."""
        if self._sock is None:
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            try:
                self.buffer_obtained = set_receive_buffer(
                    sock, self.buffer_size, f"udp://{self.address}:{self.port}")
                sock.bind((self.address, self.port))
            except BaseException:
                sock.close()
                raise
            self._sock = sock
            self.port = sock.getsockname()[1]
        return self.port

    def attach(self, stream: spead2.recv.ChunkRingStream) -> None:
        self.bind()
        stream.add_udp_reader(self._sock, max_size=self.max_size)

    def dropped(self) -> int:
        """Datagrams the kernel dropped for this source's socket so far (its receive buffer
        was full); kept when the socket closes; 0 where the kernel does not say (not Linux)."""
        return self._dropped_at_close + sockets_drops([self._sock] if self._sock else [])

    def close(self) -> None:
        if self._sock is not None:
            self._dropped_at_close = self.dropped()
            self._sock.close()
            self._sock = None

    def __repr__(self) -> str:
        return f"UdpSource({self.address!r}, {self.port})"


@dataclass(frozen=True)
class PcapSource:
    """A pcap file of UDP datagrams (recorded traffic, or ``spead.pcap_sender``'s output)."""

    path: str
    filter: str = ""

    def attach(self, stream: spead2.recv.ChunkRingStream) -> None:
        stream.add_udp_pcap_file_reader(str(self.path), self.filter)


@dataclass(frozen=True)
class InprocSource:
    """A ``spead2.InprocQueue`` (same process; stopping the queue ends the capture)."""

    queue: spead2.InprocQueue

    def attach(self, stream: spead2.recv.ChunkRingStream) -> None:
        stream.add_inproc_reader(self.queue)


@dataclass(frozen=True)
class BufferSource:
    """SPEAD packets back to back in memory (``b"".join`` of datagrams), read by spead2's
    buffer reader: one pass over the buffer, no wakeup per packet (spead2's in-process queue
    costs an eventfd and an epoll round per packet). The capture ends at the buffer's end. For
    benchmarks: the cheapest honest source, so what is measured is the capture itself."""

    data: bytes

    def attach(self, stream: spead2.recv.ChunkRingStream) -> None:
        stream.add_buffer_reader(self.data)


def parse_source(text: str) -> Source:
    """``udp://ADDRESS:PORT``, ``udp://:PORT`` (loopback) or ``pcap:PATH`` / ``PATH.pcap``."""
    if text.startswith("udp://"):
        host, _, port = text[len("udp://"):].rpartition(":")
        if not port.isdigit():
            raise ValueError(f"source {text!r}: expected udp://ADDRESS:PORT")
        return UdpSource(host or DEFAULT_ADDRESS, int(port))
    if text.startswith("pcap:"):
        return PcapSource(text[len("pcap:"):])
    if text.endswith((".pcap", ".pcapng")):
        return PcapSource(text)
    raise ValueError(f"source {text!r}: expected udp://ADDRESS:PORT or pcap:PATH")
