"""Our own pcap recordings read in place, where they are clean.

A recording of our F-engine heaps (:mod:`~xengine_block.capture.recording`) is correlated
again by replaying it through the capture (:func:`~xengine_block.reprocess.jobs.
reprocess_file`), which copes with anything a network delivers: loss, reordering, duplicates,
time jumps, foreign packets. Most recordings hold none of that: every frame whole, in one order,
each heap one record of one size. Their samples then lie at fixed strides in the file, which a
:class:`~xengine_block.sample_layout.SampleLayout` per channel group describes (frame = the
records of one packet time, stream ``s`` at its record's payload), and the backends correlate
them from the memory map as they do GUPPI blocks: no receiver, no copy into a ring. The check that
a file is clean, one compiled pass over its record headers
(:func:`~xengine_block.capture.pcap.regular_heaps`), costs a small fraction of what the capture
spends on a heap; mapping the file (its page tables) costs more than the check, and the one
mapping serves the check and the correlation.

What comes out must be what the capture pipeline writes, dump for dump and bit for bit, so the
dumps are the pipeline's (:func:`pipeline_dumps`): the capture starts at the first frame that
is a multiple of P frames, X-engine integrations and dumps are aligned to absolute spectrum
counts, a first dump that starts before the data is written with its valid counts, and the last
is written only if the data reach its last X-engine integration (a short one included), as the
integrator does. ``tests/reprocess/test_in_place.py`` compares the two paths.
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass

import numpy as np

from ..capture import pcap
from ..capture.recording import RecordingInfo
from ..geometry import Geometry
from ..sample_layout import SampleLayout
from .base import Recording, RecordingMeta, Run


@dataclass(frozen=True)
class CleanPcap:
    """Where the heaps of a clean recording lie: records of ``record`` bytes from byte
    ``first``, the payload ``payload_at`` bytes into each, ``nframe`` frames of
    ``len(slots)`` records from timestamp ``ts0``; ``slots[j]`` = (stream, channel group) of a
    frame's ``j``-th record."""

    first: int
    record: int
    payload_at: int
    nframe: int
    ts0: int
    slots: np.ndarray

    @property
    def frame_bytes(self) -> int:
        return self.record * len(self.slots)


def find_clean(buf: np.ndarray, header: tuple, g: Geometry, chan0: int = 0) -> CleanPcap | None:
    """The heap positions of the clean recording ``buf`` (a pcap file's bytes, ``header``:
    :func:`~xengine_block.capture.pcap.pcap_header`), or None where it is not one (any record
    out of place, as :func:`~xengine_block.capture.pcap.regular_heaps` says, or a frame whose
    heaps are not each (stream, channel group) once)."""
    slots = np.zeros((g.npackets_per_frame, 2), np.int64)
    res = pcap.regular_heaps(buf, *header, g.payload_bytes, g.npackets_per_frame, slots,
                             g.nspectra_pkt)
    if not res[pcap.CLEAN] or res[pcap.TS0] % g.nspectra_pkt:
        return None
    group, off = np.divmod(slots[:, 1] - chan0, g.nchan_pkt)
    slots = np.stack([slots[:, 0], group], axis=1)
    if ((off != 0) | (group < 0) | (group >= g.nchan_group) | (slots[:, 0] < 0)
            | (slots[:, 0] >= g.nstream)).any():
        return None
    if np.unique(slots[:, 0] * g.nchan_group + slots[:, 1]).size != len(slots):
        return None
    return CleanPcap(int(res[pcap.FIRST]), int(res[pcap.RECORD]), int(res[pcap.PAYLOAD_AT]),
                     int(res[pcap.NHEAP]) // len(slots), int(res[pcap.TS0]), slots)


def open_clean(path: str | os.PathLike, info: RecordingInfo, g: Geometry,
               ninteg: int) -> PcapRecording | None:
    """The recording ``path`` (sidecar ``info``) read in place for X-engine frames of
    ``g.npacket`` packets and dumps of ``ninteg`` of them, or None where it is not clean or
    the capture pipeline would write no dump of it. The file is mapped once, its page tables
    filled in one call, for the check and then the correlation."""
    buf, mm, header = pcap.open_pcap(path)
    try:
        clean = find_clean(buf, header, g, info.chan0)
        if clean is not None:
            f0 = clean.ts0 // g.nspectra_pkt
            wins, start, dropped = pipeline_dumps(f0, f0 + clean.nframe, g.npacket, ninteg,
                                                  g.nspectra_pkt)
            if wins:
                return PcapRecording(path, info, g, clean, start, wins, dropped, (buf, mm))
    except BaseException:
        pcap.close(mm)
        raise
    del buf
    pcap.close(mm)
    return None


def pipeline_dumps(first: int, end: int, npacket: int, ninteg: int,
                   nspectra_pkt: int) -> tuple[list[tuple[int, int]], int, int]:
    """What the capture pipeline makes of frames ``[first, end)`` (absolute frame numbers, a
    frame = one packet time): (the spectrum windows of the dumps it writes, the frame its
    capture starts at, its integrator's ``dropped_partial``).

    The capture starts at the first multiple of P frames; X-engine integration ``x`` spans
    frames ``[x P, (x + 1) P)``, dump ``m`` integrations ``[m k, (m + 1) k)``; every
    integration with data is output (the last one short where the data end inside it); a dump
    is written when its last integration is, else the integrator drops it at the end."""
    start = -(-first // npacket) * npacket
    if start >= end:
        return [], start, 0
    per = npacket * ninteg
    last_x = -(-end // npacket) - 1  # the last X-engine integration output
    wins = [(m * per * nspectra_pkt, (m + 1) * per * nspectra_pkt)
            for m in range(start // per, last_x // ninteg + 1)
            if (m + 1) * ninteg - 1 <= last_x]
    return wins, start, int((last_x + 1) % ninteg != 0)


class PcapRecording(Recording):
    """A clean recording (:func:`find_clean`) from frame ``start`` on, as a reader's
    :class:`~xengine_block.readers.base.Recording`: one run per channel group (recording
    channels from 0), streams in the array's order."""

    format = "pcap"

    def __init__(self, path: str | os.PathLike, info: RecordingInfo, g: Geometry,
                 clean: CleanPcap, start: int, dumps: list[tuple[int, int]], dropped: int,
                 mapping: tuple[np.ndarray, mmap.mmap | None]) -> None:
        self.info, self.geometry, self.clean, self.start_frame = info, g, clean, start
        #: The pipeline's dumps (:func:`pipeline_dumps`): spectrum windows, dropped_partial.
        self.dumps, self.dropped_partial = dumps, dropped
        self._bytes, self._mm = mapping
        super().__init__([path])

    def map(self, file: int) -> np.ndarray:
        return self._bytes

    def close(self) -> None:
        super().close()
        self._bytes = np.zeros(0, np.uint8)
        if self._mm is not None:
            pcap.close(self._mm)
            self._mm = None

    def _index(self) -> tuple[RecordingMeta, list[Run]]:
        g, c, info = self.geometry, self.clean, self.info
        f0 = c.ts0 // g.nspectra_pkt
        skip = self.start_frame - f0
        one = SampleLayout.packet(g.replace(nchan=g.nchan_pkt))  # one record's payload
        pos = np.empty((g.nstream, g.nchan_group), np.int64)
        pos[c.slots[:, 0], c.slots[:, 1]] = np.arange(len(c.slots))
        runs = [Run(0, c.first + skip * c.frame_bytes,
                    one.replace(frame_bytes=c.frame_bytes,
                                stream_offsets=tuple(pos[:, grp] * c.record + c.payload_at)),
                    c.nframe - skip, self.start_frame * g.nspectra_pkt, grp * g.nchan_pkt)
                for grp in range(g.nchan_group)] if skip < c.nframe else []
        array = info.array
        meta = RecordingMeta("pcap", array.nant, g.nchan, info.sky["sync_time"],
                             info.sky["fs_hz"], info.sky["freq0_hz"], info.sky["chan_bw_hz"],
                             "ci4" if g.ci4 else "ci8", tuple(array.antenna_names),
                             array.telescope_name, info.chan0, self.files[0].name)
        return meta, runs
