"""F-engine -> X-engine SPEAD heaps and their senders (docs/design.md, "SPEAD items").

One heap = one packet = one stream x one channel group x one packet time:

===========  ======  ==========================================================
item         id      value
===========  ======  ==========================================================
timestamp    0x1600  spectrum index of the first spectrum (multiple of 480)
stream_id    0x4101  stream s in [0, S)
frequency    0x4103  first channel of the packet (absolute channel number)
payload      0x4300  ``[chan][coarse][reim][fine]`` int8, ``payload_bytes`` bytes
===========  ======  ==========================================================

A ci4 geometry (``sample_bits=4``) sends ``[chan][coarse][fine]`` bytes, each one complex sample
as two two's-complement nibbles (real part high by default): 4320 bytes for the published packet.

The three immediates are 48-bit (flavour SPEAD-64-48) and every packet repeats them
(``repeat_pointers``), so a receiver can place a heap from any of its packets. Packets carry a
whole heap (``max_packet_size`` = payload + :data:`PACKET_OVERHEAD`; 8640 + 128 bytes fits a
9000-byte jumbo frame).

Transports: :func:`udp_sender` (spead2 C++ UDP stream, optional rate limit), :func:`inproc_sender`
(``spead2.InprocQueue``) and :func:`pcap_sender` (spead2 has no pcap writer: spead2's
``PacketGenerator`` makes the datagrams and :class:`PcapWriter` frames them as
Ethernet/IPv4/UDP with dpkt, which ``add_udp_pcap_file_reader`` reads back). For hostile-traffic
tests, :func:`frame_datagrams` / :func:`heap_datagrams` give the raw datagrams and
:class:`UdpDatagramSink`, :class:`InprocDatagramSink` and :class:`PcapWriter` write any bytes.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import spead2
import spead2.send

from ..geometry import Geometry
from .pcap import PCAP_FILE_HEADER, PCAP_RECORD_HEADER, PCAP_SNAPLEN

#: SPEAD-64-48: 48-bit immediates and heap addresses (MeerKAT's F-engine flavour).
FLAVOUR = spead2.Flavour(4, 64, 48, 0)
#: Default UDP port (the SPEAD convention used by MeerKAT/katgpucbf).
DEFAULT_PORT = 7148
#: Default bind / destination address: loopback only, unless told otherwise.
DEFAULT_ADDRESS = "127.0.0.1"
#: Bytes allowed per packet beyond the payload: 8-byte header + 8 item pointers, rounded up.
PACKET_OVERHEAD = 128
_IMMEDIATE = [("u", FLAVOUR.heap_address_bits)]


@dataclass(frozen=True)
class ItemSpec:
    """One SPEAD item of the F -> X heap, declared once."""

    id: int
    name: str
    description: str


TIMESTAMP = ItemSpec(0x1600, "timestamp",
                     "F-engine spectrum index of the first spectrum in the heap")
STREAM_ID = ItemSpec(0x4101, "stream_id", "stream s = 2 * antenna + pol (0 = X, 1 = Y)")
FREQUENCY = ItemSpec(0x4103, "frequency", "first channel of the heap (absolute channel number)")
PAYLOAD = ItemSpec(0x4300, "payload",
                   "complex int8 voltages [chan][coarse][reim][fine]: 8 real then 8 imag parts")
#: The payload's description for ci4 geometries (the nibble order is the geometry's).
PAYLOAD_CI4 = ("complex int4 voltages [chan][coarse][fine]: one byte per sample, two's-complement "
               "nibbles, real part in the {} nibble")
#: The items in heap order.
ITEMS = (TIMESTAMP, STREAM_ID, FREQUENCY, PAYLOAD)


def max_packet_size(g: Geometry) -> int:
    """Largest datagram we send: one whole heap per packet."""
    return g.payload_bytes + PACKET_OVERHEAD


def item_group(g: Geometry) -> spead2.send.ItemGroup:
    """Item descriptors (sent once at stream start, for tools such as spead2_recv)."""
    ig = spead2.send.ItemGroup(flavour=FLAVOUR)
    for spec in ITEMS[:3]:
        ig.add_item(spec.id, spec.name, spec.description, shape=(), format=_IMMEDIATE)
    if g.ci4:
        order = "high" if g.nibble_order == "re_high" else "low"
        ig.add_item(PAYLOAD.id, PAYLOAD.name, PAYLOAD_CI4.format(order),
                    shape=g.packet_shape, dtype=np.uint8)
    else:
        ig.add_item(PAYLOAD.id, PAYLOAD.name, PAYLOAD.description,
                    shape=g.packet_shape, dtype=np.int8)
    return ig


def _immediate(spec: ItemSpec, value: int | np.ndarray) -> spead2.Item:
    """An immediate item; a 0-d ``>u8`` array is referenced, so updating it updates the heap."""
    return spead2.Item(spec.id, spec.name, "", (), format=_IMMEDIATE, value=value)


def make_heap(timestamp: int | np.ndarray, stream: int, frequency: int,
              payload: np.ndarray) -> spead2.send.Heap:
    """One F -> X heap. ``payload`` (any int8 array, any size) is referenced, not copied."""
    heap = spead2.send.Heap(FLAVOUR)
    heap.repeat_pointers = True
    heap.add_item(_immediate(TIMESTAMP, timestamp))
    heap.add_item(_immediate(STREAM_ID, stream))
    heap.add_item(_immediate(FREQUENCY, frequency))
    payload = np.ascontiguousarray(payload).reshape(-1).view(np.int8)
    heap.add_item(spead2.Item(PAYLOAD.id, PAYLOAD.name, "", payload.shape, dtype=np.int8,
                              value=payload))
    return heap


def heap_datagrams(heap: spead2.send.Heap, cnt: int, packet_size: int) -> list[bytes]:
    """The UDP payloads (SPEAD packets) spead2 sends for ``heap`` with heap counter ``cnt``."""
    return [bytes(p) for p in spead2.send.PacketGenerator(heap, cnt, packet_size)]


def frame_heaps(frame: np.ndarray, g: Geometry, timestamp: int | np.ndarray,
                chan0: int = 0) -> list[tuple[int, int, spead2.send.Heap]]:
    """``(stream, group, heap)`` for every heap of one frame, stream-major (zero copy)."""
    flat = np.ascontiguousarray(frame).reshape(g.nstream, g.nchan_group, g.payload_bytes)
    return [(s, grp, make_heap(timestamp, s, chan0 + grp * g.nchan_pkt, flat[s, grp]))
            for s in range(g.nstream) for grp in range(g.nchan_group)]


def frame_datagrams(frames: np.ndarray, g: Geometry, time_tag: int, *, chan0: int = 0,
                    cnt0: int = 1) -> list[tuple[int, int, int, bytes]]:
    """Datagrams of consecutive frames from spectrum ``time_tag``.

    Returns ``(frame, stream, group, datagram)`` per heap (one packet per heap), heap counters
    ``cnt0, cnt0 + 1, ...``: material for pcap files and for hostile-traffic tests.
    """
    frames = frames.reshape((-1, *g.frame_shape))
    out = []
    cnt = cnt0
    for f in range(len(frames)):
        ts = time_tag + f * g.nspectra_pkt
        for s, grp, heap in frame_heaps(frames[f], g, ts, chan0):
            (pkt,) = heap_datagrams(heap, cnt, max_packet_size(g))
            out.append((f, s, grp, pkt))
            cnt += 1
    return out


def repeated_frame_datagrams(frame: np.ndarray, g: Geometry, nframe: int, time_tag: int = 0,
                             *, chan0: int = 0, cnt0: int = 1) -> np.ndarray:
    """The datagrams of ``nframe`` consecutive frames that all carry ``frame``'s samples, as
    one uint8 array ``[nframe * heaps, packet bytes]`` (back to back: a
    :class:`~xengine_block.capture.transports.BufferSource` reads its ``tobytes()``). Built from
    one frame's datagrams (:func:`frame_datagrams`) with each later frame's heap counters and
    timestamps added to their words, so benchmarks get many frames of packets at memcpy speed
    (the 48-bit immediates are the low bits of big-endian 64-bit item words)."""
    two = frame_datagrams(np.stack([frame.reshape(g.frame_shape)] * 2), g, time_tag,
                          chan0=chan0, cnt0=cnt0)
    nheap = g.npackets_per_frame
    pkts = np.frombuffer(b"".join(d for *_, d in two), np.uint8).reshape(2 * nheap, -1)
    if pkts.shape[1] % 8:
        raise ValueError(f"packets of {pkts.shape[1]} bytes are not whole 64-bit words")
    words = pkts.view(">u8")
    step = (words[nheap:] - words[:nheap])[0]  # per frame: heap counter and timestamp words
    if np.any((words[nheap:] - words[:nheap]) != step):
        raise ValueError("the frames' datagrams differ in more than counters and timestamps")
    out = np.empty((nframe, nheap, words.shape[1]), ">u8")
    out[...] = words[:nheap]
    out += np.arange(nframe, dtype=np.uint64)[:, None, None] * step
    return out.reshape(nframe * nheap, -1).view(np.uint8)


def descriptor_datagrams(g: Geometry, cnt: int = 0) -> list[bytes]:
    """The descriptor heap's datagrams."""
    return heap_datagrams(item_group(g).get_heap(descriptors="all", data="none"), cnt,
                          max_packet_size(g))


def stop_datagrams(g: Geometry, cnt: int) -> list[bytes]:
    """The end-of-stream heap's datagrams (counted by the capture; it ends only a capture
    that honours stop heaps, ``stop_on_end_heap=True``)."""
    return heap_datagrams(item_group(g).get_end(), cnt, max_packet_size(g))


def raw_packet(items: Iterable[tuple[int, int, bool]], payload: bytes = b"") -> bytes:
    """A SPEAD-64-48 packet written byte by byte: the 8-byte header, one pointer per
    ``(id, value, immediate)`` (non-immediate: value = address), then ``payload``.

    For hostile tests: it makes what spead2's sender refuses to (no heap-size item, payload
    past the heap size, extra or misplaced payload pointers, zero-length heaps).
    """
    items = list(items)
    bits = FLAVOUR.heap_address_bits
    words = [(int(imm) << 63) | (item_id << bits) | value for item_id, value, imm in items]
    return struct.pack(f">HBBxxH{len(words)}Q", 0x5304, (64 - bits) // 8, bits // 8,
                       len(words), *words) + payload


def junk_datagram(rng: np.random.Generator, size: int) -> bytes:
    """Random bytes that are not a SPEAD packet (first byte is not the 0x53 magic)."""
    data = bytearray(rng.integers(0, 256, size, dtype=np.uint8).tobytes())
    if data and data[0] == 0x53:
        data[0] = 0
    return bytes(data)


def truncated(datagram: bytes, rng: np.random.Generator) -> bytes:
    """``datagram`` cut at a random length (1 .. len - 1): no longer a decodable packet."""
    return datagram[:int(rng.integers(1, len(datagram)))]


# ---------------------------------------------------------------------------- datagram sinks
class DatagramSink(Protocol):
    """Anything that takes raw datagrams: UDP socket, pcap file, in-process queue."""

    def send(self, datagram: bytes) -> None: ...

    def close(self) -> None: ...


class UdpDatagramSink:
    """Raw UDP datagrams to ``(address, port)`` (loopback by default); any bytes at all."""

    def __init__(self, address: str = DEFAULT_ADDRESS, port: int = DEFAULT_PORT) -> None:
        self.dest = (address, port)
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)

    def send(self, datagram: bytes) -> None:
        self._sock.sendto(datagram, self.dest)

    def close(self) -> None:
        self._sock.close()


class InprocDatagramSink:
    """Raw datagrams into a ``spead2.InprocQueue`` (one packet each); ``close`` stops it."""

    def __init__(self, queue: spead2.InprocQueue) -> None:
        self.queue = queue

    def send(self, datagram: bytes) -> None:
        self.queue.add_packet(datagram)

    def close(self) -> None:
        self.queue.stop()


class PcapWriter:
    """Datagrams framed as Ethernet / IPv4 / UDP (dpkt) in a pcap file (microsecond
    timestamps, little-endian), for replay with ``spead2.recv`` ``add_udp_pcap_file_reader``
    or inspection with tcpdump/wireshark.

    ``src`` and ``dst`` are the (address, port) pairs written in the IP/UDP headers. Records
    are stamped 1 us apart from ``start_time`` (default: now), counted in whole microseconds:
    dpkt's own writer rounds a float's fraction, which gives a microsecond field of 1000000
    (not a valid record header) at about every second boundary the stamps cross.
    """

    def __init__(self, path: str | os.PathLike, *, src: tuple[str, int] = ("10.0.0.1", 7148),
                 dst: tuple[str, int] = (DEFAULT_ADDRESS, DEFAULT_PORT),
                 start_time: float | None = None) -> None:
        import dpkt
        self._dpkt = dpkt
        self._file = open(path, "wb")
        self._file.write(PCAP_FILE_HEADER.pack(0xA1B2C3D4, 2, 4, 0, 0, PCAP_SNAPLEN,
                                               dpkt.pcap.DLT_EN10MB))
        self._src, self._dst = src, dst
        self._src_ip, self._dst_ip = socket.inet_aton(src[0]), socket.inet_aton(dst[0])
        self._us = round((time.time() if start_time is None else start_time) * 1e6)
        self.count = 0

    def send(self, datagram: bytes) -> None:
        dpkt = self._dpkt
        udp = dpkt.udp.UDP(sport=self._src[1], dport=self._dst[1], data=datagram)
        udp.ulen = len(udp)
        ip = dpkt.ip.IP(src=self._src_ip, dst=self._dst_ip, p=dpkt.ip.IP_PROTO_UDP, ttl=64,
                        data=udp)
        ip.len = len(ip)
        eth = bytes(dpkt.ethernet.Ethernet(src=b"\x02\x00\x00\x00\x00\x01",
                                           dst=b"\x02\x00\x00\x00\x00\x02",
                                           type=dpkt.ethernet.ETH_TYPE_IP, data=ip))
        if len(eth) > PCAP_SNAPLEN:
            raise ValueError(f"a {len(eth)}-byte frame exceeds the pcap snaplen {PCAP_SNAPLEN}")
        sec, usec = divmod(self._us + self.count, 1_000_000)
        self._file.write(PCAP_RECORD_HEADER.pack(sec, usec, len(eth), len(eth)) + eth)
        self.count += 1

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> PcapWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_datagrams(sink: DatagramSink, datagrams: Iterable[bytes]) -> int:
    """Send every datagram; returns how many."""
    n = 0
    for d in datagrams:
        sink.send(d)
        n += 1
    return n


# ---------------------------------------------------------------------------- frame senders
class FrameSender:
    """Sends ring frames as heaps, descriptors first and an end-of-stream heap last.

    Heaps are built once over a staging buffer of ``batch`` frames whose timestamps live in a
    ``>u8`` array the heaps reference, so sending a frame costs one memcpy and one
    ``send_heaps`` call of ``S * nchan_group`` heaps, no Python per heap.
    Use :func:`udp_sender`, :func:`inproc_sender` or :func:`pcap_sender` to make one.
    """

    def __init__(self, g: Geometry, transport: _Transport, *, chan0: int = 0,
                 batch: int = 1) -> None:
        self.geometry, self.chan0 = g, chan0
        self._transport = transport
        self._staging = np.zeros((batch, *g.frame_shape), np.int8)
        self._timestamps = np.zeros(batch, ">u8")
        heaps = [[h for _, _, h in frame_heaps(self._staging[b], g, self._timestamps[b, ...],
                                               chan0)] for b in range(batch)]
        # Prepared once per batch length: the last batch of a call may be shorter.
        self._prepared = [transport.prepare([h for b in range(n) for h in heaps[b]])
                          for n in range(1, batch + 1)]
        self._descriptors_sent = False
        self.heaps_sent = 0

    def send_descriptors(self) -> None:
        self._send_now([item_group(self.geometry).get_heap(descriptors="all", data="none")])
        self._descriptors_sent = True

    def send_frames(self, frames: np.ndarray, time_tag: int) -> None:
        """Send frames ``[n, *g.frame_shape]`` starting at spectrum ``time_tag``."""
        g = self.geometry
        if time_tag % g.nspectra_pkt:
            raise ValueError(f"time_tag {time_tag} is not a multiple of {g.nspectra_pkt}")
        if not self._descriptors_sent:
            self.send_descriptors()
        frames = frames.reshape((-1, *g.frame_shape))
        batch = len(self._staging)
        for i in range(0, len(frames), batch):
            n = min(batch, len(frames) - i)
            self._staging[:n] = frames[i:i + n]
            self._timestamps[:n] = time_tag + (i + np.arange(n)) * g.nspectra_pkt
            self._transport.send(self._prepared[n - 1])
            self.heaps_sent += n * g.npackets_per_frame

    def send_staged(self, nframe: int, time_tag: int) -> None:
        """Resend the staging buffer's frames with new timestamps (benchmarks: no copy)."""
        g = self.geometry
        for i in range(0, nframe, len(self._staging)):
            n = min(len(self._staging), nframe - i)
            self._timestamps[:n] = time_tag + (i + np.arange(n)) * g.nspectra_pkt
            self._transport.send(self._prepared[n - 1])
            self.heaps_sent += n * g.npackets_per_frame

    @property
    def staging(self) -> np.ndarray:
        """The staging frames (write them, then :meth:`send_staged`)."""
        return self._staging

    def close(self) -> None:
        """Send the end-of-stream heap and release the transport."""
        self._send_now([item_group(self.geometry).get_end()])
        self._transport.close()

    def _send_now(self, heaps: list[spead2.send.Heap]) -> None:
        self._transport.send(self._transport.prepare(heaps))

    def __enter__(self) -> FrameSender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Transport(Protocol):
    def prepare(self, heaps: Sequence[spead2.send.Heap]) -> object: ...

    def send(self, prepared: object) -> None: ...

    def close(self) -> None: ...


class _StreamTransport:
    """A spead2 send stream (UDP, in-process): heaps go out in order, blocking until sent.

    ``queue``: an in-process queue to stop on close (the receiver's end of data: receivers do
    not end on an end-of-stream heap unless told to).
    """

    def __init__(self, stream: spead2.send.SyncStream,
                 queue: spead2.InprocQueue | None = None) -> None:
        self.stream, self.queue = stream, queue

    def prepare(self, heaps: Sequence[spead2.send.Heap]) -> spead2.send.HeapReferenceList:
        return spead2.send.HeapReferenceList([spead2.send.HeapReference(h) for h in heaps])

    def send(self, prepared: spead2.send.HeapReferenceList) -> None:
        self.stream.send_heaps(prepared, spead2.send.GroupMode.SERIAL)

    def close(self) -> None:
        self.stream = None
        if self.queue is not None:
            self.queue.stop()


class _DatagramTransport:
    """Heaps -> datagrams (spead2 PacketGenerator) -> a datagram sink (pcap file)."""

    def __init__(self, sink: DatagramSink, packet_size: int, cnt0: int = 1,
                 cnt_step: int = 1) -> None:
        self.sink, self.packet_size = sink, packet_size
        self.cnt, self.cnt_step = cnt0, cnt_step

    def prepare(self, heaps: Sequence[spead2.send.Heap]) -> Sequence[spead2.send.Heap]:
        return heaps

    def send(self, heaps: Sequence[spead2.send.Heap]) -> None:
        for h in heaps:
            for d in heap_datagrams(h, self.cnt, self.packet_size):
                self.sink.send(d)
            self.cnt += self.cnt_step

    def close(self) -> None:
        self.sink.close()


def _stream_config(g: Geometry, rate_gbps: float, batch: int) -> spead2.send.StreamConfig:
    return spead2.send.StreamConfig(max_packet_size=max_packet_size(g),
                                    rate=rate_gbps * 1e9 / 8,
                                    max_heaps=batch * g.npackets_per_frame + 2)


def _kernel_limit(name: str, requested: int) -> int:
    """``requested`` capped at /proc/sys/net/core/NAME (spead2 warns when it gets less)."""
    try:
        with open(f"/proc/sys/net/core/{name}") as f:
            return min(requested, int(f.read()))
    except (OSError, ValueError):
        return requested


def udp_sender(g: Geometry, *, address: str = DEFAULT_ADDRESS, port: int = DEFAULT_PORT,
               rate_gbps: float = 0.0, chan0: int = 0, batch: int = 1,
               buffer_size: int = 8 << 20, sender_index: int = 0,
               nsenders: int = 1) -> FrameSender:
    """Frames over UDP to ``address:port`` (loopback by default).

    ``rate_gbps`` (0 = as fast as possible) paces packets in spead2's C++ sender.
    ``sender_index`` / ``nsenders``: disjoint heap counters when several F-engines feed one
    receiver.
    """
    stream = spead2.send.UdpStream(spead2.ThreadPool(1), [(address, port)],
                                   _stream_config(g, rate_gbps, batch),
                                   _kernel_limit("wmem_max", buffer_size))
    stream.set_cnt_sequence(sender_index + 1, nsenders)
    return FrameSender(g, _StreamTransport(stream), chan0=chan0, batch=batch)


def inproc_sender(g: Geometry, queue: spead2.InprocQueue, *, chan0: int = 0,
                  batch: int = 1) -> FrameSender:
    """Frames into an in-process queue (``capture`` reads it with ``InprocSource``);
    ``close()`` sends the end-of-stream heap and stops the queue (the capture's end)."""
    stream = spead2.send.InprocStream(spead2.ThreadPool(1), [queue],
                                      _stream_config(g, 0.0, batch))
    return FrameSender(g, _StreamTransport(stream, queue), chan0=chan0, batch=batch)


def pcap_sender(g: Geometry, path: str | os.PathLike, *, chan0: int = 0,
                dst: tuple[str, int] = (DEFAULT_ADDRESS, DEFAULT_PORT)) -> FrameSender:
    """Frames into a pcap file (Ethernet/IPv4/UDP to ``dst``); ``close()`` finishes the file."""
    return FrameSender(g, _DatagramTransport(PcapWriter(path, dst=dst), max_packet_size(g)),
                       chan0=chan0)
