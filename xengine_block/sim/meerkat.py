"""Simulated MeerKAT F-engines: channelised voltages sent as the ICD's ``feng_raw`` heaps.

Written from the MeerKAT CBF ICD as katgpucbf implements it (``fgpu/send.py``, ``fsim/main.py``;
facts and ids in :mod:`xengine_block.capture.meerkat`), with spead2's own sender and nothing of
our capture: per heap time one heap per F-engine (antenna, both pols) of ``[chan][spectra][pol]
[re, im]`` int8, immediates timestamp (ADC samples), feng_id, frequency (first channel of the
substream), pointers repeated in every packet, 8192-byte packet payloads, heap counters
``k * n_ants + feng_id`` (katgpucbf's ``set_cnt_sequence(feng_id, n_ants)``), and the heaps of
one heap time sent round robin, packet by packet, as concurrent F-engines arrive at an X-engine.
A heap listed as missing is not sent at all (an F-engine whose input was incomplete).

Samples come in our natural order ``[stream, chan, spectrum, re/im]`` (streams ``2 * ant +
pol``), e.g. from :class:`.fengine.FEngineSimulator`.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator

import numpy as np
import spead2
import spead2.send

from ..capture.meerkat import (
    FENG_ID,
    FENG_PREAMBLE_BYTES,
    FENG_RAW,
    FREQUENCY,
    MEERKAT_FLAVOUR,
    N_POLS,
    PACKET_PAYLOAD_BYTES,
    TIMESTAMP,
)
from ..frames import frames_to_natural
from ..geometry import Geometry

_IMMEDIATE = [("u", MEERKAT_FLAVOUR.heap_address_bits)]


def feng_raw(samples: np.ndarray, spectra_per_heap: int) -> np.ndarray:
    """Natural samples ``[2A, C, H * T, 2]`` -> heaps' payloads ``[H, A, C, T, pol, re/im]``."""
    s, c, n, _ = samples.shape
    h = n // spectra_per_heap
    if s % N_POLS or n % spectra_per_heap:
        raise ValueError(f"samples {samples.shape}: need 2 pols per antenna and whole heaps of "
                         f"{spectra_per_heap} spectra")
    x = samples.reshape(s // N_POLS, N_POLS, c, h, spectra_per_heap, 2)
    return np.ascontiguousarray(x.transpose(3, 0, 2, 4, 1, 5))


def item_group(nchan: int, spectra_per_heap: int) -> spead2.send.ItemGroup:
    """The F-engine items with their descriptors (``fgpu/send.py`` ``make_item_group``)."""
    ig = spead2.send.ItemGroup(flavour=MEERKAT_FLAVOUR)
    for spec in (TIMESTAMP, FENG_ID, FREQUENCY):
        ig.add_item(spec.id, spec.name, spec.description, shape=(), format=_IMMEDIATE)
    ig.add_item(FENG_RAW.id, FENG_RAW.name, FENG_RAW.description,
                shape=(nchan, spectra_per_heap, N_POLS, 2), dtype=np.int8)
    return ig


def data_heap(timestamp: int | np.ndarray, feng_id: int, frequency: int,
              payload: np.ndarray) -> spead2.send.Heap:
    """One F-engine data heap, no descriptors, pointers in every packet. A 0-d ``>u8``
    ``timestamp`` and the ``payload`` array are referenced, so updating them updates the heap."""
    heap = spead2.send.Heap(MEERKAT_FLAVOUR)
    heap.repeat_pointers = True
    for spec, value in ((TIMESTAMP, timestamp), (FENG_ID, feng_id), (FREQUENCY, frequency)):
        heap.add_item(spead2.Item(spec.id, spec.name, "", (), format=_IMMEDIATE, value=value))
    heap.add_item(spead2.Item(FENG_RAW.id, FENG_RAW.name, "", payload.shape, dtype=np.int8,
                              value=payload))
    return heap


class MeerkatFEngines:
    """``n_ants`` F-engines sending one X-engine's channel substream over a spead2 stream.

    Parameters
    ----------
    stream : a spead2 send stream (:meth:`udp`, :meth:`inproc`); None for datagrams only.
    n_ants, nchan, spectra_per_heap, samples_between_spectra : the heaps (``nchan`` channels
        of the substream per heap).
    frequency : the ``frequency`` item, the substream's first channel.
    batch : heap times staged at once (heaps are built once over the staging buffer).
    """

    def __init__(self, stream: spead2.send.SyncStream | None, *, n_ants: int, nchan: int,
                 spectra_per_heap: int, samples_between_spectra: int, frequency: int = 0,
                 batch: int = 1, queue: spead2.InprocQueue | None = None) -> None:
        self.stream, self.queue = stream, queue
        self.n_ants, self.nchan, self.frequency = n_ants, nchan, frequency
        self.spectra_per_heap, self.samples_between_spectra = spectra_per_heap, \
            samples_between_spectra
        self.staging = np.zeros((batch, n_ants, nchan, spectra_per_heap, N_POLS, 2), np.int8)
        self._timestamps = np.zeros(batch, ">u8")
        self._heaps = [[data_heap(self._timestamps[b, ...], a, frequency, self.staging[b, a])
                        for a in range(n_ants)] for b in range(batch)]
        self._next = np.zeros(n_ants, np.int64)  # per F-engine heap sequence number
        self.heaps_sent = 0

    @property
    def timestamp_step(self) -> int:
        return self.spectra_per_heap * self.samples_between_spectra

    @property
    def heap_bytes(self) -> int:
        return self.staging[0, 0].nbytes

    # ---- transports
    @staticmethod
    def config(n_ants: int, *, rate_bytes_s: float = 0.0) -> spead2.send.StreamConfig:
        """8192-byte payloads plus the 72-byte preamble; room for one heap per F-engine."""
        return spead2.send.StreamConfig(
            max_packet_size=PACKET_PAYLOAD_BYTES + FENG_PREAMBLE_BYTES, rate=rate_bytes_s,
            max_heaps=n_ants + 2)

    @classmethod
    def udp(cls, address: str, port: int, *, rate_gbps: float = 0.0, buffer_size: int = 4 << 20,
            **kw: int) -> MeerkatFEngines:
        """Over UDP to ``address:port`` (paced at ``rate_gbps`` of packets when > 0)."""
        stream = spead2.send.UdpStream(spead2.ThreadPool(1), [(address, port)],
                                       cls.config(kw["n_ants"], rate_bytes_s=rate_gbps * 1e9 / 8),
                                       buffer_size)
        return cls(stream, **kw)

    @classmethod
    def inproc(cls, queue: spead2.InprocQueue, **kw: int) -> MeerkatFEngines:
        """Into an in-process queue; :meth:`close` stops it (the capture's end of data)."""
        stream = spead2.send.InprocStream(spead2.ThreadPool(1), [queue], cls.config(kw["n_ants"]))
        return cls(stream, queue=queue, **kw)

    # ---- sending
    def _cnt(self, feng_id: int) -> int:
        k = int(self._next[feng_id])
        self._next[feng_id] += 1
        return k * self.n_ants + feng_id

    def send_descriptors(self) -> None:
        """One descriptor heap from every F-engine (katgpucbf staggers them in time)."""
        ig = item_group(self.nchan, self.spectra_per_heap)
        refs = [spead2.send.HeapReference(ig.get_heap(descriptors="all", data="none"),
                                          cnt=self._cnt(a)) for a in range(self.n_ants)]
        self.stream.send_heaps(refs, spead2.send.GroupMode.SERIAL)

    def send(self, samples: np.ndarray, first_spectrum: int,
             missing: Collection[tuple[int, int]] = ()) -> None:
        """Send natural ``samples`` ``[2A, C, n, 2]`` from spectrum ``first_spectrum`` (whole
        heaps); ``missing``: (heap number, feng_id) pairs not sent, heap number counted from
        spectrum 0 (``spectrum // spectra_per_heap``)."""
        self._send(feng_raw(samples, self.spectra_per_heap), first_spectrum, missing)

    def send_staged(self, nheap_times: int, first_spectrum: int) -> None:
        """Resend the staging buffer with new timestamps (benchmarks: no copy)."""
        self._send(None, first_spectrum, (), nheap_times)

    def _send(self, payload: np.ndarray | None, first_spectrum: int,
              missing: Collection[tuple[int, int]], n: int | None = None) -> None:
        if first_spectrum % self.spectra_per_heap:
            raise ValueError(f"first spectrum {first_spectrum} is not a multiple of "
                             f"{self.spectra_per_heap}")
        h0 = first_spectrum // self.spectra_per_heap
        n = len(payload) if payload is not None else n
        batch = len(self.staging)
        for i in range(0, n, batch):
            m = min(batch, n - i)
            if payload is not None:
                self.staging[:m] = payload[i:i + m]
            self._timestamps[:m] = (h0 + i + np.arange(m)) * self.timestamp_step
            for b in range(m):  # one heap time: every F-engine's heap, packets interleaved
                refs = [spead2.send.HeapReference(self._heaps[b][a], cnt=self._cnt(a))
                        for a in range(self.n_ants) if (h0 + i + b, a) not in missing]
                if refs:
                    self.stream.send_heaps(refs, spead2.send.GroupMode.ROUND_ROBIN)
                    self.heaps_sent += len(refs)

    def close(self) -> None:
        """A stop heap from every F-engine (katgpucbf sends one at shutdown), then release
        the stream (and stop an in-process queue)."""
        if self.stream is not None:
            refs = []
            for a in range(self.n_ants):
                heap = spead2.send.Heap(MEERKAT_FLAVOUR)
                heap.add_end()
                refs.append(spead2.send.HeapReference(heap, cnt=self._cnt(a)))
            self.stream.send_heaps(refs, spead2.send.GroupMode.SERIAL)
            self.stream = None
        if self.queue is not None:
            self.queue.stop()

    # ---- raw datagrams (hostile tests, pcap files)
    def datagrams(self, samples: np.ndarray, first_spectrum: int, *,
                  payload: int = PACKET_PAYLOAD_BYTES) -> Iterator[tuple[int, int, list[bytes]]]:
        """``(heap number, feng_id, packets)`` of every heap of ``samples``, as the spead2
        sender would packetise them (:class:`spead2.send.PacketGenerator`)."""
        h0 = first_spectrum // self.spectra_per_heap
        for i, heaps in enumerate(feng_raw(samples, self.spectra_per_heap)):
            ts = (h0 + i) * self.timestamp_step
            for a in range(self.n_ants):
                heap = data_heap(ts, a, self.frequency, heaps[a])
                yield h0 + i, a, heap_packets(heap, self._cnt(a), payload)


def heap_packets(heap: spead2.send.Heap, cnt: int,
                 payload: int = PACKET_PAYLOAD_BYTES) -> list[bytes]:
    """The SPEAD packets of ``heap`` with counter ``cnt`` (``payload`` bytes per packet)."""
    return [bytes(p) for p in spead2.send.PacketGenerator(heap, cnt,
                                                           payload + FENG_PREAMBLE_BYTES)]


def interleave(heaps: list[list[bytes]]) -> list[bytes]:
    """Packets of several heaps round robin (concurrent senders), as spead2's ROUND_ROBIN."""
    out = []
    for i in range(max((len(h) for h in heaps), default=0)):
        out += [h[i] for h in heaps if i < len(h)]
    return out


class FramesToHeaps:
    """The frame senders' interface (``send_frames``, ``close``) over MeerKAT F-engines, so a
    driver written for our packets (``pipelines/fx.py``) sends MeerKAT heaps: packet frames
    of a simulator geometry (spectrum ``time_tag`` on, 480 spectra each) become heaps as whole
    heaps accumulate; spectra from ``nspectra`` on are not sent (a last partial heap, or one
    past the dumps asked for)."""

    def __init__(self, engines: MeerkatFEngines, geometry: Geometry, nspectra: int) -> None:
        self.engines, self.geometry, self.nspectra = engines, geometry, nspectra
        self._pending = np.zeros((geometry.nstream, geometry.nchan, 0, 2), np.int8)
        self._start = 0  # spectrum of the first pending sample

    def send_frames(self, frames: np.ndarray, time_tag: int) -> None:
        x = frames_to_natural(frames, self.geometry)
        if self._pending.shape[2] == 0:
            self._start = time_tag
        self._pending = np.concatenate([self._pending, x], axis=2)
        spb = self.engines.spectra_per_heap
        n = min(self._pending.shape[2], max(0, self.nspectra - self._start)) // spb * spb
        if n:
            self.engines.send(self._pending[:, :, :n], self._start)
            self._pending, self._start = self._pending[:, :, n:], self._start + n

    def close(self) -> None:
        self.engines.close()
