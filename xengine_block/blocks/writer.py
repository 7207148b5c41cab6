"""UVH5WriterBlock: integrated visibilities + valid counts -> UVH5 files
(docs/design.md, "UVH5 conventions").

A new file per sequence, and every ``dumps_per_file`` dumps if set. Files are named
``{prefix}{unix start time}.uvh5``, or ``filename`` for the first file when given (later ones
``obs.1.uvh5``, ``obs.2.uvh5``... for ``obs.uvh5``). An existing file is never overwritten
unless ``overwrite``: the block stops with FileExistsError, or with ``new_name_if_exists`` (a
service restarted on data it already wrote, e.g. a replayed recording) writes
``{prefix}{time}-1.uvh5``, ``-2``...
``channels`` writes a subset of the channels (indices into the sequence's channels).
Each dump is one append + flush, so the file is valid after every dump (also after SIGKILL).
Dumps lost to an unguaranteed reader are written as no data (zeros, flagged, nsamples 0).

The visibilities may also come in Bifrost correlate's matrix or the TCC order (our
``xengine_block.bifrost.correlate`` outputs, ``cf32`` or ``ci32``: :func:`~xengine_block.
visibility_orders.as_triangle`), without a valid-counts input (every spectrum counts).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from ..array import ArrayDescription
from ..geometry import Geometry
from ..integration import counts_per_channel
from ..outputs.uvh5 import SiteInfo, UVH5Writer, load_time_tables
from ..runtime.pipeline import Block, MultiTransformBlock
from ..runtime.ring import Ring
from ..visibility_orders import TRIANGLE_ORDER, as_triangle, visibility_order
from .base import BlockLogic, common_frames, lost_frames_any
from .headers import channel_freqs, frame_start_unix, paired_inputs, require_keys

log = logging.getLogger(__name__)


def site_info(array: ArrayDescription) -> SiteInfo:
    """What the UVH5 writer needs of an array description."""
    return SiteInfo(array.telescope_name, array.latitude_deg, array.longitude_deg,
                    array.altitude_m, list(array.antenna_names),
                    np.asarray(array.antenna_numbers), array.antenna_positions, array.enu_m)


#: Header keys the writer reads (docs/bifrost.md).
WRITER_KEYS = ("nspectra", "array", "geometry", "sync_time", "fs_hz", "freq0_hz", "chan_bw_hz",
               "nchan")


class UVH5WriterLogic(BlockLogic):
    """Sink of (visibilities, valid counts) writing UVH5 files into ``directory``."""

    def __init__(self, vis: Block | Ring, valid: Block | Ring | None = None, *,
                 directory: str | Path, prefix: str = "xengine_", dumps_per_file: int | None = None,
                 overwrite: bool = False, new_name_if_exists: bool = False,
                 filename: str | Path | None = None,
                 channels: list[int] | None = None, **kwargs: Any) -> None:
        super().__init__(paired_inputs(vis, valid, optional=True), gulp_nframe=1, **kwargs)
        self.orings = []
        if dumps_per_file is not None and dumps_per_file < 1:
            raise ValueError(f"dumps_per_file must be >= 1, got {dumps_per_file}")
        self.directory = Path(directory)
        self.prefix, self.dumps_per_file, self.overwrite = prefix, dumps_per_file, overwrite
        self.new_name_if_exists = new_name_if_exists
        self.filename = Path(filename) if filename is not None else None
        self.channels = None if channels is None else np.asarray(channels, np.intp)
        self.files: list[Path] = []
        self.dumps_written = 0
        self._writer: UVH5Writer | None = None
        load_time_tables()

    def on_sequence(self, iseqs: list) -> list[dict[str, Any]]:
        self.hdr = iseqs[0].header
        require_keys(self.hdr, WRITER_KEYS, self.name)
        self.t0 = iseqs[0].time_tag
        self._next = 0  # next dump to write (those before it were written or lost)
        self.nspectra = int(self.hdr["nspectra"])
        self.site = site_info(ArrayDescription.from_dict(self.hdr["array"]))
        if self.site.nant * 2 != self.hdr["geometry"]["nstream"]:
            raise ValueError(f"array has {self.site.nant} antennas but the data "
                             f"{self.hdr['geometry']['nstream']} streams (2 per antenna)")
        self.freqs = channel_freqs(self.hdr)
        self.geometry = Geometry.from_dict(self.hdr["geometry"])
        self.order = visibility_order(self.hdr)
        self.float_vis = self.hdr["_tensor"]["dtype"].startswith("cf")
        if self.order != TRIANGLE_ORDER:
            log.info("%s: visibilities in the %s order%s", self.name, self.order,
                     "" if len(iseqs) > 1 else ", no valid counts: every spectrum counts")
        if self.channels is not None:
            bad = self.channels[(self.channels < 0) | (self.channels >= self.freqs.size)]
            if bad.size:
                raise ValueError(f"channels {bad.tolist()} are outside the sequence's "
                                 f"{self.freqs.size} channels")
            self.freqs = self.freqs[self.channels]
        self.directory.mkdir(parents=True, exist_ok=True)
        return []

    def define_output_nframes(self, input_nframes: list[int]) -> list[int]:
        return []

    def _open(self, time_tag: int) -> UVH5Writer:
        start = frame_start_unix(self.hdr, time_tag)
        if self.filename is None:
            stem = f"{self.prefix}{start:.3f}"
            names = [f"{stem}.uvh5"] + ([f"{stem}-{n}.uvh5" for n in range(1, 1000)]
                                        if self.new_name_if_exists else [])
        else:  # later files: obs.uvh5 -> obs.1.uvh5 (the suffix stays last: pyuvdata reads it)
            n = len(self.files)
            names = [f"{self.filename.stem}.{n}{self.filename.suffix}" if n
                     else self.filename.name]
        history = (f"xengine_block: backend {self.hdr.get('xengine_backend')}, "
                   f"{self.nspectra} spectra per dump, sequence {self.hdr.get('name')}")
        for i, name in enumerate(names):
            path = self.directory / name
            try:
                writer = UVH5Writer(path, self.site, self.freqs, self.hdr["chan_bw_hz"],
                                    self.nspectra, sample_bits=self.geometry.sample_bits,
                                    float_visdata=self.float_vis, overwrite=self.overwrite,
                                    instrument=self.hdr.get("instrument", "xengine_block"),
                                    history=history)
            except FileExistsError:
                if i + 1 == len(names):
                    raise
                continue
            break
        self.files.append(path)
        log.info("%s: writing %s", self.name, path)
        return writer

    def _valid(self, ispans: list, f: int) -> np.ndarray:
        """Valid counts of frame ``f``: its input, or every spectrum without one."""
        if len(ispans) < 2:
            return np.full((1, self.geometry.nbaseline), self.nspectra, np.int64)
        return self.array(ispans[1])[f - ispans[1].frame_offset]

    def _triangle(self, vis: np.ndarray) -> np.ndarray:
        """A frame in our triangle order, ``[C, nbl, 2]`` (float64 pairs for float input)."""
        tri = as_triangle(vis, self.hdr)
        if np.iscomplexobj(tri):
            tri = np.stack([tri.real, tri.imag], axis=-1).astype(np.float64)
        return tri

    def on_data(self, ispans: list, ospans: list) -> list[int]:
        vis_in = self.array(ispans[0])
        lo, hi = common_frames(ispans)  # lockstep inputs overtaken apart: lost, not mixed
        for f in range(max(lo, self._next), hi):
            self._next = f + 1
            time_tag = self.t0 + f * self.nspectra
            if self._writer is None:
                self._writer = self._open(time_tag)
            vis = self._triangle(vis_in[f - ispans[0].frame_offset])
            valid = self._valid(ispans, f)
            if not self.guarantee:  # copy, then check the writer did not come back meanwhile
                vis, valid = vis.copy(), valid.copy()
                if self.overwritten(ispans):
                    vis, valid = np.zeros_like(vis), np.zeros_like(valid)
                    self.lost_frames += 1
                    self.nodata_outputs += 1
            if valid.shape[0] > 1:  # per channel group -> per channel
                valid = counts_per_channel(valid, self.geometry)
            if self.channels is not None:
                vis = vis[self.channels]
                valid = valid[self.channels] if valid.shape[0] > 1 else valid
            self._writer.append(vis, valid, self.nspectra,
                                frame_start_unix(self.hdr, time_tag),
                                self.nspectra / self.hdr["fs_hz"])
            self.dumps_written += 1
            if self.dumps_per_file and self._writer.ndump >= self.dumps_per_file:
                self._close()
        return []

    def on_skip(self, lost: list[slice], ospans: list) -> list[int]:
        """Lost dumps are written as no data, so the file's times stay complete."""
        for frame in lost_frames_any(lost):
            if frame < self._next:  # already written (lost on another input too)
                continue
            self._next = frame + 1
            time_tag = self.t0 + frame * self.nspectra
            if self._writer is None:
                self._writer = self._open(time_tag)
            vis = np.zeros((self.freqs.size, self.geometry.nbaseline, 2), np.int64)
            valid = np.zeros((self.freqs.size, self.geometry.nbaseline), np.int64)
            self._writer.append(vis, valid, self.nspectra, frame_start_unix(self.hdr, time_tag),
                                self.nspectra / self.hdr["fs_hz"])
            self.dumps_written += 1
            self.nodata_outputs += 1
            if self.dumps_per_file and self._writer.ndump >= self.dumps_per_file:
                self._close()
        return []

    def _close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def on_sequence_end(self, iseqs: list) -> None:
        self._close()


class UVH5WriterBlock(UVH5WriterLogic, MultiTransformBlock):
    __doc__ = UVH5WriterLogic.__doc__
