"""UVH5 visibility files (pyuvdata's HDF5 format), written with h5py
(docs/design.md, "UVH5 conventions").

Conventions, written down once:

- Baseline order, polarisations and conjugation are every writer's:
  :mod:`xengine_block.outputs.baselines` (the stored visibility is ``conj(x[ant_1]) x[ant_2]``,
  ``ant_1 <= ant_2`` by antenna number); time and LST: :mod:`xengine_block.outputs.times`.
- A negative channel width is a band whose channels run from high to low frequency: a
  spectrally inverted (lower-sideband) band, whose complex samples carry the conjugate of the
  sky's phase (rawspec conjugates such GUPPI input: ``input_conjugated = obsbw < 0``). The
  frequency axis is written as recorded (``freq_array`` descending, ``channel_width``
  negative) and the visibilities are conjugated, so the file holds ``conj(x[ant_1]) x[ant_2]``
  of the sky signal like any other (tests/reprocess/test_physics.py phases a point source).
- Phase centre "unprojected" (zenith drift): uvw = ENU(ant_2) - ENU(ant_1), metres.

Streaming: every per-baseline-time dataset is resizable; each dump is one append followed by an
update of Nblts/Ntimes and a flush. Datasets whose chunks repeat from dump to dump (flags and
nsamples while every baseline has the same counts, the antenna numbers, ...: :data:`REPEATED`)
are deflated, each distinct chunk compressed once; the rest is stored as it is. A dataset whose
rows in a dump are all one constant (:func:`constant_columns`; flags and nsamples of a dump
without missing spectra) stores no chunk for it: the constant is the dataset's fill value,
which HDF5 reads for rows no chunk holds. HDF5 writes through h5py's ``fileobj`` driver into
:class:`~xengine_block.outputs.staged_file.StagedFile`, which keeps one dump's writes in memory
and puts them on disk after HDF5's flush (``commit``).

Crash guarantee: a writer killed at any moment (SIGKILL, the OOM killer: the kernel keeps what
the process wrote) leaves a file that pyuvdata reads, with its default checks, holding every dump
whose ``append`` returned and at most the one being appended, complete and never in part. Killed
before its first dump is complete, the file opens with h5py with no dump (Nblts 0), or, killed
while the constructor writes it, may not open at all. Power loss or a kernel crash is not covered
(nothing is fsync'ed). Why it holds: the staged file's commit orders its system calls so that
the file between any two of them reads as the old one or the new one
(:mod:`xengine_block.outputs.staged_file` lists them); the dump is published by one write of
the object headers HDF5 wrote at creation (the resizable datasets' extents, and Nblts/Ntimes:
compact datasets whose values live in their object headers), a direct write where the
filesystem has one. A writer made with ``kill_safe=False`` (reprocessing's ``.partial`` files,
which a rerun removes) makes it buffered (~15 % less CPU per append).

``tests/outputs/test_uvh5.py`` reads the file after every system call of a commit (the staged
file's docstring says how). The file format is HDF5's earliest, whose superblock has no "open
for write" mark.

Write failures (full disk, quota, EIO): HDF5 never sees them. The staged file's commit puts
the file back as it was after the previous dump when a write fails, and
:meth:`UVH5Writer.append` raises :class:`~xengine_block.outputs.errors.OutputWriteError` (file,
errno). Letting HDF5 see the error instead loses it (h5py ignores errors of ids closed in
``__dealloc__``, leaving rows of zeros and counters ahead of the data) and leaves half-closed
dataset ids that HDF5's exit handler closes again: a segfault at exit.
"""

from __future__ import annotations

import atexit
import errno
import functools
import math
import os
import weakref
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from .._moved import moved_names
from .baselines import (
    POLARIZATIONS,
    DumpRows,
    baseline_map,
    checked_dump,
    count_rows,
    flagged_baselines,
    uniform_counts,
    visdata_dtype,
)
from .errors import OutputWriteError
from .site import SiteInfo
from .staged_file import StagedFile
from .times import LstClock, unix_to_jd

#: Old paths, for one more release: the error type every visibility writer shares (renamed),
#: and names of the roles now in modules of their own (the same names there).
__getattr__ = moved_names(__name__, {
    "BaselineMap": "xengine_block.outputs.baselines",
    "load_time_tables": "xengine_block.outputs.times",
    "LST_ANCHOR_S": "xengine_block.outputs.times",
    "SIDEREAL_RAD_PER_S": "xengine_block.outputs.times",
}, {"UVH5WriteError": "OutputWriteError"}, globals())

UVH5_VERSION = "1.2"

#: Per-baseline-time datasets in /Header, their trailing shapes and dtypes.
_BLT_HEADER = {
    "time_array": ((), np.float64),
    "lst_array": ((), np.float64),
    "integration_time": ((), np.float64),
    "ant_1_array": ((), np.int64),
    "ant_2_array": ((), np.int64),
    "uvw_array": ((3,), np.float64),
    "phase_center_id_array": ((), np.int64),
    "phase_center_app_ra": ((), np.float64),
    "phase_center_app_dec": ((), np.float64),
    "phase_center_frame_pa": ((), np.float64),
}

#: Largest chunk of the /Data datasets, bytes (rows of Nfreqs x Npols); tests make it small.
DATA_CHUNK_BYTES = 1 << 20
#: Baseline-time datasets whose chunk (a dump) is the same in every dump of a file
#: (``integration_time``: while the dumps' length is), and, where dumps are whole chunks of
#: theirs, ``flags`` and ``nsamples`` (the same while no baseline lacks what others have):
#: deflated, a chunk compressed when it differs from the dataset's last one and its bytes
#: written again while it does not (a third of a dump's bytes at S = 256 x 8 channels, and the
#: row pass's counts; any HDF5 reader inflates them). flags and nsamples of counts that vary by
#: baseline are stored unfiltered.
REPEATED = ("integration_time", "ant_1_array", "ant_2_array", "flags", "nsamples")
#: flags and nsamples of a dump in which every baseline has every spectrum (the usual dump):
#: their fill values (:func:`constant_columns`).
FULL_COUNTS = {"flags": False, "nsamples": 1.0}

#: Rows a dump writes from buffers the writer keeps (the row pass's, the baselines' uvw, the
#: columns of one value a dump): the staged file holds views of them until the commit
#: instead of copies.
_LENT = ("visdata", "flags", "nsamples", "uvw_array", "time_array", "lst_array",
         "phase_center_app_ra")
#: zlib level of the repeated chunks (HDF5's deflate filter; level 1 packs them as well).
REPEAT_DEFLATE = 1


def constant_columns(latitude_deg: float) -> dict[str, float]:
    """The baseline-time datasets that hold one value in every row of a file at this site (the
    unprojected phase centre's id, apparent declination and frame angle), with that value.

    It is each dataset's HDF5 fill value, and a dump stores no chunk of them, only the
    datasets' new extents (HDF5 reads rows no chunk holds as the fill value; every reader
    does); so too flags and nsamples of a dump with every spectrum (:data:`FULL_COUNTS`). What
    they cost was a chunk written and indexed each per dump and the compression of flags and
    nsamples' first chunks per file."""
    return {"phase_center_id_array": 0, "phase_center_app_dec": float(np.deg2rad(latitude_deg)),
            "phase_center_frame_pa": 0.0}



def data_chunk_rows(nbls: int, row_bytes: int) -> int:
    """Rows of a ``/Data`` chunk: at most :data:`DATA_CHUNK_BYTES`, and where it costs less
    than a factor of 4 in size, a divisor of ``nbls``, so that every dump is whole chunks of
    its own (:func:`_append_chunks`)."""
    most = max(1, min(nbls, DATA_CHUNK_BYTES // max(1, row_bytes)))
    # the largest divisor of nbls within `most`: divisors come in pairs (k, nbls // k), k up
    # to the square root (a loop over every k up to nbls was 2 ms of a writer at S = 512)
    whole = max((d for k in range(1, math.isqrt(nbls) + 1) if nbls % k == 0
                 for d in (k, nbls // k) if d <= most), default=1)
    return whole if whole * 4 >= most else most


def _append_chunks(dsid: h5py.h5d.DatasetID, step: int, n0: int,
                   rows: np.ndarray | tuple[int, ...], blob: bytes | None = None,
                   filter_mask: int = 0, lend: StagedFile | None = None) -> None:
    """Grow the dataset ``dsid`` (chunks of ``step`` rows) and write ``rows`` at ``n0`` as
    whole chunks of their own, handed to HDF5 as they lie in memory (``write_direct_chunk``:
    no selection, no pass through HDF5's chunk cache; the rows are the dataset's own type, so
    the bytes are those a hyperslab write stores; ``filter_mask`` 1: stored unfiltered in a
    deflated dataset). ``blob``: the one chunk every chunk of these rows is, already deflated
    (``rows`` then is their shape). ``lend``: the staged file keeps views of ``rows``
    (C-contiguous rows the caller keeps unchanged until the commit, :meth:`StagedFile.lend`).
    ``n0`` and ``len(rows)`` are multiples of the chunk."""
    shape = rows if isinstance(rows, tuple) else rows.shape
    dsid.set_extent((n0 + shape[0], *shape[1:]))
    zeros = (0,) * (len(shape) - 1)
    if blob is not None:
        for j in range(0, shape[0], step):
            dsid.write_direct_chunk((n0 + j, *zeros), blob)
        return
    lend = lend if rows.flags.c_contiguous else None  # else a copy: nothing to lend
    flat = np.ascontiguousarray(rows).reshape(rows.shape[0], -1).view(np.uint8)
    for j in range(0, rows.shape[0], step):
        part = flat[j:j + step]
        if lend is None:
            dsid.write_direct_chunk((n0 + j, *zeros), part, filter_mask=filter_mask)
            continue
        lend.lend(part)
        try:
            dsid.write_direct_chunk((n0 + j, *zeros), part, filter_mask=filter_mask)
        finally:
            lend.lend(None)


def _new_dataset(group: h5py.Group, name: str, value: Any,
                 chunks: tuple[int, ...] | None = None, fill: Any = None,
                 deflate: bool = False) -> h5py.h5d.DatasetID:
    """``group[name] = value`` (its type and shape; no timestamps, as h5py makes them), or
    with ``chunks`` an empty dataset of ``value``'s type and trailing shape that grows along
    its first axis (``fill``: its fill value; ``deflate``: :data:`REPEAT_DEFLATE`), through
    h5py's low-level calls: its high level cost ~70 us a dataset, a third of making a file."""
    arr = np.asarray(value)  # (np.ascontiguousarray would make a scalar one-dimensional)
    arr = arr if arr.flags.c_contiguous else arr.copy()
    tid = h5py.h5t.py_create(arr.dtype, logical=True)
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_obj_track_times(False)
    if chunks is None:
        space = (h5py.h5s.create(h5py.h5s.SCALAR) if arr.ndim == 0
                 else h5py.h5s.create_simple(arr.shape))
    else:
        space = h5py.h5s.create_simple(arr.shape, (h5py.h5s.UNLIMITED, *arr.shape[1:]))
        dcpl.set_chunk(chunks)
        if deflate:
            dcpl.set_deflate(REPEAT_DEFLATE)
        if fill is not None:
            dcpl.set_fill_value(np.array(fill, arr.dtype))
    dsid = h5py.h5d.create(group.id, name.encode(), tid, space, dcpl=dcpl)
    if chunks is None:
        dsid.write(h5py.h5s.ALL, h5py.h5s.ALL, arr, mtype=tid)
    return dsid

def _append_rows(dsid: h5py.h5d.DatasetID, n0: int, rows: np.ndarray) -> None:
    """Grow the dataset ``dsid`` to ``n0 + len(rows)`` rows and write ``rows`` at ``n0``,
    through h5py's low-level calls (its slicing costs about 0.3 ms of Python per call): for
    ``/Data`` chunks that straddle dumps, where :func:`_append_chunks` cannot serve."""
    dsid.set_extent((n0 + rows.shape[0], *rows.shape[1:]))
    fspace = dsid.get_space()
    fspace.select_hyperslab((n0,) + (0,) * (rows.ndim - 1), rows.shape)
    rows = np.ascontiguousarray(rows)
    dsid.write(h5py.h5s.create_simple(rows.shape), fspace, rows)



#: Writers still open at interpreter exit are closed first, without writing: HDF5's own exit
#: handler would otherwise call back into a finalised interpreter through the fileobj driver.
_open_writers: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _close_open_writers() -> None:
    for w in list(_open_writers):
        w.abandon()


class UVH5Writer:
    """Append-per-dump UVH5 writer.

    Parameters
    ----------
    path : output file; refused if it exists unless ``overwrite``.
    site : antennas and site.
    freq_hz : centre frequency of each channel; ``channel_width_hz`` their width (negative:
        an inverted band, whose dumps are conjugated; module docstring).
    max_spectra : largest number of spectra integrated in one dump; with ``sample_bits`` (the
        geometry's: 8 or 4) it chooses int32 or float64 visdata (:func:`visdata_dtype`).
    float_visdata : float64 visdata whatever the bound (float input, e.g. Bifrost's cf32).
    kill_safe : False gives up the guarantee against a kill while a dump is published (module
        docstring, step 4: the publishing write is then buffered, ~15 % less CPU per
        append): for files that a rerun removes if a kill leaves them (reprocessing's
        ``.partial`` outputs). Write errors are handled the same either way.

    Every failure to create or write the file raises :class:`OutputWriteError` (from the
    constructor, ``append`` or ``close``) and leaves the file as it was after the last
    successful append; a file without a complete dump is removed. After a failure the writer
    refuses further appends. An existing ``path`` without ``overwrite`` is no write failure
    but ``FileExistsError`` (a caller may choose another name).
    """

    def __init__(self, path: str | os.PathLike, site: SiteInfo, freq_hz: np.ndarray,
                 channel_width_hz: float, max_spectra: int, *, sample_bits: int = 8,
                 float_visdata: bool = False, overwrite: bool = False,
                 instrument: str = "xengine_block", history: str = "",
                 x_orientation: str = "east", kill_safe: bool = True) -> None:
        self.path = Path(path)
        self.site = site
        self.bmap = baseline_map(site.antenna_numbers)
        self.freq_hz = np.asarray(freq_hz, np.float64)
        #: Conjugate every dump: the band is spectrally inverted (module docstring).
        self.conjugate = channel_width_hz < 0
        self.ndump = 0
        self.error: Exception | None = None  # what stopped the writing, if anything
        self.vis_dtype = visdata_dtype(max_spectra, sample_bits, float_visdata)
        self._lst = LstClock(site.latitude_deg, site.longitude_deg, site.altitude_m)
        self._uvw = (site.enu[self.bmap.idx_2] - site.enu[self.bmap.idx_1]).astype(np.float64)
        #: Baselines flagged whatever their counts (a flagged antenna's), or None.
        self._flag_bls = flagged_baselines(self.bmap, site.flagged)
        self._rows = DumpRows(self.bmap, self.freq_hz.size, self.vis_dtype, self.conjugate)
        try:
            self._io = StagedFile(self.path, overwrite=overwrite, kill_safe=kill_safe)
        except FileExistsError:
            raise FileExistsError(f"{self.path} exists; refusing to overwrite it "
                                  f"(pass overwrite=True to replace it)") from None
        except OSError as exc:  # not created (EROFS, no inode left, quota, EIO): nothing to undo
            raise OutputWriteError.caused_by(exc, self.path, None) from exc
        self._file: h5py.File | None = None
        _open_writers.add(self)
        try:
            # Default (earliest) file format on purpose: newer superblocks mark the file "open
            # for write" and a crashed writer would leave it unreadable without h5clear.
            self._file = h5py.File(self._io, "w")
            cfg = self._file.id.get_mdc_config()
            cfg.incr_mode = cfg.decr_mode = cfg.flash_incr_mode = 0  # required to stop evictions
            cfg.evictions_enabled = False
            self._file.id.set_mdc_config(cfg)
            self._create(channel_width_hz, instrument, history, x_orientation)
            self._commit()
            # Every object header (extents, counters) is in the file by now; what a dump later
            # changes there is published by one write (StagedFile._in_place).
            self._io.set_atomic_below(self._io.size)
        except BaseException as exc:
            self.abandon()
            self.path.unlink(missing_ok=True)  # nothing of it was ever complete
            if isinstance(exc, OSError):
                raise OutputWriteError.caused_by(exc, self.path, None) from exc
            raise

    # ------------------------------------------------------------------ layout
    def _create(self, channel_width_hz: float, instrument: str, history: str,
                x_orientation: str) -> None:
        s, h = self.site, self._file.create_group("Header")
        nfreq, npol, nbls = self.freq_hz.size, len(POLARIZATIONS), self.bmap.nbls

        def text(value: str) -> np.bytes_:
            return np.bytes_(value.encode("ascii", "replace"))

        for name, value in (
                ("version", text(UVH5_VERSION)),
                ("telescope_name", text(s.telescope_name)),
                ("instrument", text(instrument)),
                ("history", text(history or "Written by xengine_block.")),
                ("vis_units", text("uncalib")),
                ("blt_order", text("time, baseline")),
                ("x_orientation", text(x_orientation)),
                ("latitude", float(s.latitude_deg)),
                ("longitude", float(s.longitude_deg)),
                ("altitude", float(s.altitude_m)),
                ("Nants_telescope", s.nant),
                ("antenna_numbers", np.asarray(s.antenna_numbers, np.int64)),
                ("antenna_names", np.array([n.encode("ascii") for n in s.antenna_names])),
                ("antenna_positions", np.asarray(s.antenna_positions, np.float64)),
                ("Nants_data", s.nant),
                ("Nbls", nbls),
                ("Nfreqs", nfreq),
                ("Npols", npol),
                ("Nspws", 1),
                ("Nphase", 1),
                ("freq_array", self.freq_hz),
                ("channel_width", np.full(nfreq, float(channel_width_hz))),
                ("spw_array", np.array([0], np.int64)),
                ("flex_spw_id_array", np.zeros(nfreq, np.int64)),
                ("polarization_array", np.array([p for p, _, _ in POLARIZATIONS], np.int64))):
            _new_dataset(h, name, value)
        pc = h.create_group("phase_center_catalog").create_group("0")
        for name, value in (("cat_name", np.bytes_(b"zenith")),
                            ("cat_type", np.bytes_(b"unprojected")), ("cat_lon", 0.0),
                            ("cat_lat", np.pi / 2), ("cat_frame", np.bytes_(b"altaz"))):
            _new_dataset(pc, name, value)
        # Counters updated after every dump; compact, i.e. stored in metadata (module docstring).
        for name in ("Nblts", "Ntimes"):
            dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
            dcpl.set_layout(h5py.h5d.COMPACT)
            dcpl.set_obj_track_times(False)  # no clock in the file: same data, same bytes
            h5py.h5d.create(h.id, name.encode(), h5py.h5t.STD_I64LE,
                            h5py.h5s.create(h5py.h5s.SCALAR), dcpl=dcpl).write(
                h5py.h5s.ALL, h5py.h5s.ALL, np.zeros((), np.int64))
        # Datasets stay open for the file's life: closing an h5py id flushes in __dealloc__,
        # where errors are ignored.
        self._counters = {name: h[name] for name in ("Nblts", "Ntimes")}
        data_rows = data_chunk_rows(nbls, nfreq * npol * 8)
        #: The datasets each dump fills whole chunks of (every baseline-time one: a chunk is a
        #: dump; /Data where its chunk divides one): written directly (``_append_chunks``),
        #: and of those the deflated ones (:data:`REPEATED`).
        self._direct = {*_BLT_HEADER, *(("visdata", "flags", "nsamples")
                                        if nbls % data_rows == 0 else ())}
        self._deflated = self._direct & set(REPEATED)
        #: dataset -> its fill value, the value of every row no chunk holds
        self._constant = constant_columns(s.latitude_deg)
        self._fill = {**self._constant, **FULL_COUNTS}
        #: dataset -> (its last chunk, deflated): written again while chunks equal it
        self._last: dict[str, tuple[bytes, bytes]] = {}

        def dataset(group: h5py.Group, name: str, shape: tuple, dtype: np.dtype,
                    rows: int) -> h5py.Dataset:
            return h5py.Dataset(_new_dataset(group, name, np.empty((0, *shape), dtype),
                                             (rows, *shape), self._fill.get(name),
                                             name in self._deflated))

        self._blt = {name: dataset(h, name, shape, dtype, max(nbls, 1))
                     for name, (shape, dtype) in _BLT_HEADER.items()}
        d = self._file.create_group("Data")
        data = {"visdata": self.vis_dtype, "flags": np.dtype(bool),
                "nsamples": np.dtype(np.float32)}
        self._data = {name: dataset(d, name, (nfreq, npol), dtype, data_rows)
                      for name, dtype in data.items()}
        # As declared (h5py reads an ("r", "i") float64 compound back as complex128).
        self._dtypes = {**{name: np.dtype(dt) for name, (_, dt) in _BLT_HEADER.items()},
                        **data}
        #: name -> (dataset id, trailing shape, rows per chunk), for every append: h5py's
        #: ``shape`` and ``chunks`` ask HDF5 each time (a tenth of an append's Python).
        self._layout = {name: (ds.id, ds.shape[1:], ds.chunks[0])
                        for name, ds in (*self._blt.items(), *self._data.items())}
        #: The columns of one value a dump (time, LST), refilled and lent each dump.
        self._columns = {name: np.empty(nbls) for name in ("time_array", "lst_array",
                                                              "phase_center_app_ra")}
        self._int64 = h5py.h5t.py_create(np.dtype(np.int64))  # the counters' memory type

    def _repeated(self, name: str, key: np.ndarray, chunk: Callable[[], np.ndarray]) -> bytes:
        """The deflated bytes of dataset ``name``'s chunk: those of its last chunk while
        ``key``, the few numbers the chunk is made of, equals the last one's (a comparison of
        bytes, microseconds), else ``chunk()`` compressed now."""
        key_bytes = key.dtype.str.encode() + key.tobytes()
        last = self._last.get(name)
        if last is None or last[0] != key_bytes:
            raw = np.ascontiguousarray(chunk())
            last = self._last[name] = (key_bytes, zlib.compress(raw.view(np.uint8).tobytes(),
                                                                REPEAT_DEFLATE))
        return last[1]

    # ------------------------------------------------------------------ appends
    def append(self, tri: np.ndarray, valid: np.ndarray, nspectra: int, t_start_unix: float,
               duration_s: float, flags: np.ndarray | None = None) -> None:
        """Append one dump; on disk when this returns, or :class:`OutputWriteError` is raised.

        tri : packed triangle ``[C, nbaseline, 2]`` (integers).
        valid : valid spectra per baseline, ``[C, nbaseline]`` or ``[1, nbaseline]``.
        nspectra : spectra integrated per baseline when nothing is missing.
        t_start_unix, duration_s : the dump's start time and length.
        flags : bool ``[C or 1, nbaseline]``, visibilities to flag besides those without
            spectra (bad inputs, RFI: ``xengine_block.health``); their data and ``nsamples``
            are kept as they are, only ``flag_array`` says so.
        """
        if self.error is not None:
            err = OutputWriteError.caused_by(self.error, self.path, self.ndump or None)
            raise err from self.error
        if self._file is None:
            raise ValueError(f"{self.path} is closed")
        b = self.bmap
        valid, extra = checked_dump(tri, valid, self.freq_hz.size, flags)
        # Counts the same on every baseline: flags and nsamples are repeated chunks, or with
        # every spectrum there no chunks at all (their fill values); not with flags of its own.
        counts = (uniform_counts(valid) if "flags" in self._deflated
                  and self._flag_bls is None and extra is None else None)
        filled = {*self._constant, *(FULL_COUNTS if counts is not None
                                     and (counts == nspectra).all() else ())}
        self._rows.fill(tri, valid, nspectra, counts=counts is None)
        if self._flag_bls is not None:  # flagged antennas: flags set, data and counts kept
            self._rows.flags[self._flag_bls] = True
        if extra is not None:
            self._rows.add_flags(extra)
        jd = unix_to_jd(t_start_unix + duration_s / 2)
        lst = self._lst(jd)
        n0, n1 = self.ndump * b.nbls, (self.ndump + 1) * b.nbls
        cols = self._columns
        cols["time_array"].fill(jd)
        cols["lst_array"].fill(lst)
        cols["phase_center_app_ra"].fill(lst)
        rows = {**cols, "uvw_array": self._uvw, "visdata": self._rows.visdata,
                "flags": self._rows.flags, "nsamples": self._rows.nsamples}
        # Repeated chunks, each told by the few numbers it is made of (not the rows compared).
        keyed = {"integration_time": (np.array([duration_s]),
                                      functools.partial(np.full, b.nbls, duration_s)),
                 "ant_1_array": (np.zeros(0), lambda: b.ant_1),
                 "ant_2_array": (np.zeros(0), lambda: b.ant_2)}
        try:
            for name, (dsid, trail, step) in self._layout.items():
                if name in filled:  # every row the fill value: the extent only
                    dsid.set_extent((n1, *trail))
                    continue
                if name in keyed:  # deflated, a dump is a chunk
                    key, make = keyed[name]
                    _append_chunks(dsid, step, n0, (b.nbls, *trail),
                                   self._repeated(name, key, make))
                    continue
                data = np.asarray(rows[name], self._dtypes[name])
                # the writer's own buffers (not a conversion made here) may be lent
                lend = self._io if name in _LENT and data is rows[name] else None
                if name not in self._direct:
                    _append_rows(dsid, n0, data)
                elif name not in self._deflated:
                    _append_chunks(dsid, step, n0, data, lend=lend)
                elif counts is not None:  # flags, nsamples: the counts say the chunk
                    # (compared: the counts, not the chunk of megabytes they make)
                    _append_chunks(dsid, step, n0, data, self._repeated(
                        name, np.append(counts, nspectra), functools.partial(
                            self._count_chunk, name, counts, nspectra, (step, *trail))))
                else:  # stored as it is
                    _append_chunks(dsid, step, n0, data, filter_mask=1, lend=lend)
            for name, value in (("Nblts", n1), ("Ntimes", self.ndump + 1)):
                self._counters[name].id.write(h5py.h5s.ALL, h5py.h5s.ALL,
                                              np.array(value, np.int64), mtype=self._int64)
            self._commit()
        except BaseException as exc:
            self._failed(exc)
            kept: int | None = self.ndump
            if self.ndump == 0:  # a file without dumps is no UVH5 file pyuvdata reads
                self.abandon()
                self.path.unlink(missing_ok=True)
                kept = None
            if isinstance(exc, Exception):
                raise OutputWriteError.caused_by(exc, self.path, kept) from exc
            raise
        self.ndump += 1

    def _count_chunk(self, name: str, counts: np.ndarray, nspectra: int,
                     chunks: tuple[int, ...]) -> np.ndarray:
        """A ``flags`` or ``nsamples`` chunk of baselines that all have ``counts`` [C or 1]."""
        per_chan = np.broadcast_to(counts, (chunks[1],))
        flags, nsamples = count_rows(per_chan, nspectra, chunks[2])
        return np.broadcast_to(flags if name == "flags" else nsamples, chunks)

    def _commit(self) -> None:
        """HDF5 flushes into the staged file, which then goes to disk (or raises OSError)."""
        assert self._file is not None
        self._file.flush()
        self._io.commit()

    def _failed(self, exc: BaseException) -> None:
        """The disk holds the last committed file; HDF5's state is ahead of it: stop writing."""
        self.error = exc if isinstance(exc, Exception) else OSError(errno.EINTR, repr(exc))
        self._io.discard = True

    def close(self) -> None:
        """Finish the file; raises :class:`OutputWriteError` if its last bytes cannot be written."""
        if self._file is None:
            return
        if self.error is None:
            try:
                self._file.close()  # HDF5's last flush, into the staged file
                self._io.commit()
            except Exception as exc:
                self._failed(exc)
                self.abandon()
                raise OutputWriteError.caused_by(exc, self.path, self.ndump) from exc
        self.abandon()

    def abandon(self) -> None:
        """Close without writing anything more (after a failure, or at interpreter exit)."""
        self._io.discard = True
        try:
            if self._file is not None and self._file.id.valid:
                self._file.close()
        finally:
            self._file = None
            self._io.close()
            _open_writers.discard(self)

    def __enter__(self) -> UVH5Writer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
