"""A recording as a pipeline source block: its frames into a data ring (plus a presence-mask
ring), with the header contract the X-engine reads (docs/bifrost.md, "Header contract"), so the
readers feed the same X-engine -> integrate -> UVH5 writer chain as a live capture, in our
runtime (:class:`RecordingSource`) and in real Bifrost
(:class:`~xengine_block.bifrost.recording_source.RecordingSource`).

Each ring frame is one frame of the recording (a GUPPI block's samples, a DADA spectrum or
FBFUSE heap, a VDIF frameset, an MWAX block of every coarse channel), its bytes as in the file
(``_tensor`` ``u8 [-1, nbyte]``; VDIF's converted to two's complement), described by the header's
``sample_layout`` with the streams in the array's order. Frames the recording lacks (missing
blocks) are zeros with a mask of 0, so every baseline's valid count is exact. What the pipeline
path cannot do that ``xengine reprocess`` does: integrate other than whole frames (the X-engine's
granularity), and keep a PUPPI recording's last overlap (every frame has one layout).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ..array import ArrayDescription
from ..runtime.pipeline import SourceBlock
from ..sample_layout import SampleLayout
from .arrays import match_antennas
from .base import Recording, RecordingError


def frame_layout(rec: Recording) -> SampleLayout:
    """The layout of one ring frame (file stream order): the recording's frames' shared
    layout, ``frame_bytes`` the bytes a frame's samples span. RecordingError if frames differ
    beyond a last frame with more spectra (a PUPPI last block's overlap, left out)."""
    ref = rec.runs[0].layout
    key = ref.replace(frame_bytes=1 << 62, nspectra=1)
    for run in rec.runs:
        if run.layout.replace(frame_bytes=1 << 62, nspectra=1) != key or (
                run.layout.nspectra < ref.nspectra):
            raise RecordingError(f"{rec.files[0]}: its frames do not share one layout (a "
                                 f"pipeline source needs regular frames; xengine reprocess "
                                 f"reads it)")
    if len({r.chan0 for r in rec.runs}) > 1:  # MWAX: a frame holds every coarse channel
        if ref.nchan != 1 or len({r.chan0 for r in rec.runs}) != len(rec.files):
            raise RecordingError(f"{rec.files[0]}: its channels lie in frames of their own "
                                 f"(LWA TBF/TBX): a pipeline source needs a time's channels "
                                 f"in one frame or one file each; xengine reprocess reads it")
        block = ref.last_byte + 1
        nfile = len(rec.files)
        return ref.replace(nchan=nfile, chan_stride=block, frame_bytes=nfile * block)
    return ref.replace(frame_bytes=ref.last_byte + 1)


def ring_frames(rec: Recording, layout: SampleLayout) -> Iterator[tuple[int, list[np.ndarray]]]:
    """(time_tag, the byte pieces of one ring frame) for every recorded frame, in time order;
    the pieces of one frame are its coarse-channel files' (MWAX), else one."""
    per_chan = len({r.chan0 for r in rec.runs})
    pending: dict[int, list] = {}
    for run in sorted(rec.runs, key=lambda r: (r.time_tag, r.chan0)):
        part = run.layout.replace(nspectra=layout.nspectra)  # a PUPPI last block: no overlap
        for f in range(run.nframe):
            t = run.time_tag + f * run.layout.nspectra
            piece = rec._buffer(run, f, 1, part)
            if per_chan == 1:
                yield t, [piece]
                continue
            got = pending.setdefault(t, [None] * per_chan)
            got[run.chan0] = piece
            if all(p is not None for p in got):
                yield t, pending.pop(t)


class RecordingSource(SourceBlock):
    """Source block of recordings: ``orings[0]`` frames (``u8 [-1, nbyte]``), ``orings[1]``
    presence mask ``u8 [-1, S]``; one sequence per recording.

    Parameters
    ----------
    recordings : :class:`~xengine_block.readers.base.Recording` s (opened by the caller).
    array : the array file's description (``readers.arrays.load_array``), or None for a
        single-antenna recording of a telescope pyuvdata knows.
    gulp_nframe : frames per gulp.
    """

    def __init__(self, recordings: Sequence[Recording], *, array: ArrayDescription | None = None,
                 gulp_nframe: int = 1, **kwargs: Any) -> None:
        self.recordings = list(recordings)
        self.array = array
        self.plans = [self._plan(r) for r in self.recordings]  # refuse before any work
        super().__init__(list(range(len(self.recordings))), gulp_nframe, **kwargs)
        self.orings = [self.create_ring(space="system") for _ in range(2)]
        self.frames_written = 0
        self.gap_frames = 0

    def _plan(self, rec: Recording) -> tuple[ArrayDescription, SampleLayout, SampleLayout]:
        sub, antennas = match_antennas(rec.meta, self.array, f"{rec.files[0]}: ")
        file_layout = frame_layout(rec)
        off_grid = [r for r in rec.runs if (r.time_tag - rec.start) % file_layout.nspectra]
        if off_grid:
            raise RecordingError(f"{rec.files[0]}: a gap of part of a frame before spectrum "
                                 f"{off_grid[0].time_tag} (a pipeline source fills whole "
                                 f"frames; xengine reprocess reads it)")
        return sub, file_layout, file_layout.select(streams=rec.stream_order(antennas))

    def headers(self, i: int) -> list[dict[str, Any]]:
        """The (data, mask) sequence headers of recording ``i`` (the header contract)."""
        rec = self.recordings[i]
        sub, file_layout, layout = self.plans[i]
        m = rec.meta
        tscale = [m.sync_time + rec.start / m.fs_hz, layout.nspectra / m.fs_hz]
        common = {"time_tag": rec.start, "sync_time": m.sync_time, "fs_hz": m.fs_hz,
                  "chan0": m.chan0, "nchan": layout.nchan, "freq0_hz": m.freq0_hz,
                  "chan_bw_hz": m.chan_bw_hz, "array": sub.to_dict(),
                  "nstream": layout.nstream, "instrument": sub.instrument,
                  "recording": {"format": m.format, "files": [str(f) for f in rec.files]}}
        name = f"{rec.format}-{rec.files[0].name}"
        data = dict(common, name=name, sample_layout=layout.to_dict(), _tensor={
            "dtype": "u8", "shape": [-1, file_layout.frame_bytes], "labels": ["time", "byte"],
            "scales": [tscale, None], "units": ["s", None]})
        mask = dict(common, name=f"{name}.mask", _tensor={
            "dtype": "u8", "shape": [-1, layout.nstream], "labels": ["time", "stream"],
            "scales": [tscale, None], "units": ["s", None]})
        return [data, mask]

    def create_reader(self, i: int) -> Any:
        _, file_layout, _ = self.plans[i]
        frames = ring_frames(self.recordings[i], file_layout)
        return {"i": i, "frames": frames, "next": self.recordings[i].start,
                "pending": next(frames, None), "step": file_layout.nspectra}

    def on_sequence(self, reader: dict, sourcename: Any) -> list[dict[str, Any]]:
        return self.headers(reader["i"])

    def on_data(self, reader: dict, ospans: list) -> list[int]:
        """Copy frames (zeros with mask 0 where the recording has none) until the gulp is
        full or the recording ends."""
        data, mask = ospans[0].data, ospans[1].data
        n = 0
        while n < ospans[0].nframe and reader["pending"] is not None:
            t, pieces = reader["pending"]
            row = data[n].reshape(-1).view(np.uint8)
            if t > reader["next"]:  # a missing frame
                row[:] = 0
                mask[n] = 0
                self.gap_frames += 1
            else:
                pos = 0
                for p in pieces:
                    row[pos:pos + p.size] = p
                    pos += p.size
                row[pos:] = 0
                mask[n] = 1
                reader["pending"] = next(reader["frames"], None)
            reader["next"] += reader["step"]
            n += 1
        self.frames_written += n
        return [n, n]
