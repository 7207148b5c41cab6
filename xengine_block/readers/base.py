"""What every recording reader shares: the reader interface, runs of raw frames, damage counts,
and the cut of a time window into correlation calls.

A reader opens a recording (one file or a multi-file sequence) and describes it without decoding
a sample: its metadata (:class:`RecordingMeta`: times, frequencies, antenna names) and its data as
*runs* (:class:`Run`): equal frames, consecutive in time, in one file's memory map, each frame
described by a :class:`~xengine_block.sample_layout.SampleLayout` over the file's own bytes
(streams in the file's antenna order, ``s = 2 * antenna + pol``). :meth:`Recording.chunks` cuts
the runs of a spectrum window ``[t0, t1)`` into :class:`Chunk` s that a backend correlates in
place (``Backend.correlate_layout``): views of the memory map, never copies (VDIF's offset-binary
samples are the one exception, see :mod:`~xengine_block.readers.vdif`).

Time: spectrum ``n`` of a recording is at ``meta.sync_time + n / meta.fs_hz`` (the header
contract's ``time_tag`` clock); what a gap in time_tag leaves out was not recorded.

Damage is counted per file (:class:`Damage`, keys in :data:`DAMAGE`): blocks missing between
recorded ones, bytes that are no block, a last block cut short, headers that contradict the
file. A damaged recording is still readable (its runs hold what is intact); whether to accept it
is the caller's choice (``xengine reprocess --allow-damaged``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, fields, replace
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from ..sample_layout import SampleLayout

if TYPE_CHECKING:
    from ..array import ArrayDescription

#: Damage counters, declared once: name -> what it counts.
DAMAGE: dict[str, str] = {
    "gap_blocks": "blocks missing between recorded ones (a jump in PKTIDX / time)",
    "gap_spectra": "spectra of those missing blocks",
    "garbage_bytes": "bytes that are no header or block (skipped to the next header)",
    "truncated_bytes": "bytes of a last block cut short by the end of the file",
    "bad_headers": "headers contradicting the file's block shape or sizes (block skipped)",
    "time_disorder": "blocks repeating or going back in time, or off the spectrum grid (skipped)",
    "invalid_frames": "frames their own header marks invalid (VDIF)",
}


class RecordingError(ValueError):
    """A recording cannot be read at all; one line naming the file and the header key."""


@dataclass
class Damage:
    """Damage counters per file (``{file name: {counter: n}}``), only non-zero ones."""

    by_file: dict[str, dict[str, int]] = field(default_factory=dict)

    def add(self, path: str | os.PathLike, name: str, n: int = 1) -> None:
        if name not in DAMAGE:
            raise KeyError(f"undeclared damage counter {name!r}; declared: {sorted(DAMAGE)}")
        if n:
            counts = self.by_file.setdefault(Path(path).name, {})
            counts[name] = counts.get(name, 0) + int(n)

    def __bool__(self) -> bool:
        return bool(self.by_file)

    def total(self, name: str) -> int:
        return sum(c.get(name, 0) for c in self.by_file.values())

    def describe(self) -> str:
        """``a.0000.raw: gap_blocks=1,gap_spectra=64; b.raw: truncated_bytes=12`` (one line)."""
        return "; ".join(f"{f}: " + ",".join(f"{k}={v}" for k, v in c.items())
                         for f, c in self.by_file.items())


@dataclass(frozen=True)
class RecordingMeta:
    """What a recording says about itself (header contract fields, docs/design.md, "Ring headers").

    ``chan_bw_hz`` is signed: negative where channels run from high to low frequency (GUPPI
    ``OBSBW`` < 0, DADA ``BW`` < 0), i.e. a spectrally inverted band, whose samples carry the
    conjugate of the sky's phase (``docs/reprocess.md``; the UVH5 writer conjugates for it).
    ``antenna_names``: per antenna of the file, in file order; None when the file names none
    (antennas are then matched to an array file by position). ``antenna_numbers``: the
    observatory's numbers of the same antennas where the file gives them (MWAX: tile ids, LWA:
    stand numbers), matched to an array file's numbers where its names do not match (or the
    file names none).
    """

    format: str
    nant: int
    nchan: int
    sync_time: float
    fs_hz: float
    freq0_hz: float
    chan_bw_hz: float
    encoding: str  # the SampleLayout encoding of the file's samples (ci8, ci4, ci16)
    antenna_names: tuple[str, ...] | None = None
    telescope: str | None = None
    chan0: int = 0  # first channel's index in the full F-engine band, where the file says
    source: str = ""
    antenna_numbers: tuple[int, ...] | None = None
    #: Each channel's centre frequency where channels are not one even run from ``freq0_hz``
    #: (an LWA TBF file's two tunings far apart); None: ``freq0_hz + chan_bw_hz * i``.
    channel_freqs_hz: tuple[float, ...] | None = None

    @property
    def nstream(self) -> int:
        return 2 * self.nant

    @property
    def sample_bits(self) -> int:
        return 4 if self.encoding == "ci4" else 8

    @property
    def freqs_hz(self) -> np.ndarray:
        if self.channel_freqs_hz is not None:
            return np.array(self.channel_freqs_hz, np.float64)
        return self.freq0_hz + self.chan_bw_hz * np.arange(self.nchan)


@dataclass(frozen=True)
class Run:
    """``nframe`` frames of ``layout`` from byte ``offset`` of file ``file`` (an index into the
    recording's files), frame ``f`` holding spectra ``time_tag + f * layout.nspectra`` on:
    consecutive in time, equally spaced in the file. ``chan0``: the recording channel of the
    layout's channel 0 (several files of one recording can hold different channels: MWAX)."""

    file: int
    offset: int
    layout: SampleLayout
    nframe: int
    time_tag: int
    chan0: int = 0

    @property
    def end(self) -> int:
        """One past the last spectrum."""
        return self.time_tag + self.nframe * self.layout.nspectra


@dataclass(frozen=True)
class Chunk:
    """What one correlation call reads: ``nframe`` frames of ``layout`` at the start of
    ``data`` (a read-only view into the file's memory map), spectra ``time_tag`` on, filling
    recording channels ``chan0 ..`` (layout streams: the array's order)."""

    data: np.ndarray
    layout: SampleLayout
    nframe: int
    time_tag: int
    chan0: int = 0

    @property
    def nspectra(self) -> int:
        return self.nframe * self.layout.nspectra


@lru_cache(maxsize=256)
def spectra_window(layout: SampleLayout, start: int, stop: int) -> SampleLayout:
    """The same frames seen through spectra ``[start, stop)`` of each frame (time sub-range:
    offsets move on, frame stride kept). Cached: integrations that cut blocks cut them at a
    few places over and over (an MWAX integration of 7680 spectra in blocks of 6400: five),
    and a validated layout costs ~50 us at S = 64, a lookup ~2."""
    if layout.time_block and start % layout.time_block:
        raise ValueError(f"a window starting at spectrum {start} cuts a time block of "
                         f"{layout.time_block}")
    b = layout.block
    shift = (start // b) * layout.block_stride + (start % b) * layout.time_stride
    return layout.replace(nspectra=stop - start,
                          time_block=layout.time_block if layout.time_block and
                          (stop - start) % layout.time_block == 0 else 0,
                          stream_offsets=tuple(o + shift for o in layout.stream_offsets))


class Recording:
    """One recording of one format: files, metadata, runs of frames, damage.

    Subclasses set ``format``, implement :meth:`_index` (read the headers: meta, runs, damage)
    and :meth:`sniff` (does a file's start look like this format), and may override
    :meth:`group` (which input files form one recording) and :meth:`_buffer`.
    """

    format: ClassVar[str] = ""
    #: Whether each file of a multi-file recording is a stretch of time (GUPPI, DADA
    #: sequences: one task per file) rather than other channels of the same time (MWAX).
    parts_by_file: ClassVar[bool] = True

    def __init__(self, files: Sequence[str | os.PathLike], *, fs_hz: float | None = None,
                 freq0_hz: float | None = None, chan_bw_hz: float | None = None) -> None:
        #: What the caller says the headers lack or get wrong (VDIF carries none of them).
        self.overrides = {k: float(v) for k, v in (("fs_hz", fs_hz), ("freq0_hz", freq0_hz),
                                                   ("chan_bw_hz", chan_bw_hz)) if v is not None}
        self.files = tuple(Path(f) for f in files)
        if not self.files:
            raise RecordingError(f"{self.format}: no files")
        for f in self.files:
            if not f.is_file():
                raise RecordingError(f"{f}: no such recording file")
        self._maps: dict[int, np.ndarray] = {}
        self.damage = Damage()
        meta, self.runs = self._index()
        self.meta = replace(meta, **self.overrides)
        #: (run, channels, streams) -> the run's layout of those (made once: every window asks)
        self._selected: dict[tuple, tuple[SampleLayout | None, int]] = {}
        if not self.runs:
            raise RecordingError(f"{self.files[0]}: no complete block of data in the "
                                 f"{self.format} recording"
                                 + (f" ({self.damage.describe()})" if self.damage else ""))

    # ------------------------------------------------------------------ subclass hooks
    def _index(self) -> tuple[RecordingMeta, list[Run]]:
        raise NotImplementedError

    @classmethod
    def sniff(cls, head: bytes, path: Path) -> bool:
        """Whether a file starting with ``head`` (its first 64 KiB) is of this format."""
        raise NotImplementedError

    def array(self) -> ArrayDescription | None:
        """Where the antennas are when no array file is given: the telescope's own
        definition where the reader knows one (LWA stations from LSL), else None (then an
        array file is required, :func:`~xengine_block.readers.arrays.match_antennas`)."""
        return None

    @classmethod
    def group(cls, paths: Sequence[Path]) -> list[list[Path]]:
        """The recordings ``paths`` form (default: one per file)."""
        return [[p] for p in paths]

    @classmethod
    def part_name(cls, files: Sequence[Path], part: int) -> str:
        """Output stem of the part of a recording whose dumps start in ``files[part]``."""
        return files[part].stem

    # ------------------------------------------------------------------ data
    def map(self, file: int) -> np.ndarray:
        """The read-only memory map of file ``file`` (uint8), opened once."""
        m = self._maps.get(file)
        if m is None:
            path = self.files[file]
            if path.stat().st_size == 0:
                m = np.zeros(0, np.uint8)
            else:  # a plain ndarray over the map: a memmap's slices cost ~20 us each
                m = np.memmap(path, np.uint8, mode="r").view(np.ndarray)
            self._maps[file] = m
        return m

    def _buffer(self, run: Run, first: int, nframe: int, layout: SampleLayout) -> np.ndarray:
        """Bytes holding frames ``first .. first + nframe`` of ``run`` (a view by default)."""
        start = run.offset + first * run.layout.frame_bytes
        stop = start + (nframe - 1) * run.layout.frame_bytes + layout.last_byte + 1
        return self.map(run.file)[start:stop]

    @property
    def start(self) -> int:
        """Spectrum index of the first recorded spectrum."""
        return self.runs[0].time_tag

    @property
    def end(self) -> int:
        """One past the last recorded spectrum."""
        return self.runs[-1].end

    def file_starts(self) -> list[int]:
        """Per file, the first spectrum of the stretch it is answerable for: from the end of
        the files before it (so a gap before a file's data is that file's, as is its damage
        count) up to the next file's; the first file's from the recording's start."""
        ends = [None] * len(self.files)
        for run in self.runs:
            ends[run.file] = max(ends[run.file] or run.end, run.end)
        starts, upto = [], self.start
        for i in range(len(self.files)):
            starts.append(upto)
            if ends[i] is not None:
                upto = max(upto, ends[i])
        return starts

    def stream_order(self, antennas: Sequence[int] | None) -> list[int] | None:
        """Streams of the file antennas ``antennas`` (in that order), or None for all."""
        if antennas is None:
            return None
        return [2 * a + p for a in antennas for p in (0, 1)]

    def chunks(self, t0: int, t1: int, *, antennas: Sequence[int] | None = None,
               channels: tuple[int, int] | None = None) -> Iterator[Chunk]:
        """Chunks of every recorded spectrum in ``[t0, t1)``, file antennas ``antennas`` (their
        order becomes the streams' order), recording channels ``channels = (first, stop)``.

        Each chunk holds at most ``layout.max_spectra`` spectra (the int32 bound of one call);
        a window that cuts a frame gives a chunk of the frame's part.
        """
        streams = self.stream_order(antennas)
        for i in range(len(self.runs)):
            yield from self._window_chunks(i, t0, t1, channels, streams)

    def _window_chunks(self, i: int, t0: int, t1: int, channels: tuple[int, int] | None,
                       streams: list[int] | None) -> Iterator[Chunk]:
        """:meth:`chunks` of run ``i`` alone (its layout for ``channels`` and ``streams``
        selected once and kept)."""
        run = self.runs[i]
        lo, hi = max(t0, run.time_tag), min(t1, run.end)
        if lo >= hi:
            return
        key = (i, channels, None if streams is None else tuple(streams))
        if key not in self._selected:
            self._selected[key] = self._select(run, channels, streams)
        layout, c0 = self._selected[key]
        if layout is not None:
            yield from self._run_chunks(run, layout, c0, lo - run.time_tag, hi - run.time_tag)

    @staticmethod
    def _select(run: Run, channels: tuple[int, int] | None,
                streams: list[int] | None) -> tuple[SampleLayout | None, int]:
        """The layout of ``run`` for recording channels ``channels`` and ``streams``, and its
        first channel (None: the run has none of the channels)."""
        layout, c0 = run.layout, run.chan0
        if channels is not None:
            a, b = max(channels[0], c0), min(channels[1], c0 + layout.nchan)
            if a >= b:
                return None, c0
            layout = layout.select(channels=range(a - c0, b - c0))
            c0 = a
        if streams is not None:
            layout = layout.select(streams=streams)
        return layout, c0

    def _run_chunks(self, run: Run, layout: SampleLayout, chan0: int, r0: int,
                    r1: int) -> Iterator[Chunk]:
        """Spectra ``[r0, r1)`` of ``run`` (relative to its first) as chunks."""
        n = layout.nspectra
        most = layout.max_spectra
        pieces: list[tuple[int, int, int, int]] = []  # (first frame, nframe, start, stop)
        f0, a = divmod(r0, n)
        f1, b = divmod(r1, n)
        if f0 == f1:
            pieces.append((f0, 1, a, b))
        else:
            if a:
                pieces.append((f0, 1, a, n))
                f0 += 1
            if f1 > f0:
                pieces.append((f0, f1 - f0, 0, n))
            if b:
                pieces.append((f1, 1, 0, b))
        for first, nframe, start, stop in pieces:
            if nframe > 1 and n <= most:  # whole frames, at most `most` spectra per call
                step = most // n
                for f in range(first, first + nframe, step):
                    k = min(step, first + nframe - f)
                    yield Chunk(self._buffer(run, f, k, layout), layout, k,
                                run.time_tag + f * n, chan0)
                continue
            for f in range(first, first + nframe):  # frame parts
                for s in range(start, stop, most):
                    e = min(s + most, stop)
                    part = layout if (s, e) == (0, n) else spectra_window(layout, s, e)
                    yield Chunk(self._buffer(run, f, 1, part), part, 1,
                                run.time_tag + f * n + s, chan0)

    def close(self) -> None:
        self._maps.clear()  # the memory maps close when their views are gone

    def __enter__(self) -> Recording:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _same_but_frame_bytes(a: SampleLayout, b: SampleLayout) -> bool:
    """Layouts equal but for ``frame_bytes`` (a run's stride), compared field by field rather
    than through two validated copies (~0.1 ms each at S = 256, per block of a recording)."""
    return a is b or all(getattr(a, f.name) == getattr(b, f.name)
                         for f in fields(a) if f.name != "frame_bytes")


def merge_runs(runs: list[Run]) -> list[Run]:
    """Join neighbouring single-frame runs of one file into longer runs where frames are
    equally spaced, consecutive in time and of one layout (fewer, longer correlation calls)."""
    out: list[Run] = []
    for r in runs:
        if out:
            p = out[-1]
            stride = int(r.offset - p.offset)
            same = (p.file == r.file and p.chan0 == r.chan0 and r.time_tag == p.end
                    and r.nframe == 1)
            if same and _same_but_frame_bytes(p.layout, r.layout):
                if p.nframe == 1 and stride >= p.layout.last_byte + 1:
                    out[-1] = Run(p.file, p.offset, p.layout.replace(frame_bytes=stride), 2,
                                  p.time_tag, p.chan0)
                    continue
                if p.nframe > 1 and stride == p.nframe * p.layout.frame_bytes:
                    out[-1] = Run(p.file, p.offset, p.layout, p.nframe + 1, p.time_tag,
                                  p.chan0)
                    continue
        out.append(r)
    return out
