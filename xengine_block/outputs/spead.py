"""MeerKAT baseline-correlation-products heaps out: each dump as one ``xeng_raw`` heap.

The format is katgpucbf's X-engine output (github ska-sa/katgpucbf, commit 1e38bdc:
``xbgpu/xsend.py`` items and packets, ``xbgpu/correlation.py`` ordering and ``MISSING``,
``xbgpu/engine.py`` missing data and timestamps, ``xbgpu/send.py`` heap counters):

- items ``timestamp`` (ADC samples of the dump's first spectrum, a multiple of the dump's
  length), ``frequency`` (first channel of this X-engine), ``xeng_raw`` int32 little endian
  ``[channels][baselines * 4][re, im]``; pointers in every packet, 8192 payload bytes plus a
  64-byte preamble per packet; descriptors at start and every 5 s; a stop heap at the end;
  heap counters ``set_cnt_sequence(chan0 // nchan, total_channels // nchan)``.
- baseline order (katgpucbf's ``bls_ordering``): for antennas ``a1 <= a2`` and pols ``p1, p2``,
  index ``(a2 * (a2 + 1) / 2 + a1) * 4 + p1 + 2 * p2``, value ``sum x[a1,p1] conj(x[a2,p2])``
  (re = r1 r2 + i1 i2, im = r2 i1 - r1 i2), int32 saturated to +-(2^31 - 1).
- every baseline that involves an antenna which lost any data in the dump holds ``(-2^31, 1)``
  in all four products; a dump in which every antenna lost data is not sent (katgpucbf's
  ``output_x_skipped_accs``).

Our X-engine's triangle (docs/design.md, "Sign and conjugation") holds ``K[j, k] = sum x_j
conj(x_k)`` for streams ``j <= k`` (``s = 2 * antenna + pol``), so MeerKAT's product ``x[a1,p1]
conj(x[a2,p2])`` is ``K[s1, s2]`` with ``s1 = 2 a1 + p1``, ``s2 = 2 a2 + p2`` where ``s1 <= s2``,
and its conjugate ``conj(K[s2, s1])`` in the one case ``s1 > s2`` (``a1 == a2``, ``p1 = 1``, ``p2 =
0``: the "ba" product of an autocorrelation). UVH5's ``conj(x[ant_1]) x[ant_2]`` is the conjugate of
MeerKAT's for the same pair: :func:`meerkat_order` is the one place that mapping is made.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import spead2
import spead2.send

from ..capture.meerkat import (
    DESCRIPTOR_INTERVAL_S,
    FREQUENCY,
    MEERKAT_FLAVOUR,
    N_POLS,
    PACKET_PAYLOAD_BYTES,
    TIMESTAMP,
    XENG_PREAMBLE_BYTES,
    XENG_RAW,
)
from ..triangle import baseline_index

log = logging.getLogger(__name__)

#: katgpucbf's marker of a baseline with missing input (``xbgpu/correlation.py`` MISSING).
MISSING = (-(1 << 31), 1)
#: Saturation bound of the int32 sums (``-2^31`` is the marker's alone).
SATURATION = (1 << 31) - 1
#: Pol pairs within an antenna pair, in katgpucbf's order: aa, ba, ab, bb.
POL_PAIRS = ((0, 0), (1, 0), (0, 1), (1, 1))
_IMMEDIATE = [("u", MEERKAT_FLAVOUR.heap_address_bits)]
#: The payload's byte order: katgpucbf sends native int32 from little-endian hosts.
XENG_DTYPE = np.dtype("<i4")


def n_products(nant: int) -> int:
    """``xeng_raw``'s baseline axis: 4 pol products per antenna pair (autos included)."""
    return 2 * nant * (nant + 1)


@lru_cache(maxsize=16)
def meerkat_order(nant: int) -> tuple[np.ndarray, np.ndarray]:
    """For every MeerKAT product index: (our triangle's baseline index, conjugate?).

    MeerKAT product ``(a2 (a2 + 1) / 2 + a1) * 4 + p1 + 2 p2`` is ``K[s1, s2]`` of our
    triangle where ``s1 <= s2``, else ``conj(K[s2, s1])`` (module docstring)."""
    index = np.empty(n_products(nant), np.intp)
    conj = np.zeros(n_products(nant), bool)
    for a2 in range(nant):
        for a1 in range(a2 + 1):
            pair = a2 * (a2 + 1) // 2 + a1
            for p1, p2 in POL_PAIRS:
                i = pair * 4 + p1 + 2 * p2
                s1, s2 = N_POLS * a1 + p1, N_POLS * a2 + p2
                index[i] = baseline_index(min(s1, s2), max(s1, s2))
                conj[i] = s1 > s2
    index.flags.writeable = conj.flags.writeable = False
    return index, conj


def input_labels(antenna_names: list[str], pol_names: tuple[str, str] = ("x", "y")
                 ) -> list[list[str]]:
    """Per antenna its two inputs' labels (katsdpcontroller's ``input_labels`` pairs)."""
    return [[f"{name}{p}" for p in pol_names] for name in antenna_names]


def bls_ordering(labels: list[list[str]]) -> list[tuple[str, str]]:
    """katgpucbf's ``bls-ordering``: ``(label[a1][p1], label[a2][p2])`` per product index."""
    out = []
    for a2 in range(len(labels)):
        for a1 in range(a2 + 1):
            out += [(labels[a1][p1], labels[a2][p2]) for p1, p2 in POL_PAIRS]
    return out


def antennas_present(valid: np.ndarray, nspectra: int, nant: int) -> np.ndarray:
    """bool ``[nant]``: antennas none of whose spectra in the dump were lost, from the valid
    spectra of each stream's autocorrelation (``valid``: ``[G, nbaseline]`` of the dump)."""
    s = np.arange(N_POLS * nant)
    auto = np.asarray(valid)[..., baseline_index(s, s)].reshape(-1, nant, N_POLS)
    return (auto >= nspectra).all(axis=(0, 2))


@dataclass
class EncodeResult:
    data: np.ndarray  # int32 LE [C, n_products, 2]
    clipped: int  # values saturated
    missing_ants: int  # antennas that lost data


def encode(vis: np.ndarray, present: np.ndarray, out: np.ndarray | None = None) -> EncodeResult:
    """Our dump (``[C, nbaseline, 2]`` int64 triangle) -> ``xeng_raw`` (MeerKAT order and
    conjugation, saturated, missing marker on every baseline touching an absent antenna)."""
    nant = len(present)
    index, conj = meerkat_order(nant)
    v = np.asarray(vis)[:, index]  # [C, n_products, 2] int64
    v[:, conj, 1] *= -1
    clipped = int(np.count_nonzero((v > SATURATION) | (v < -SATURATION)))
    if out is None:
        out = np.empty(v.shape, XENG_DTYPE)
    np.clip(v, -SATURATION, SATURATION, out=out, casting="unsafe")
    if not present.all():
        ok = np.repeat([present[a1] and present[a2] for a2 in range(nant)
                        for a1 in range(a2 + 1)], 4)
        out[:, ~ok] = MISSING
    return EncodeResult(out, clipped, int(nant - present.sum()))


def product_description(labels: list[list[str]], n_accs: int) -> str:
    """``xeng_raw``'s descriptor text: what the numbers are, and the ``bls_ordering``."""
    return (f"{XENG_RAW.description} int32 sums over {n_accs} spectra of x[a1,p1] * "
            f"conj(x[a2,p2]) in F-engine sample units, saturated at +-(2^31-1); (-2^31, 1) "
            f"marks a baseline whose antenna lost data. bls_ordering (index (a2*(a2+1)/2+a1)*4"
            f"+p1+2*p2, a1 <= a2): {json.dumps(bls_ordering(labels))}")


class VisibilitySender:
    """Sends dumps as ``xeng_raw`` heaps over a spead2 stream (module docstring).

    Parameters
    ----------
    stream : a spead2 send stream (see :func:`udp_stream`); closed by :meth:`close`.
    labels : per antenna its two input labels (:func:`input_labels`).
    nchan, chan0, total_channels : this X-engine's channels, its first one, the band's
        channels (heap counters: ``set_cnt_sequence(chan0 // nchan, total_channels // nchan)``).
    n_accs : spectra per dump (the descriptor says so).
    descriptor_interval_s : seconds between descriptor heaps (0: only at start).
    """

    def __init__(self, stream: spead2.send.SyncStream, labels: list[list[str]], *, nchan: int,
                 chan0: int, total_channels: int, n_accs: int,
                 descriptor_interval_s: float = DESCRIPTOR_INTERVAL_S) -> None:
        self.stream, self.labels = stream, labels
        self.nchan, self.chan0 = nchan, chan0
        self.shape = (nchan, n_products(len(labels)), 2)
        self.descriptor_interval_s = descriptor_interval_s
        self.buffer = np.zeros(self.shape, XENG_DTYPE)
        self._timestamp = np.zeros((), ">u8")
        ig = spead2.send.ItemGroup(flavour=MEERKAT_FLAVOUR)
        ig.add_item(TIMESTAMP.id, TIMESTAMP.name, TIMESTAMP.description, shape=(),
                    format=_IMMEDIATE)
        ig.add_item(FREQUENCY.id, FREQUENCY.name, "Value of first channel in collections "
                    "stored here.", shape=(), format=_IMMEDIATE)
        ig.add_item(XENG_RAW.id, XENG_RAW.name, product_description(labels, n_accs),
                    shape=self.shape, dtype=XENG_DTYPE)
        self._descriptors = ig.get_heap(descriptors="all", data="none")
        ig[TIMESTAMP.id].value = self._timestamp
        ig[FREQUENCY.id].value = chan0
        ig[XENG_RAW.id].value = self.buffer
        self._heap = ig.get_heap(descriptors="none", data="all")
        self._heap.repeat_pointers = True
        self._end = spead2.send.Heap(MEERKAT_FLAVOUR)
        self._end.add_end()
        if chan0 % nchan or total_channels % nchan:
            raise ValueError(f"chan0 ({chan0}) and total_channels ({total_channels}) must be "
                             f"multiples of nchan ({nchan}): X-engines own whole substreams")
        stream.set_cnt_sequence(chan0 // nchan, total_channels // nchan)
        self._last_descriptors = -np.inf
        self.heaps_sent = 0

    @property
    def heap_bytes(self) -> int:
        return self.buffer.nbytes

    def send(self, timestamp: int, data: np.ndarray | None = None) -> None:
        """Send one dump (``data`` int32 of :attr:`shape`, or what is in :attr:`buffer`)."""
        now = time.monotonic()
        if now - self._last_descriptors >= (self.descriptor_interval_s or np.inf):
            self.stream.send_heap(self._descriptors)
            self._last_descriptors = now
        if data is not None and data is not self.buffer:
            self.buffer[...] = data
        self._timestamp[()] = timestamp
        self.stream.send_heap(self._heap)
        self.heaps_sent += 1

    def close(self) -> None:
        """The stop heap (katgpucbf's ``send_stop_heap``), then release the stream."""
        if self.stream is not None:
            self.stream.send_heap(self._end)
            self.stream = None


def udp_stream(address: str, port: int, *, heap_bytes: int, rate_bytes_s: float = 0.0,
               ttl: int = 4, interface: str | None = None,
               buffer_size: int = 1 << 20) -> spead2.send.UdpStream:
    """A spead2 UDP stream for ``xeng_raw`` heaps (8192-byte payloads, paced at
    ``rate_bytes_s`` of packets when > 0; multicast with ``ttl`` from ``interface``)."""
    config = spead2.send.StreamConfig(max_packet_size=PACKET_PAYLOAD_BYTES + XENG_PREAMBLE_BYTES,
                                      rate=rate_bytes_s, max_heaps=4)
    pool = spead2.ThreadPool(1)
    if interface:
        return spead2.send.UdpStream(pool, [(address, port)], config, buffer_size, ttl,
                                     interface)
    return spead2.send.UdpStream(pool, [(address, port)], config, buffer_size)


def dump_rate(heap_bytes: int, dump_s: float, factor: float) -> float:
    """Bytes per second that send a heap in ``1 / factor`` of a dump (katgpucbf's
    ``send_rate``: packets' headers included); 0 (unpaced) when ``factor`` is 0."""
    if not factor or not dump_s > 0:
        return 0.0
    npkt = -(-heap_bytes // PACKET_PAYLOAD_BYTES)
    return (heap_bytes + npkt * XENG_PREAMBLE_BYTES) / dump_s * factor

