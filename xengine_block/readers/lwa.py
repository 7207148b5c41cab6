"""LWA transient buffer recordings in frequency: TBF (LWA-SV's ADP, LWA-NA's NDP) and TBX
(NDP), frames of a block of channels of every stand at one time, read in place.

Facts (LSL, the LWA Software Library, github lwa-project/lsl; TBF from its 3.0.x releases,
``lsl/reader/tbf.py`` and ``tbf.cpp``, TBX from ``main``, ``lsl/reader/tbx.py`` and
``tbx.cpp``; constants ``lsl/common/adp.py`` and ``ndp.py``):

- A frame is a big-endian header and a payload. Both: Mark 5C sync word ``DE C0 DE 5C``
  (``readers.hpp`` ``validSync5C``: 0x5CDEC0DE read little-endian), then one byte of frame id
  and a 24-bit frame count, a 32-bit second count. TBF: int16 first channel, int16 stand
  count (0: 256, ADP's), int64 time tag: 24 bytes, then 12 channels (``FRAME_CHANNEL_COUNT``)
  x stands x 2 pols. TBX: uint32 first channel, uint16 stands, uint16 channels, int64 time
  tag: 28 bytes, then channels x stands x 2 pols.
- Frame ids: TBF 0x01 (ADP) and 0x05 (NDP: ``adp_id & 0x04`` selects NDP's channel width);
  TBX 0x08 (``is_tbf``, ``is_tbx``).
- Samples: one byte, 4+4-bit two's complement, the real part in the high nibble (``gofast.cpp``
  ``tbfLUT`` / ``tbxLUT``: ``t = (i >> 4*(1-j)) & 15``, j = 0 the real part): SampleLayout
  ``ci4 re_high``, payload ``[chan][stand][pol]``, stream ``2 * stand + pol``.
- Time tags are ticks of fS = 196 MHz since the Unix epoch (``FrameTimestamp.
  from_dp_timetag``); channel c is centred at ``c * fC``: NDP fC = fS / 8192 (23.926 kHz),
  spectra 8192 ticks apart; ADP fC = 25 kHz, spectra fS / fC = 7840 ticks apart (LSL's
  ``ldp.py``: "ADP data will have a step size of 7840 ticks @ fS vs NDP with 8192").
- A time sample is spread over frames, one per block of channels, in any order (LSL's
  ``TBFFile`` and ``TBXFile`` gather a time's frames by time tag and place them by their first
  channel); blocks need not be contiguous (two tunings: ``tbf-mini-test.dat`` holds channels
  640..687 and 2176..2211).
- Stands are in the order of the station's digitiser inputs; LSL's LWA-SV and LWA-NA station
  definitions (``lsl.common.stations``) number them 1..N in that order, which are the
  antenna numbers here.

Gathering: frames are indexed by (time, block); one missing leaves its block's channels out of
that spectrum (the correlator counts spectra per channel: the UVH5 ``nsamples`` of those
channels is short, zero where none was recorded), a repeated one is skipped, a frame whose
header contradicts the file (frame id, stand or channel count, a channel block overlapping
another, a time tag off the spectrum grid or far from the others) is skipped and counted. A
block's frames at one stride in the file are read in place; the frames of a block that the
file does not hold at one stride are copied into one buffer per integration (bytes, never
decoded).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from ..frames import pack_ci4
from ..sample_layout import SampleLayout
from .base import Chunk, Recording, RecordingError, RecordingMeta, Run

if TYPE_CHECKING:
    from ..array import ArrayDescription

SYNC = b"\xde\xc0\xde\x5c"
#: The DP/ADP/NDP sample clock: time tags count its ticks (lsl/common/ndp.py ``fS``).
FS_HZ = 196_000_000
NDP_TICKS = 8192  # spectra apart (fC = fS / 8192)
ADP_TICKS = 7840  # fS / 25 kHz
#: Channel numbers run below this (fS / 2 over the narrower channel).
MAX_CHANNEL = 4096
#: Where the sync word is looked for after a damaged frame: bytes per search.
_SEARCH = 1 << 20
#: Frames checked for their sync words at a time.
_WINDOW = 1 << 16
#: Bytes :func:`write_frames` writes at a time.
WRITE_BUFFER = 4 << 20


@dataclass(frozen=True)
class FrameFormat:
    """One frame format's header layout."""

    name: str
    header_bytes: int  # header and time tag
    ids: tuple[int, ...]
    chan_field: str  # struct format of the first-channel field at byte 12
    fixed_nchan: int | None  # channels per frame where the header does not say (TBF: 12)

    def fields(self, head: np.ndarray) -> dict[str, np.ndarray]:
        """Header fields of frames ``head`` (``[n, header_bytes]`` uint8)."""
        h = np.ascontiguousarray(head)
        out = {"id": h[:, 4].astype(np.int64),
               "time_tag": h[:, self.header_bytes - 8:].copy().view(">i8")[:, 0]
               .astype(np.int64)}
        if self.fixed_nchan is not None:  # TBF: int16 first channel, int16 stands
            out["chan"] = h[:, 12:14].copy().view(">i2")[:, 0].astype(np.int64)
            ns = h[:, 14:16].copy().view(">i2")[:, 0].astype(np.int64)
            out["nstand"] = np.where(ns == 0, 256, ns)
            out["nchan"] = np.full(len(h), self.fixed_nchan, np.int64)
        else:  # TBX: uint32 first channel, uint16 stands, uint16 channels
            out["chan"] = h[:, 12:16].copy().view(">u4")[:, 0].astype(np.int64)
            out["nstand"] = h[:, 16:18].copy().view(">u2")[:, 0].astype(np.int64)
            out["nchan"] = h[:, 18:20].copy().view(">u2")[:, 0].astype(np.int64)
        return out

    def frame_bytes(self, f: dict[str, np.ndarray], i: int = 0) -> int:
        return self.header_bytes + int(f["nchan"][i]) * int(f["nstand"][i]) * 2

    def plausible(self, f: dict[str, np.ndarray]) -> bool:
        """Whether the first header of ``f`` is one of this format's: its frame id, and stand
        and channel counts in 1..1024."""
        return (int(f["id"][0]) in self.ids and 0 < int(f["nstand"][0]) <= 1024
                and 0 < int(f["nchan"][0]) <= 1024)


TBF = FrameFormat("tbf", 24, (0x01, 0x05), ">h", 12)
TBX = FrameFormat("tbx", 28, (0x08,), ">I", None)


def spectrum_ticks(fmt: FrameFormat, frame_id: int) -> int:
    """Ticks of fS between spectra: ADP's TBF 7840 (25 kHz channels), NDP's 8192."""
    return ADP_TICKS if fmt is TBF and not frame_id & 0x04 else NDP_TICKS


def station_of(fmt: FrameFormat, frame_id: int, nstand: int) -> str | None:
    """The LWA station a file is taken to be from, as LSL's station definitions name it: ADP
    ran at LWA-SV only; an NDP file of 64 stands is LWA-NA's (LSL's ``tbf-mini-test.dat`` and
    ``tbx-test.dat``), of 256 LWA-SV's (the 256-stand station whose stands LSL numbers 1..256
    in digitiser order; LWA1's it does not: an LWA1 file needs --array). Not a header
    field: inferred from the frame id and stand count; else unknown."""
    if fmt is TBF and not frame_id & 0x04:
        return "LWASV"
    return {64: "LWANA", 256: "LWASV"}.get(nstand)


def find_sync(buf: np.ndarray, start: int, stop: int | None = None) -> int:
    """The next sync word at or after byte ``start`` (before ``stop``), or -1."""
    stop = len(buf) if stop is None else min(stop, len(buf))
    pos = start
    while pos < stop:
        end = min(pos + _SEARCH + 3, stop)
        k = bytes(buf[pos:end]).find(SYNC)
        if k >= 0:
            return pos + k
        pos = end - 3 if end < stop else stop
    return -1


def majority(values: np.ndarray) -> int:
    """The most common of ``values`` (the smallest of equals)."""
    vals, counts = np.unique(values, return_counts=True)
    return int(vals[np.argmax(counts)])


def headers(buf: np.ndarray, offsets: np.ndarray, nbytes: int) -> np.ndarray:
    """The ``nbytes`` first bytes of the frames at ``offsets`` (each with ``nbytes`` bytes
    from it in ``buf``), ``[n, nbytes]``: rows of a sliding window over the map, one row copied
    per frame (a gather of every byte cost ten times as much, a serial part of reprocessing)."""
    return np.lib.stride_tricks.sliding_window_view(buf, nbytes)[offsets]


#: The sync word as a little-endian uint32, as :func:`_syncs` reads it.
_SYNC_WORD = int.from_bytes(SYNC, "little")


def _syncs(buf: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Whether a sync word starts at each of ``offsets`` (each with 4 bytes from it in
    ``buf``): the map read as a uint32 at every byte, one word per frame."""
    if len(buf) < 4:
        return np.zeros(len(offsets), bool)
    words = np.ndarray((len(buf) - 3,), "<u4", buffer=buf, strides=(1,))
    return words[offsets] == _SYNC_WORD


class LwaFrameRecording(Recording):
    """A TBF or TBX file (see the module docstring)."""

    frame_format: ClassVar[FrameFormat] = TBF
    _spans: tuple[np.ndarray, np.ndarray] | None = None

    @classmethod
    def sniff(cls, head: bytes, path: Path) -> bool:
        fmt = cls.frame_format
        if len(head) < fmt.header_bytes or head[:4] != SYNC:
            return False
        f = fmt.fields(np.frombuffer(head[:fmt.header_bytes], np.uint8)[None])
        if not fmt.plausible(f):
            return False
        n = fmt.frame_bytes(f)
        return len(head) <= n or head[n:n + 4] == SYNC or len(head) < n + 4

    # ------------------------------------------------------------------ index
    def _index(self) -> tuple[RecordingMeta, list[Run]]:
        if len(self.files) != 1:
            raise RecordingError(f"{self.files[0]}: a {self.format.upper()} recording is one "
                                 f"file")
        fmt, path, buf = self.frame_format, self.files[0], self.map(0)
        where = f"{path}: "
        size, first = self._frame_size(buf, where)
        offsets = self._walk(buf, size, first, path)
        if offsets.size == 0:
            raise RecordingError(f"{where}no whole {self.format.upper()} frame")
        f = fmt.fields(headers(buf, offsets, fmt.header_bytes))
        frame_id = majority(f["id"])
        mine = f["id"] == frame_id
        nstand, nchan = majority(f["nstand"][mine]), majority(f["nchan"][mine])
        good = (mine & (f["nstand"] == nstand) & (f["nchan"] == nchan)
                & (f["chan"] >= 0) & (f["chan"] + nchan <= MAX_CHANNEL)
                & (fmt.header_bytes + nchan * nstand * 2 == size))
        self.damage.add(path, "bad_headers", int((~good).sum()))
        ticks = spectrum_ticks(fmt, frame_id)
        t, good = self._times(f["time_tag"], good, ticks, path)
        blocks, good = self._blocks(f["chan"], good, nchan, path)
        if not good.any():
            raise RecordingError(f"{where}no frame agrees with the file's first "
                                 f"({self.format.upper()} id {frame_id:#x}, {nstand} stands, "
                                 f"{nchan} channels)")
        self.payload = SampleLayout.from_axes([("freq", nchan), ("stream", 2 * nstand)],
                                              encoding="ci4", nibble_order="re_high")
        self.nchan_frame = nchan
        runs = self._runs(offsets + fmt.header_bytes, t, f["chan"], good, blocks, path)
        chans = np.concatenate([np.arange(b, b + nchan) for b in blocks])
        fc = FS_HZ / ticks
        self.station = station_of(fmt, frame_id, nstand)
        meta = RecordingMeta(
            self.format, nstand, int(chans.size), self.tt0 / FS_HZ, fc, float(chans[0] * fc), fc,
            "ci4", None, self.station or "LWA", int(chans[0]),
            antenna_numbers=tuple(range(1, nstand + 1)),
            channel_freqs_hz=tuple(float(c * fc) for c in chans)
            if chans[-1] - chans[0] + 1 != chans.size else None)
        return meta, runs

    def _frame_size(self, buf: np.ndarray, where: str) -> tuple[int, int]:
        """(frame bytes, first frame's offset): the first frame whose size its header gives
        is followed by another frame or the end of the file; up to 64 tried."""
        fmt = self.frame_format
        pos = find_sync(buf, 0)
        for _ in range(64):
            if pos < 0 or pos + fmt.header_bytes > len(buf):
                break
            f = fmt.fields(buf[pos:pos + fmt.header_bytes][None])
            n = fmt.frame_bytes(f)
            if fmt.plausible(f) and (pos + n >= len(buf)
                                     or bytes(buf[pos + n:pos + n + 4]) == SYNC):
                return n, pos
            pos = find_sync(buf, pos + 1)
        raise RecordingError(f"{where}no {self.format.upper()} frame (Mark 5C sync word "
                             f"DE C0 DE 5C, frame id {'/'.join(hex(i) for i in fmt.ids)}) "
                             f"followed by another")

    def _walk(self, buf: np.ndarray, size: int, pos: int, path: Path) -> np.ndarray:
        """Offsets of the whole frames of ``size`` bytes from ``pos``: frames follow each
        other (checked a window of frames at a time); where one is not followed by a sync
        word the next is looked for (the bytes skipped are garbage, a frame cut short by the
        next one's sync word among them); a last frame cut by the end of the file is
        counted."""
        n = len(buf)
        self.damage.add(path, "garbage_bytes", pos)
        parts = []
        window = 256  # grows while frames follow each other, small again after a break
        while pos < n:
            k = min((n - pos) // size, window)
            if k == 0:  # the rest is shorter than a frame
                cut = bytes(buf[pos:pos + 4]) == SYNC[:min(4, n - pos)]
                self.damage.add(path, "truncated_bytes" if cut else "garbage_bytes", n - pos)
                break
            cand = pos + size * np.arange(k, dtype=np.int64)
            bad = np.flatnonzero(~_syncs(buf, cand))
            stop = int(bad[0]) if bad.size else k
            window = 256 if bad.size else min(4 * window, _WINDOW)
            end = pos + stop * size
            if stop and end < n and bytes(buf[end:end + 4]) != SYNC[:min(4, n - end)]:
                # the frame before a break: whole only if no sync word lies inside it
                if find_sync(buf, end - size + 1, end) >= 0:
                    stop, end = stop - 1, end - size
            parts.append(cand[:stop])
            pos = end
            if pos >= n or bytes(buf[pos:pos + 4]) == SYNC[:min(4, n - pos)]:
                continue  # on at the next frame (or the short rest)
            nxt = find_sync(buf, pos + 1)
            if nxt < 0:
                self.damage.add(path, "garbage_bytes", n - pos)
                break
            self.damage.add(path, "garbage_bytes", nxt - pos)
            pos = nxt
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)

    def _times(self, tt: np.ndarray, good: np.ndarray, ticks: int,
               path: Path) -> tuple[np.ndarray, np.ndarray]:
        """Spectrum index of each frame from its time tag; frames off the grid of the
        majority, or further from the median than the file has frames, are time disorder."""
        self.tt0 = 0
        if not good.any():
            return np.zeros(len(tt), np.int64), good
        phase = tt % ticks
        on = good & (phase == majority(phase[good]))
        med, span = int(np.median(tt[on])), ticks * len(tt)
        lo, hi = max(med - span, -(1 << 63)), min(med + span, (1 << 63) - 1)
        near = on & (tt >= lo) & (tt <= hi)
        self.damage.add(path, "time_disorder", int((good & ~near).sum()))
        self.tt0 = int(tt[near].min())  # spectrum 0's time tag
        return (tt - self.tt0) // ticks, near

    def _blocks(self, chan: np.ndarray, good: np.ndarray, nchan: int,
                path: Path) -> tuple[list[int], np.ndarray]:
        """The first channels of the file's channel blocks: by frames, most first, each
        overlapping none taken before (a frame of an overlapping block is a bad header)."""
        vals, counts = np.unique(chan[good], return_counts=True)
        taken: list[int] = []
        for v in vals[np.argsort(-counts, kind="stable")]:
            if all(abs(int(v) - b) >= nchan for b in taken):
                taken.append(int(v))
        keep = good & np.isin(chan, taken)
        self.damage.add(path, "bad_headers", int((good & ~keep).sum()))
        return sorted(taken), keep

    def _runs(self, payloads: np.ndarray, t: np.ndarray, chan: np.ndarray, good: np.ndarray,
              blocks: list[int], path: Path) -> list[Run]:
        """Per block, runs of frames consecutive in time at one stride in the file (the
        first frame of a repeated (time, block) kept); missing frames counted (those of the
        first and last spectrum excepted)."""
        idx = np.flatnonzero(good)
        order = np.lexsort((idx, t[idx], chan[idx]))
        idx = idx[order]
        c, tt = chan[idx], t[idx]
        dup = np.zeros(idx.size, bool)
        dup[1:] = (c[1:] == c[:-1]) & (tt[1:] == tt[:-1])
        self.damage.add(path, "time_disorder", int(dup.sum()))
        idx, c, tt = idx[~dup], c[~dup], tt[~dup]
        # Frames missing between the first and the last spectrum are lost (damage); those of
        # the first and last spectra are where the buffer's dump began and ended, its frames
        # arriving in any order (LSL's TBFFile looks past them for the lowest frame count):
        # left out as the channels' not recorded, not counted.
        last = int(tt.max()) if tt.size else 0
        inner = (tt > 0) & (tt < last)
        missing = max(last - 1, 0) * len(blocks) - int(inner.sum())
        self.damage.add(path, "gap_blocks", missing)
        self.damage.add(path, "gap_spectra", missing)
        runs: list[Run] = []
        nchan = self.nchan_frame
        for k, b in enumerate(blocks):
            sel = c == b
            o, s = payloads[idx[sel]], tt[sel]
            runs += self._block_runs(o, s, k * nchan)
        runs.sort(key=lambda r: (r.time_tag, r.chan0))
        return runs

    def _block_runs(self, o: np.ndarray, t: np.ndarray, chan0: int) -> list[Run]:
        """Runs of one block's frames (payload offsets ``o`` at spectra ``t``, by time)."""
        dense = self.payload
        if o.size > 1:
            d = np.diff(o)
            if (np.diff(t) == 1).all() and (d == d[0]).all() and d[0] >= dense.frame_bytes:
                return [Run(0, int(o[0]), dense.replace(frame_bytes=int(d[0])), int(o.size),
                            int(t[0]), chan0)]
        runs: list[Run] = []
        a = 0
        while a < o.size:  # the general case: greedy stretches
            b = a + 1
            stride = int(o[b] - o[a]) if b < o.size else 0
            while (b < o.size and t[b] == t[b - 1] + 1 and o[b] - o[b - 1] == stride
                   and stride >= dense.frame_bytes):
                b += 1
            lay = dense if b - a == 1 else dense.replace(frame_bytes=stride)
            runs.append(Run(0, int(o[a]), lay, b - a, int(t[a]), chan0))
            a = b
        return runs

    # ------------------------------------------------------------------ reading
    @property
    def end(self) -> int:
        return max(r.end for r in self.runs)

    def chunks(self, t0: int, t1: int, *, antennas: Sequence[int] | None = None,
               channels: tuple[int, int] | None = None) -> Iterator[Chunk]:
        """As :meth:`Recording.chunks`; a block whose frames in ``[t0, t1)`` lie in several
        runs gives one chunk of them copied together (one correlation call, not one per
        frame)."""
        streams = self.stream_order(antennas)
        if self._spans is None:  # each run's first and one-past-last spectrum
            self._spans = (np.array([r.time_tag for r in self.runs], np.int64),
                           np.array([r.end for r in self.runs], np.int64))
        by_block: dict[int, list[int]] = {}
        for i in np.flatnonzero((self._spans[0] < t1) & (self._spans[1] > t0)).tolist():
            by_block.setdefault(self.runs[i].chan0, []).append(i)
        for chan0, which in sorted(by_block.items()):
            if len(which) == 1:
                yield from self._window_chunks(which[0], t0, t1, channels, streams)
                continue
            layout, c0 = self._select(Run(0, 0, self.payload, 1, 0, chan0), channels, streams)
            if layout is None:
                continue
            data, first = self._gather([self.runs[i] for i in which], t0, t1)
            nframe = data.shape[0]
            most = max(1, layout.max_spectra)
            for a in range(0, nframe, most):
                k = min(most, nframe - a)
                yield Chunk(data[a:a + k].reshape(-1), layout, k, first + a, c0)

    def _gather(self, runs: list[Run], t0: int, t1: int) -> tuple[np.ndarray, int]:
        """The payloads of ``runs``' frames in ``[t0, t1)``, copied into ``[frame, bytes]``;
        and the first one's spectrum."""
        n = self.payload.frame_bytes
        parts, first = [], None
        m = self.map(0)
        for run in runs:
            lo, hi = max(t0, run.time_tag) - run.time_tag, min(t1, run.end) - run.time_tag
            stride = run.layout.frame_bytes
            view = np.ndarray((hi - lo, n), np.uint8, buffer=m,
                              offset=run.offset + lo * stride, strides=(stride, 1))
            parts.append(view)
            first = run.time_tag + lo if first is None else min(first, run.time_tag + lo)
        return np.concatenate(parts), int(first)

    def array(self) -> ArrayDescription | None:
        """The station's stands from LSL's station definitions (``.[lwa]``)."""
        return lsl_station_array(self.station, self.meta.nant, str(self.files[0]))


def lsl_station_array(station: str | None, nstand: int, what: str) -> ArrayDescription:
    """Stands 1..``nstand`` of an LWA station from LSL's definitions (``lsl.common.
    stations``: stand ``x, y, z`` metres east, north, up of the station's ``lat, lon,
    elev``); RecordingError saying what to pass where LSL or the station is missing."""
    from ..array import ArrayDescription

    if station is None:
        raise RecordingError(f"{what}: {nstand} stands of an unknown LWA station: pass --array "
                             f"ARRAY.toml whose antenna numbers are the stand numbers")
    try:
        from lsl.misc import telemetry

        telemetry.ignore()  # LSL reports its use unless told not to: not from here
        from lsl.common import stations
    except ImportError:
        raise RecordingError(f"{what}: stand positions of {station} come from LSL (pip install "
                             f"'xengine-block[lwa]'), or pass --array ARRAY.toml whose antenna "
                             f"numbers are the stand numbers") from None
    st = {"LWASV": stations.lwasv, "LWANA": stations.lwana}[station]
    ants = st.antennas[0:2 * nstand:2]
    if len(ants) < nstand:
        raise RecordingError(f"{what}: {nstand} stands, LSL's {station} has {len(ants)}: pass "
                             f"--array")
    numbers = [int(a.stand.id) for a in ants]
    enu = [[float(a.stand.x), float(a.stand.y), float(a.stand.z)] for a in ants]
    return ArrayDescription(st.name, float(st.lat) * 180 / np.pi, float(st.lon) * 180 / np.pi,
                            float(st.elev), [f"LWA{n:03d}" for n in numbers], numbers, enu,
                            instrument=station)


class TbfRecording(LwaFrameRecording):
    """An LWA TBF file (ADP or NDP)."""

    format = "tbf"
    frame_format = TBF


class TbxRecording(LwaFrameRecording):
    """An LWA TBX file (NDP)."""

    format = "tbx"
    frame_format = TBX


def write_frames(path: str | Path, fmt: FrameFormat, samples: np.ndarray, *, chans: Sequence[int],
                 time_tag: int, frame_id: int | None = None, ticks: int | None = None,
                 order: Sequence[tuple[int, int]] | None = None) -> Path:
    """A TBF or TBX file of ``samples`` (int8 ``[time, block, chan, stand, pol, 2]`` within
    -8..7; ``chans``: each block's first channel), one frame per (time, block) in
    ``order`` (default time-major), as LSL's frame definitions lay them out. For tests and
    examples."""
    x = np.asarray(samples)
    ntime, nblock, nchan, nstand = x.shape[:4]
    frame_id = fmt.ids[-1] if frame_id is None else frame_id
    ticks = spectrum_ticks(fmt, frame_id) if ticks is None else ticks
    packed = pack_ci4(x)
    order = [(t, b) for t in range(ntime) for b in range(nblock)] if order is None else order
    path = Path(path)
    # Frames go out in writes of WRITE_BUFFER bytes, as a recorder writes its buffers, not one
    # 6 KiB frame at a time: the file is then in the page cache as it is after a read from
    # disk, in 2 MiB folios that a memory map maps in 2 MiB pages (written frame by frame, in
    # 4 KiB ones: a 202 MB file took 12-15 ms to map instead of 1, and its correlation ~30 ms
    # more CPU).
    with open(path, "wb", buffering=WRITE_BUFFER) as fh:
        for t, b in order:
            tt = time_tag + t * ticks
            sec = tt // FS_HZ
            word = struct.pack(">I", (frame_id << 24) | (t & 0xFFFFFF))
            if fmt is TBF:
                head = struct.pack(">hh", chans[b], 0 if nstand == 256 and not frame_id & 4
                                   else nstand)
            else:
                head = struct.pack(">IHH", chans[b], nstand, nchan)
            fh.write(SYNC + word + struct.pack(">I", sec) + head + struct.pack(">q", tt))
            fh.write(packed[t, b].tobytes())
    return path
