"""VDIF files of channelised complex voltages from one station, its two threads the two
polarisations (CHIME/ARO: 4-bit, 1024 channels, one sample per frame).

Facts (VDIF specification 1.1.1 as baseband implements it: baseband vdif/header.py
``VDIFBaseHeader`` words, vdif/payload.py ``init_luts``):

- A frame is a header (32 bytes; 16 in legacy mode) and a payload; word 0: seconds from the
  reference epoch (bits 0-29), legacy (30), invalid (31); word 1: frame number within the
  second (0-23), reference epoch (24-29, half-years from 2000); word 2: frame length in 8-byte
  units (0-23), log2 of the channel count (24-28); word 3: station (0-15, two ASCII characters
  where printable), thread (16-25), bits per sample minus one (26-30), complex (31).
- The payload is 32-bit little-endian words, samples LSB first: for complex data ``[sample]
  [channel][re, im]``, 4-bit real in the *low* nibble; values are offset binary.
- One station per file, its two polarisations two threads (research/formats.md's "MWA phased
  VDIF, two threads" is one thread of two channels in baseband's sample_mwa.vdif: a beam's
  samples, refused here for having one thread).
- Headers carry no sample rate and no frequencies: the frame rate is seen only in a file longer
  than a second, so ``--sample-rate`` (and ``--freq0``, ``--chan-bw``) are asked for otherwise.

Offset binary is the one encoding the correlators do not read: each chunk is converted once,
``byte ^ 0x88`` (4-bit: both nibbles ``v - 8`` as two's complement, real low: SampleLayout
``ci4 re_low``) or ``byte ^ 0x80`` (8-bit: ``v - 128``, ``ci8``), a copy of the chunk's bytes
(the only reader that copies). baseband decodes 4-bit as ``(v - 8) / 2.95``, the same integers
scaled; its 8-bit ``(v - 127.5) / 35.5`` is half a level off ours (``v - 128``): a DC offset a
correlation of 8-bit VDIF includes.
"""

from __future__ import annotations

import calendar
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..sample_layout import SampleLayout
from .base import Recording, RecordingError, RecordingMeta, Run, merge_runs

#: Offset binary -> two's complement, per byte, by bits per part.
TO_TWOS_COMPLEMENT = {4: 0x88, 8: 0x80}


def epoch_unix(ref_epoch: int) -> int:
    """Unix time of a VDIF reference epoch (1 January or 1 July of 2000 + epoch // 2)."""
    return calendar.timegm((2000 + ref_epoch // 2, 1 if ref_epoch % 2 == 0 else 7, 1,
                            0, 0, 0, 0, 0, 0))


def header_words(buf: np.ndarray | bytes, pos: int = 0) -> np.ndarray:
    return np.frombuffer(bytes(buf[pos:pos + 16]), "<u4")


class VdifFields:
    """The fields of headers ``words`` (``[n, 4]`` uint32) this reader uses."""

    def __init__(self, w: np.ndarray) -> None:
        self.seconds = w[:, 0] & 0x3FFFFFFF
        self.legacy = (w[:, 0] >> 30) & 1
        self.invalid = (w[:, 0] >> 31) & 1
        self.frame_nr = w[:, 1] & 0xFFFFFF
        self.ref_epoch = (w[:, 1] >> 24) & 0x3F
        self.frame_bytes = (w[:, 2] & 0xFFFFFF).astype(np.int64) * 8
        self.lg2_nchan = (w[:, 2] >> 24) & 0x1F
        self.station = w[:, 3] & 0xFFFF
        self.thread = (w[:, 3] >> 16) & 0x3FF
        self.bps = ((w[:, 3] >> 26) & 0x1F) + 1
        self.complex = (w[:, 3] >> 31) & 1


def station_name(sid: int) -> str:
    msb, lsb = sid >> 8, sid & 0xFF
    if 48 <= msb < 128 and 32 < lsb < 127:
        return chr(msb) + chr(lsb)
    return str(sid)


class VdifRecording(Recording):
    """A VDIF file of one station (see the module docstring)."""

    format = "vdif"

    @classmethod
    def sniff(cls, head: bytes, path: Path) -> bool:
        if len(head) < 32:
            return False
        f = VdifFields(header_words(head)[None])
        n = int(f.frame_bytes[0])
        hdr = 16 if f.legacy[0] else 32
        if not hdr < n <= len(head) - 16 or f.ref_epoch[0] > 63 or f.bps[0] not in (
                1, 2, 4, 8, 16, 32):
            return False
        g = VdifFields(header_words(head, n)[None])  # the next frame agrees
        return (int(g.frame_bytes[0]) == n and g.station[0] == f.station[0]
                and g.ref_epoch[0] == f.ref_epoch[0] and g.lg2_nchan[0] == f.lg2_nchan[0]
                and abs(int(g.seconds[0]) - int(f.seconds[0])) <= 1)

    def _index(self) -> tuple[RecordingMeta, list[Run]]:
        if len(self.files) != 1:
            raise RecordingError(f"{self.files[0]}: a VDIF recording is one file")
        path, buf = self.files[0], self.map(0)
        where = f"{path}: "
        if len(buf) < 32:
            raise RecordingError(f"{where}{len(buf)} bytes: no VDIF frame")
        first = VdifFields(header_words(buf)[None])
        n = int(first.frame_bytes[0])
        hdr = 16 if first.legacy[0] else 32
        if n <= hdr:
            raise RecordingError(f"{where}frame length {n} bytes holds no payload")
        nframe, cut = divmod(len(buf), n)
        self.damage.add(path, "truncated_bytes", cut)
        words = np.ndarray((nframe, 4), "<u4", buffer=buf, strides=(n, 4))
        f = VdifFields(np.array(words))
        bps, nchan = int(first.bps[0]), 1 << int(first.lg2_nchan[0])
        if not first.complex[0]:
            raise RecordingError(f"{where}real-sampled VDIF: only complex channelised "
                                 f"voltages can be correlated")
        if bps not in TO_TWOS_COMPLEMENT:
            raise RecordingError(f"{where}{bps}-bit samples: this reader takes 4 and 8 bits")
        same = ((f.frame_bytes == n) & (f.lg2_nchan == first.lg2_nchan[0]) & (f.bps == bps)
                & (f.complex == 1) & (f.station == first.station[0])
                & (f.ref_epoch == first.ref_epoch[0]) & (f.legacy == first.legacy[0]))
        self.damage.add(path, "bad_headers", int((~same).sum()))
        self.damage.add(path, "invalid_frames", int((same & (f.invalid == 1)).sum()))
        good = same & (f.invalid == 0)
        threads = np.unique(f.thread[good])
        if threads.size != 2:
            raise RecordingError(f"{where}threads {threads.tolist()}: the two polarisations "
                                 f"must be two threads")
        payload_bits = (n - hdr) * 8
        spf, rem = divmod(payload_bits, nchan * bps * 2)
        if rem or spf < 1:
            raise RecordingError(f"{where}a payload of {n - hdr} bytes is not whole samples of "
                                 f"{nchan} channels x {bps} bits x 2")
        fps = self._frame_rate(f, good, spf, where)
        sec0 = int(f.seconds[good].min())
        ftime = (f.seconds.astype(np.int64) - sec0) * fps + f.frame_nr  # frame time index
        runs = self._framesets(ftime, f.thread, good, threads, n, hdr, nchan, spf, bps, path)
        sync = epoch_unix(int(first.ref_epoch[0])) + sec0
        chan_bw = self.overrides.get("chan_bw_hz")
        freq0 = self.overrides.get("freq0_hz")
        if chan_bw is None or freq0 is None:
            raise RecordingError(f"{where}VDIF headers carry no frequencies: pass --freq0 and "
                                 f"--chan-bw (signed: negative where channels run high to low)")
        name = station_name(int(first.station[0]))
        enc = "ci4" if bps == 4 else "ci8"
        return (RecordingMeta(self.format, 1, nchan, float(sync), float(fps * spf), freq0, chan_bw,
                              enc, (name,), None), runs)

    def _frame_rate(self, f: VdifFields, good: np.ndarray, spf: int, where: str) -> int:
        fs = self.overrides.get("fs_hz")
        if fs is not None:
            fps = fs / spf
            if fps != int(fps):
                raise RecordingError(f"{where}--sample-rate {fs:g} is not a whole number of "
                                     f"frames of {spf} samples per second")
            return int(fps)
        secs = f.seconds[good]
        full = [s for s in np.unique(secs)[1:-1]]  # seconds seen from start to end
        if not full:
            raise RecordingError(f"{where}VDIF headers carry no sample rate and this file spans "
                                 f"no whole second: pass --sample-rate")
        return int(f.frame_nr[good & np.isin(f.seconds, full)].max()) + 1

    def _framesets(self, ftime, thread, good, threads, n, hdr, nchan, spf, bps,
                   path) -> list[Run]:
        """One run per frameset (both threads' frames of one time), merged where regular;
        times missing a thread are gaps."""
        idx = np.flatnonzero(good)
        order = np.lexsort((thread[idx], ftime[idx]))
        idx = idx[order]
        t, th = ftime[idx], thread[idx]
        dup = np.zeros(idx.size, bool)
        dup[1:] = (t[1:] == t[:-1]) & (th[1:] == th[:-1])
        self.damage.add(path, "time_disorder", int(dup.sum()))
        idx, t, th = idx[~dup], t[~dup], th[~dup]
        part = 1 if bps == 4 else 2  # bytes of one channel's complex sample
        runs, prev = [], None
        k = 0
        while k < idx.size:
            if k + 1 < idx.size and t[k + 1] == t[k]:
                a, b = (idx[k], idx[k + 1]) if th[k] == threads[0] else (idx[k + 1], idx[k])
                a, b = int(a), int(b)
                base = min(a, b) * n
                offs = (a * n - base + hdr, b * n - base + hdr)
                lay = SampleLayout(2, nchan, spf, max(offs) + nchan * spf * part, offs,
                                   chan_stride=part, time_stride=nchan * part,
                                   encoding="ci4" if bps == 4 else "ci8", im_offset=1,
                                   nibble_order="re_low")
                if prev is not None and t[k] > prev + 1:
                    self.damage.add(path, "gap_blocks", int(t[k] - prev - 1))
                    self.damage.add(path, "gap_spectra", int(t[k] - prev - 1) * spf)
                runs.append(Run(0, base, lay, 1, int(t[k]) * spf))
                prev = t[k]
                k += 2
            else:  # a time with one thread only: not correlatable, a gap (counted below)
                k += 1
        if t.size and prev is not None and t[-1] > prev:  # lone frames at the end
            self.damage.add(path, "gap_blocks", int(t[-1] - prev))
            self.damage.add(path, "gap_spectra", int(t[-1] - prev) * spf)
        return merge_runs(runs)

    def _buffer(self, run: Run, first: int, nframe: int, layout: SampleLayout) -> np.ndarray:
        """The chunk's bytes converted from offset binary (module docstring): a copy."""
        view = super()._buffer(run, first, nframe, layout)
        bps = 4 if layout.encoding == "ci4" else 8
        return np.bitwise_xor(view, np.uint8(TO_TWOS_COMPLEMENT[bps]))

    @classmethod
    def group(cls, paths: Sequence[Path]) -> list[list[Path]]:
        return [[p] for p in paths]
