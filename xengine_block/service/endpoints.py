"""The service's packet source: every configured UDP endpoint on one spead2 stream.

Sockets are bound (and multicast groups joined) up front, so a port in use or an unknown
interface is reported before any thread starts; spead2 then reads the already-bound sockets
(``add_udp_reader(socket)``). :meth:`ServiceSource.stop` ends the capture's data: the stream
also reads an empty in-process queue, and stopping that queue is an end of input *inside*
spead2's receive thread, which flushes the frames under construction to the capture before the
stream stops (``stream.stop()`` from outside discards them: spead2 4.5, measured). The pipeline
then drains and every sink finishes its files: this is how SIGTERM ends a run.
"""

from __future__ import annotations

import errno
import socket
import threading
from collections.abc import Sequence

import spead2
import spead2.recv

from ..capture.sockets import set_receive_buffer, sockets_drops
from .config import UdpEndpoint


class SourceError(OSError):
    """A source cannot be opened; the message is one line naming it."""


def _bind(ep: UdpEndpoint, interface: str | None, buffer_size: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        set_receive_buffer(sock, buffer_size, f"source {ep}")
        if ep.multicast:
            # Several instances (or tools) may listen to one group; bind the group address so
            # this socket sees only that group's datagrams.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((ep.address, ep.port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise SourceError(f"source {ep}: port {ep.port} is already in use") from None
            if exc.errno == errno.EADDRNOTAVAIL:
                raise SourceError(f"source {ep}: {ep.address} is not an address of this "
                                  "host") from None
            raise SourceError(f"source {ep}: cannot bind: {exc.strerror}") from None
        if ep.multicast:
            assert interface is not None  # config validation requires it
            mreq = socket.inet_aton(ep.address) + socket.inet_aton(interface)
            try:
                sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreq)
            except OSError as exc:
                raise SourceError(f"source {ep}: cannot join the group on interface "
                                  f"{interface}: {exc.strerror} (is it an address of a "
                                  "local NIC?)") from None
    except BaseException:
        sock.close()
        raise
    return sock


class ServiceSource:
    """All endpoints of one instance, read by one spead2 stream (a capture ``Source``)."""

    def __init__(self, endpoints: Sequence[UdpEndpoint], *, interface: str | None = None,
                 buffer_size: int = 64 << 20, max_size: int = 9200) -> None:
        self.endpoints, self.interface = list(endpoints), interface
        self.buffer_size, self.max_size = buffer_size, max_size
        self.sockets: list[socket.socket] = []
        self._dropped_at_close = 0
        self._lock = threading.Lock()
        self._control: spead2.InprocQueue | None = None
        self._stopped = False

    def bind(self) -> list[UdpEndpoint]:
        """Bind every endpoint now; returns them with the ports actually bound (port 0)."""
        if not self.sockets:
            try:
                for ep in self.endpoints:
                    self.sockets.append(_bind(ep, self.interface, self.buffer_size))
            except BaseException:
                self.close()
                raise
        return [UdpEndpoint(ep.address, s.getsockname()[1])
                for ep, s in zip(self.endpoints, self.sockets, strict=True)]

    def attach(self, stream: spead2.recv.ChunkRingStream) -> None:
        self.bind()
        for sock in self.sockets:
            stream.add_udp_reader(sock, max_size=self.max_size)
        control = spead2.InprocQueue()
        stream.add_inproc_reader(control)
        with self._lock:
            self._control = control
            stopped = self._stopped
        if stopped:  # stop() came while the capture was being built
            control.stop()

    def stop(self) -> None:
        """End the capture's data (frames under construction are still delivered)."""
        with self._lock:
            self._stopped = True
            control = self._control
        if control is not None:
            control.stop()

    def dropped(self) -> int:
        """Datagrams the kernel dropped on this instance's sockets so far (receive buffers
        full); kept when they close; 0 where the kernel does not say."""
        return self._dropped_at_close + sockets_drops(self.sockets)

    def close(self) -> None:
        self._dropped_at_close = self.dropped()
        for sock in self.sockets:
            sock.close()
        self.sockets = []

    def __repr__(self) -> str:
        return f"ServiceSource({', '.join(map(str, self.endpoints))})"
