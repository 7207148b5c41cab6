"""UVH5WriterBlock: integrated visibilities + valid counts -> UVH5 files
(docs/design.md, "UVH5 conventions").

A new file per sequence, and every ``dumps_per_file`` dumps if set. Files are named
``{prefix}{unix start time}.uvh5``, or ``filename`` for the first file when given (later ones
``obs.1.uvh5``, ``obs.2.uvh5``... for ``obs.uvh5``). An existing file is never overwritten
unless ``overwrite``: the block stops with FileExistsError, or with ``new_name_if_exists`` (a
service restarted on data it already wrote, e.g. a replayed recording) writes
``{prefix}{time}-1.uvh5``, ``-2``... up to ``-999``; past that, with ``on_write_error="skip"``,
the dump is a failed write (EEXIST) like any other below, and the next try has a later time.
``channels`` writes a subset of the channels (indices into the sequence's channels).
Each dump is one append + flush, so the file is valid after every dump (also after SIGKILL).
Dumps lost to an unguaranteed reader are written as no data (zeros, flagged, nsamples 0).
With a ``flags`` input (:mod:`~xengine_block.blocks.health`), read in lockstep with the dumps,
each dump's flags are written besides those of its missing data (nsamples as they are).

A dump that cannot be written (a full disk, a quota, an I/O error, a new file or the output
directory that cannot be created: any :class:`~xengine_block.outputs.errors.OutputWriteError`)
leaves the file with every dump completed before it (the UVH5 writer's crash guarantee). What
follows is the block's ``on_write_error``: ``"stop"`` (jobs: ``pipelines/fx.py``,
reprocessing) raises it and the pipeline stops with that one error; ``"skip"`` (the live
service, which must keep capturing, correlating and sending its SPEAD stream) counts the dump
as not written and carries on: one log line when the failures begin, then at most one attempt
per dump and per ``retry_s`` seconds to write again, each into a new file (dumps in between are
counted, not written); the first that succeeds ends the episode with one more log line.
Counters: :data:`WRITER_COUNTERS`.

The visibilities may also come in Bifrost correlate's matrix or the TCC order (our
``xengine_block.bifrost.correlate`` outputs, ``cf32`` or ``ci32``: :func:`~xengine_block.
visibility_orders.as_triangle`), without a valid-counts input (every spectrum counts).
"""

from __future__ import annotations

import errno
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..array import ArrayDescription
from ..geometry import Geometry
from ..integration import counts_per_channel
from ..outputs.errors import OutputWriteError
from ..outputs.site import site_info
from ..outputs.times import load_time_tables
from ..outputs.uvh5 import UVH5Writer
from ..runtime.pipeline import Block, MultiTransformBlock
from ..runtime.ring import Ring
from ..visibility_orders import TRIANGLE_ORDER, as_triangle, visibility_order
from .base import BlockLogic, common_frames, lost_frames_any
from .headers import channel_freqs, frame_start_unix, paired_inputs, require_keys

log = logging.getLogger(__name__)


#: Header keys the writer reads (docs/bifrost.md).
WRITER_KEYS = ("nspectra", "array", "geometry", "sync_time", "fs_hz", "freq0_hz", "chan_bw_hz",
               "nchan")
#: What a dump that cannot be written does (module docstring): stop the pipeline, or be
#: counted while the writer carries on and tries again into a new file.
ON_WRITE_ERROR = ("stop", "skip")
#: Every writer counter, declared once: name -> description (the service's metrics read them).
WRITER_COUNTERS: dict[str, str] = {
    "dumps_written": "dumps appended to UVH5 files",
    "dumps_not_written": "dumps that could not be written (full disk, quota, I/O error) and "
                         "were dropped; the files keep every dump written (on_write_error "
                         "'skip')",
    "write_failures": "episodes of failing writes, each logged once as it begins and once as "
                      "a new file takes a dump again",
}


#: Visibility file formats a writer block writes: name -> file suffix.
FILE_FORMATS = {"uvh5": ".uvh5", "ms": ".ms"}


def _writer_class(file_format: str) -> type:
    """The writer of a format (the Measurement Set's imported only when asked for: it needs
    python-casacore, the ``ms`` extra)."""
    if file_format == "ms":
        from ..outputs.ms import MSWriter

        return MSWriter
    return UVH5Writer


class UVH5WriterLogic(BlockLogic):
    """Sink of (visibilities, valid counts) writing UVH5 files into ``directory`` (made, if
    missing, as each file is opened); ``on_write_error`` and ``retry_s``: what a dump that
    cannot be written does (module docstring). ``file_format="ms"`` writes Measurement Sets
    instead (``NAME.ms``, :mod:`~xengine_block.outputs.ms`), phased to ``phase_centre``
    (``zenith`` or ``RA,DEC`` in degrees)."""

    def __init__(self, vis: Block | Ring, valid: Block | Ring | None = None, *,
                 flags: Block | Ring | None = None,
                 directory: str | Path, prefix: str = "xengine_", dumps_per_file: int | None = None,
                 overwrite: bool = False, new_name_if_exists: bool = False,
                 filename: str | Path | None = None,
                 channels: list[int] | None = None, on_write_error: str = "stop",
                 retry_s: float = 1.0, file_format: str = "uvh5",
                 phase_centre: str = "zenith", **kwargs: Any) -> None:
        inputs = paired_inputs(vis, valid, optional=True)
        if flags is not None:
            if len(inputs) < 2:
                raise ValueError("flags need the valid counts input too")
            inputs.append(flags.orings[0] if hasattr(flags, "orings") else flags)
        super().__init__(inputs, gulp_nframe=1, **kwargs)
        #: Whether a flags input (``blocks.health``) is read in lockstep with the dumps.
        self.has_flags = flags is not None
        self.orings = []
        if file_format not in FILE_FORMATS:
            raise ValueError(f"file_format must be one of {sorted(FILE_FORMATS)}, "
                             f"got {file_format!r}")
        self.file_format, self.suffix = file_format, FILE_FORMATS[file_format]
        self._writer_class = _writer_class(file_format)  # ImportError now, not at a dump
        self._writer_options: dict[str, Any] = {}
        if file_format == "ms":
            from ..outputs.phasing import PhaseCentre

            self._writer_options["phase_centre"] = PhaseCentre.parse(phase_centre)
        if dumps_per_file is not None and dumps_per_file < 1:
            raise ValueError(f"dumps_per_file must be >= 1, got {dumps_per_file}")
        if on_write_error not in ON_WRITE_ERROR:
            raise ValueError(f"on_write_error must be one of {ON_WRITE_ERROR}, "
                             f"got {on_write_error!r}")
        self.on_write_error, self.retry_s = on_write_error, retry_s
        self.directory = Path(directory)
        self.prefix, self.dumps_per_file, self.overwrite = prefix, dumps_per_file, overwrite
        self.new_name_if_exists = new_name_if_exists
        self.filename = Path(filename) if filename is not None else None
        self.channels = None if channels is None else np.asarray(channels, np.intp)
        self.files: list[Path] = []
        self.dumps_written = self.dumps_not_written = self.write_failures = 0
        #: The error that began the current episode of failing writes (None: writing).
        self.write_error: OutputWriteError | None = None
        self._retry_at = 0.0  # monotonic time of the next attempt while failing
        self._failed_from = 0  # dumps_not_written when the episode began
        self._writer: Any = None  # UVH5Writer or MSWriter
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
        return []

    def define_output_nframes(self, input_nframes: list[int]) -> list[int]:
        return []

    def _open(self, time_tag: int) -> Any:
        start = frame_start_unix(self.hdr, time_tag)
        if self.filename is None:
            stem = f"{self.prefix}{start:.3f}"
            names = [f"{stem}{self.suffix}"] + (
                [f"{stem}-{n}{self.suffix}" for n in range(1, 1000)]
                if self.new_name_if_exists else [])
        else:  # later files: obs.uvh5 -> obs.1.uvh5 (the suffix stays last: pyuvdata reads it)
            n = len(self.files)
            names = [f"{self.filename.stem}.{n}{self.filename.suffix}" if n
                     else self.filename.name]
        history = (f"xengine_block: backend {self.hdr.get('xengine_backend')}, "
                   f"{self.nspectra} spectra per dump, sequence {self.hdr.get('name')}")
        if self.has_flags:
            history += ("; flags from input health and RFI (docs/flagging.md): the inputs "
                        "flagged and why are in the log and the metrics")
        try:  # for every file: a directory that cannot be made yet is a failed write too
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OutputWriteError.caused_by(exc, self.directory, None) from exc
        for i, name in enumerate(names):
            path = self.directory / name
            try:
                writer = self._writer_class(
                    path, self.site, self.freqs, self.hdr["chan_bw_hz"], self.nspectra,
                    sample_bits=self.geometry.sample_bits, float_visdata=self.float_vis,
                    overwrite=self.overwrite,
                    instrument=self.hdr.get("instrument", "xengine_block"), history=history,
                    **self._writer_options)
            except FileExistsError as exc:
                if i + 1 < len(names):
                    continue
                if self.on_write_error == "skip":  # every name taken: a failed write too
                    taken = (f"{names[0]} and the {len(names) - 1} numbered names after it "
                             "exist" if len(names) > 1 else f"{names[0]} exists")
                    raise OutputWriteError(errno.EEXIST, taken, str(path), None) from exc
                raise
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
            vis = self._triangle(vis_in[f - ispans[0].frame_offset])
            valid = self._valid(ispans, f)
            flags = (self.array(ispans[2])[f - ispans[2].frame_offset].view(bool)
                     if self.has_flags else None)
            if not self.guarantee:  # copy, then check the writer did not come back meanwhile
                vis, valid = vis.copy(), valid.copy()
                flags = None if flags is None else flags.copy()
                if self.overwritten(ispans):
                    vis, valid = np.zeros_like(vis), np.zeros_like(valid)
                    self.lost_frames += 1
                    self.nodata_outputs += 1
            if valid.shape[0] > 1:  # per channel group -> per channel
                valid = counts_per_channel(valid, self.geometry)
            if self.channels is not None:
                vis = vis[self.channels]
                valid = valid[self.channels] if valid.shape[0] > 1 else valid
                flags = None if flags is None else flags[self.channels]
            self._write(vis, valid, time_tag, flags)
        return []

    def on_skip(self, lost: list[slice], ospans: list) -> list[int]:
        """Lost dumps are written as no data, so the file's times stay complete."""
        for frame in lost_frames_any(lost):
            if frame < self._next:  # already written (lost on another input too)
                continue
            self._next = frame + 1
            vis = np.zeros((self.freqs.size, self.geometry.nbaseline, 2), np.int64)
            valid = np.zeros((self.freqs.size, self.geometry.nbaseline), np.int64)
            self._write(vis, valid, self.t0 + frame * self.nspectra)
            self.nodata_outputs += 1
        return []

    def _write(self, vis: np.ndarray, valid: np.ndarray, time_tag: int,
               flags: np.ndarray | None = None) -> None:
        """Append one dump (``flags``: besides missing data, ``[C, nbl]``), into a new file if
        none is open; a write that fails is ``on_write_error``'s (module docstring)."""
        if self.write_error is not None and time.monotonic() < self._retry_at:
            self.dumps_not_written += 1  # failing: not yet time to try again
            return
        try:
            if self._writer is None:
                self._writer = self._open(time_tag)
            self._writer.append(vis, valid, self.nspectra, frame_start_unix(self.hdr, time_tag),
                                self.nspectra / self.hdr["fs_hz"], flags=flags)
        except OutputWriteError as exc:
            self._failed(exc)
            self.dumps_not_written += 1
            return
        self.dumps_written += 1
        if self.write_error is not None:
            log.warning("%s: writing again, into %s, after %d dumps not written (%s)",
                        self.name, self._writer.path, self.dumps_not_written - self._failed_from,
                        self.write_error.errno_symbol)
            self.write_error = None
        if self.dumps_per_file and self._writer.ndump >= self.dumps_per_file:
            self._close()

    def _failed(self, exc: OutputWriteError) -> None:
        """A write failed: raise it (``"stop"``), or drop the file (it keeps every dump
        completed before) and go on failing until ``retry_s`` from now (``"skip"``)."""
        if self.on_write_error == "stop":
            raise exc
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()  # after a failure: closed without writing anything more
        if exc.ndump is None and self.files and str(self.files[-1]) == exc.filename:
            self.files.pop()  # removed: no dump of it was complete
        self._retry_at = time.monotonic() + self.retry_s
        if self.write_error is None:
            self.write_error, self._failed_from = exc, self.dumps_not_written
            self.write_failures += 1
            log.error("%s: %s; dumps are counted, not written, until a new file takes one "
                      "(tried at most every %g s)", self.name, exc, self.retry_s)

    def writer_counters(self) -> dict[str, int]:
        """The :data:`WRITER_COUNTERS` (safe to read while running)."""
        return {name: getattr(self, name) for name in WRITER_COUNTERS}

    def _close(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            try:
                writer.close()
            except OutputWriteError as exc:  # its last bytes: the file keeps its dumps
                self._failed(exc)

    def on_sequence_end(self, iseqs: list) -> None:
        self._close()


class UVH5WriterBlock(UVH5WriterLogic, MultiTransformBlock):
    __doc__ = UVH5WriterLogic.__doc__
