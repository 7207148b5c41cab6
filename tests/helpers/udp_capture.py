"""A capture fed over UDP loopback, datagram by datagram, and its counters: shared by the
capture's tests of hostile and faulty senders (ours and MeerKAT's formats)."""

from __future__ import annotations

import array
import fcntl
import termios
import threading
import time

from xengine_block.capture.placement import COUNTERS
from xengine_block.capture.receive import Capture, CapturedFrame
from xengine_block.capture.spead import UdpDatagramSink
from xengine_block.capture.transports import UdpSource
from xengine_block.geometry import Geometry

#: 16 streams x 1 channel group: 16 heaps a frame, quorum 9; P = 2 (starts align to 2).
G = Geometry(nstream=16, nchan=9, npacket=2)


def zero_counters(**nonzero: int) -> dict[str, int]:
    out = dict.fromkeys(COUNTERS, 0)
    out.update(nonzero)
    return out


def capture_udp(datagrams: list[bytes], decodable: int, wire=G,
                **kw) -> tuple[list[CapturedFrame], dict[str, int], Capture]:
    """Send ``datagrams`` to a fresh capture of ``wire`` (our geometry G, or a MeerKAT format)
    on loopback (a consumer thread iterating it); stop it once spead2 has decoded ``decodable``
    packets (or after 20 s, which then fails the exact ``packets`` count), or when it ends by
    itself (an honoured stop heap)."""
    source = UdpSource("127.0.0.1", 0, buffer_size=4 << 20)
    source.bind()
    cap = Capture(source, wire, copy=True, **kw)
    out: list[CapturedFrame] = []
    consumer = threading.Thread(target=lambda: out.extend(cap))
    consumer.start()
    sink = UdpDatagramSink(port=source.port)
    pending = array.array("i", [0])
    for i in range(0, len(datagrams), 8):  # <= 72 kB at a time: fits any receive buffer
        for d in datagrams[i:i + 8]:
            sink.send(d)
        deadline = time.monotonic() + 5.0  # until spead2 has read them (or the capture ended)
        while consumer.is_alive() and time.monotonic() < deadline:
            try:
                fcntl.ioctl(source._sock.fileno(), termios.FIONREAD, pending)
            except (ValueError, OSError):  # the capture ended (an honoured stop heap) and
                break  # closed its socket while the consumer was still finishing
            if pending[0] == 0:
                break
            time.sleep(0.0005)
    sink.close()
    deadline = time.monotonic() + 20.0
    while (consumer.is_alive() and cap.stream.stats["packets"] < decodable
           and time.monotonic() < deadline):
        time.sleep(0.005)
    cap.stop()
    consumer.join(10.0)
    assert not consumer.is_alive()
    return out, cap.counters(), cap
