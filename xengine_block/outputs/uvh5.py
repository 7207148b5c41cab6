"""UVH5 visibility files (pyuvdata's HDF5 format), written with h5py
(docs/design.md, "UVH5 conventions").

Conventions, written down once:

- For antennas ant_1 <= ant_2 and feeds (p1, p2) the stored visibility is
  ``conj(x[ant_1, p1]) * x[ant_2, p2] = K[s2, s1]`` with ``s = 2 * ant + pol`` and the X-engine's
  ``K[j, k] = x_j conj(x_k)``. From the packed triangle (j <= k): ``K[s2, s1] = conj(K[s1, s2])``
  when s1 <= s2, else it is stored directly (only YX of an autocorrelation).
- Polarisations XX -5, YY -6, XY -7 (x feed of ant_1, y feed of ant_2), YX -8.
- A negative channel width is a band whose channels run from high to low frequency: a
  spectrally inverted (lower-sideband) band, whose complex samples carry the conjugate of the
  sky's phase (rawspec conjugates such GUPPI input: ``input_conjugated = obsbw < 0``). The
  frequency axis is written as recorded (``freq_array`` descending, ``channel_width``
  negative) and the visibilities are conjugated, so the file holds ``conj(x[ant_1]) x[ant_2]``
  of the sky signal like any other (tests/reprocess/test_physics.py phases a point source).
- Phase centre "unprojected" (zenith drift): uvw = ENU(ant_2) - ENU(ant_1), metres.
- Time is the JD of the integration midpoint; LST from astropy at the site.

- ``ant_1_array`` / ``ant_2_array`` hold antenna *numbers* (``antenna_numbers``), never indices;
  ``ant_1 <= ant_2`` by number. Antenna *index* i (position in the array description) owns
  streams 2i, 2i + 1, so the file order follows the numbers and the triangle the indices.

Streaming: every per-baseline-time dataset is resizable; each dump is one append followed by an
update of Nblts/Ntimes and a flush. Datasets whose chunks repeat from dump to dump (flags and
nsamples while every baseline has the same counts, the antenna numbers, ...: :data:`REPEATED`)
are deflated, each distinct chunk compressed once; the rest is stored as it is. A dataset whose
rows in a dump are all one constant (:func:`constant_columns`; flags and nsamples of a dump
without missing spectra) stores no chunk for it: the constant is the dataset's fill value,
which HDF5 reads for rows no chunk holds. HDF5 writes through h5py's ``fileobj`` driver into
:class:`StagedFile`, which keeps one dump's writes in memory and puts them on disk after HDF5's
flush (``commit``).

Crash guarantee: a writer killed at any moment (SIGKILL, the OOM killer: the kernel keeps what
the process wrote) leaves a file that pyuvdata reads, with its default checks, holding every dump
whose ``append`` returned and at most the one being appended, complete and never in part. Killed
before its first dump is complete, the file opens with h5py with no dump (Nblts 0), or, killed
while the constructor writes it, may not open at all. Power loss or a kernel crash is not covered
(nothing is fsync'ed). Why it holds: a kill lands between two system calls, and ``commit`` orders
its calls so that the file between any two of them reads as the old one or the new one:

1. the bytes past the committed end (new chunks, new B-tree nodes): nothing committed points
   there; then the file is grown to HDF5's end, so no end-of-allocation exceeds the file;
2. the superblock: its end-of-allocation grows, and a larger one is harmless;
3. the other in-place writes past the metadata written at creation, in HDF5's order: chunk-index
   B-tree nodes, which only gain entries for chunks past the committed extents (a split copies
   the old root to new space, then rewrites the root in one write), and chunks the previous dump
   filled in part (their committed rows are rewritten with the same bytes). A reader of the
   committed extents never looks there;
4. one write of all HDF5 changed in the metadata written at creation: the object headers of the
   resizable datasets (extents) and of Nblts/Ntimes, compact datasets whose values live in their
   object headers. This write publishes the dump (about 6 KB, whatever the array size). It
   spans two or three pages, and Linux stops a buffered write at a page boundary when a fatal
   signal arrives while it copies (a window of microseconds per dump, which the SIGKILL test
   once hit), so it is made a direct write (``O_DIRECT``) of the whole pages, whose I/O, once
   issued, completes before the killed process goes (ext4, XFS...); where there is no direct
   write to be had (tmpfs, whose O_DIRECT still copies through its page cache; macOS), it is
   buffered and that window stays open. It is also buffered in a writer made with
   ``kill_safe=False`` (reprocessing's ``.partial`` files, which a rerun removes): the direct
   write cost ~15 % of an append's CPU (the superblock's page, dirtied by step 2, is written
   back first, and the pages are dropped from the page cache);
5. the file is cut to HDF5's end if that is smaller.

``tests/outputs/test_uvh5.py`` records the calls of every commit and reads the file as it is
after each of them (dumps across chunks and B-tree node splits included), and after the
publishing write cut at each of its pages (which a reader refuses: why it is one direct
write). The file format is HDF5's earliest, whose superblock has no "open for write" mark.

Write failures (full disk, quota, EIO): HDF5 never sees them. ``commit`` writes new space first
(the only writes a full disk refuses); when a write fails the file is cut back to its old end and
any in-place bytes written are put back, so it is exactly the file of the previous dump, and
:meth:`UVH5Writer.append` raises :class:`UVH5WriteError` (file, errno). Letting HDF5 see the
error instead loses it (h5py ignores errors of ids closed in ``__dealloc__``, leaving rows of
zeros and counters ahead of the data) and leaves half-closed dataset ids that HDF5's exit handler
closes again: a segfault at exit.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import functools
import mmap
import os
import threading
import weakref
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from .. import native_extension
from ..geometry import max_spectra_int32
from ..runtime.memory import host_buffer
from ..triangle import baseline_index

#: UVH5 polarisation codes in file order, with the (ant_1 feed, ant_2 feed) each means.
POLARIZATIONS: tuple[tuple[int, int, int], ...] = ((-5, 0, 0), (-6, 1, 1), (-7, 0, 1), (-8, 1, 0))
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


@dataclass(frozen=True)
class BaselineMap:
    """Where each (antenna pair, polarisation) of the file comes from in the packed triangle."""

    ant_1: np.ndarray  # [Nbls] antenna numbers (what the file stores)
    ant_2: np.ndarray  # [Nbls]
    idx_1: np.ndarray  # [Nbls] antenna indices (streams 2 * idx + pol; positions)
    idx_2: np.ndarray  # [Nbls]
    index: np.ndarray  # [Nbls, Npols] triangle index
    conj: np.ndarray  # [Nbls, Npols] True where the triangle value must be conjugated

    @property
    def nbls(self) -> int:
        return self.ant_1.size


def baseline_map(antenna_numbers: Sequence[int] | np.ndarray) -> BaselineMap:
    """File baseline order for antennas numbered ``antenna_numbers`` (in index order):
    ant_1 <= ant_2 by number, ant_1 major; four polarisations each."""
    numbers = np.asarray(antenna_numbers, np.int64)
    order = np.argsort(numbers, kind="stable")  # indices by increasing number
    r1, r2 = np.triu_indices(numbers.size)
    i1, i2 = order[r1], order[r2]
    feeds = np.array([(p1, p2) for _, p1, p2 in POLARIZATIONS])
    s1 = 2 * i1[:, None] + feeds[None, :, 0]
    s2 = 2 * i2[:, None] + feeds[None, :, 1]
    lo, hi = np.minimum(s1, s2), np.maximum(s1, s2)
    # wanted K[s2, s1]; the triangle holds K[lo, hi]; equal to it iff s2 == lo (s2 < s1).
    conj = ~(s2 < s1)
    return BaselineMap(numbers[i1], numbers[i2], i1, i2, baseline_index(lo, hi), conj)


class DumpRows:
    """The ``Data`` rows of one dump (``visdata``, ``flags``, ``nsamples``, each ``[Nbls, C,
    Npols]``) made from a packed triangle and its valid counts by compiled passes without the
    GIL, into buffers kept for the writer's life.

    Why: the gather and the three arrays were the writer's whole cost per dump (numpy: a
    fancy-indexed count array, a comparison, a division and a cast, each a fresh array of megabytes
    whose pages the kernel faults in again, on the core the correlator also wants); HDF5 copies the
    rows before :meth:`UVH5Writer.append` returns, so the same buffers serve every dump."""

    def __init__(self, bmap: BaselineMap, nfreq: int, vis_dtype: np.dtype,
                 conjugate: bool = False) -> None:
        shape = (bmap.nbls, nfreq, bmap.index.shape[1])
        self.index = np.ascontiguousarray(bmap.index, np.int64)
        self.flip = (bmap.conj != conjugate).astype(np.uint8)
        # Ring memory (faulted in once per process, reused by the next file's writer once
        # this one is gone), not np.empty: the first dump of every file faulted its
        # megabytes in again.
        n = int(np.prod(shape))
        dtypes = (vis_dtype, np.dtype(bool), np.dtype(np.float32))
        raw = host_buffer(sum(n * dt.itemsize for dt in dtypes))
        starts = np.cumsum([0, *(n * dt.itemsize for dt in dtypes)])
        self.visdata, self.flags, self.nsamples = (
            raw[a:a + n * dt.itemsize].view(dt).reshape(shape)
            for a, dt in zip(starts, dtypes, strict=False))
        self._pairs = self.visdata.view(vis_dtype[0]).reshape(*shape, 2)

    def fill(self, tri: np.ndarray, valid: np.ndarray, nspectra: int,
             counts: bool = True) -> None:
        """``tri [C, nbaseline, 2]`` in the UVH5 convention (``visdata[b, c, p]`` is
        ``tri[c, index[b, p]]``, conjugated where ``flip[b, p]``); with ``counts``, ``valid
        [C or 1, nbaseline]`` spectra per baseline: ``flags`` where none, ``nsamples`` their
        fraction of ``nspectra``. Both passes are the C extension's (``uvh5_rows``,
        ``uvh5_counts``: ``kernels/cpu/uvh5_rows.c``, the GIL released)."""
        ext = native_extension.native()
        tri = np.ascontiguousarray(tri)
        if tri.dtype not in (np.int32, np.int64, np.float64):
            tri = tri.astype(np.float64 if tri.dtype.kind == "f" else np.int64)
        ext.uvh5_rows(tri, self.index, self.flip, self._pairs)
        if counts:
            ext.uvh5_counts(np.ascontiguousarray(valid, np.int64), self.index, float(nspectra),
                            self.flags, self.nsamples)


def visdata_dtype(max_spectra: int, sample_bits: int = 8) -> np.dtype:
    """int32 compound while no integration of ``max_spectra`` spectra of ``sample_bits``-bit
    samples can overflow (the geometry's bound: 65,535 spectra for ci8, 16,777,215 for ci4),
    else float64."""
    base = np.int32 if max_spectra <= max_spectra_int32(sample_bits) else np.float64
    return np.dtype([("r", base), ("i", base)])


def _lst_rad(jd: float, lat_deg: float, lon_deg: float, alt_m: float) -> float:
    """Apparent local sidereal time (radians) without touching the network."""
    from astropy import units as u
    from astropy.coordinates import EarthLocation
    from astropy.time import Time
    from astropy.utils import iers

    iers.conf.auto_download = False
    iers.conf.auto_max_age = None
    loc = EarthLocation.from_geodetic(lon_deg * u.deg, lat_deg * u.deg, alt_m * u.m)
    return float(Time(jd, format="jd", location=loc).sidereal_time("apparent").rad)


#: How fast the apparent LST runs, radians per second of UTC: the Earth rotation angle's rate
#: (1.00273781191135448 turns per UT1 day) plus the general precession in right ascension
#: that Greenwich mean sidereal time adds (4612.156534 arcsec per Julian century, IAU 2006).
SIDEREAL_RAD_PER_S = (2 * np.pi * 1.00273781191135448 / 86400.0
                      + np.deg2rad(4612.156534 / 3600) / (36525 * 86400.0))
#: Longest extrapolation of an astropy LST before asking astropy again: what the linear rate
#: leaves out (nutation's short terms, UT1 - UTC drifting) stays below 0.1 mas within it,
#: against pyuvdata's LST tolerance of 1 mas.
LST_ANCHOR_S = 30.0


def data_chunk_rows(nbls: int, row_bytes: int) -> int:
    """Rows of a ``/Data`` chunk: at most :data:`DATA_CHUNK_BYTES`, and where it costs less
    than a factor of 4 in size, a divisor of ``nbls``, so that every dump is whole chunks of
    its own (:func:`_append_chunks`)."""
    most = max(1, min(nbls, DATA_CHUNK_BYTES // max(1, row_bytes)))
    whole = nbls // min(k for k in range(1, nbls + 1) if nbls % k == 0 and nbls // k <= most) \
        if nbls else 1
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


def count_rows(counts: np.ndarray, nspectra: int, npol: int) -> tuple[np.ndarray, np.ndarray]:
    """``flags`` and ``nsamples`` of one baseline, ``[C, Npols]``, from its valid ``counts``
    per channel: flagged where none, the fraction of ``nspectra`` otherwise (float32 of the
    float64 quotient, as numpy's ``(n / N).astype``; the compiled row pass computes the
    same)."""
    c = np.asarray(counts, np.int64)[:, None].repeat(npol, axis=1)
    return c == 0, (c / float(nspectra)).astype(np.float32)


def uniform_counts(valid: np.ndarray) -> np.ndarray | None:
    """The per-channel counts ``[C or 1]`` when every baseline of ``valid [C or 1, nbl]`` has
    the same counts (the usual dump: nothing or whole channels missing), else None."""
    if valid.shape[1] == 0:
        return None
    first = valid[:, 0]
    if valid.strides[1] == 0 or (valid == first[:, None]).all():
        return first.copy()
    return None


def _append_rows(dsid: h5py.h5d.DatasetID, n0: int, rows: np.ndarray) -> None:
    """Grow the dataset ``dsid`` to ``n0 + len(rows)`` rows and write ``rows`` at ``n0``,
    through h5py's low-level calls (its slicing costs about 0.3 ms of Python per call): for
    ``/Data`` chunks that straddle dumps, where :func:`_append_chunks` cannot serve."""
    dsid.set_extent((n0 + rows.shape[0], *rows.shape[1:]))
    fspace = dsid.get_space()
    fspace.select_hyperslab((n0,) + (0,) * (rows.ndim - 1), rows.shape)
    rows = np.ascontiguousarray(rows)
    dsid.write(h5py.h5s.create_simple(rows.shape), fspace, rows)


#: The last astropy LST asked for at each site, ``(jd, lst)``: the clocks of later files of
#: the same site (a live writer's next file, the next file of a recording) start from it.
_LST_ANCHORS: dict[tuple[float, float, float], tuple[float, float]] = {}


class LstClock:
    """Apparent LST at one site for a run of dump times, astropy asked once per
    :data:`LST_ANCHOR_S` of them, the anchor shared by every clock of the site.

    astropy's apparent sidereal time costs milliseconds of Python per call, at every dump on
    the writer's thread (and the last dump's on the reprocessing's critical path); between
    anchors the LST advances at the sidereal rate. Shared: a file's own anchor would cost a
    noticeable share of the writer's CPU while reprocessing short files."""

    def __init__(self, lat_deg: float, lon_deg: float, alt_m: float) -> None:
        self.site = (lat_deg, lon_deg, alt_m)

    @property
    def _anchor(self) -> tuple[float, float] | None:
        return _LST_ANCHORS.get(self.site)

    def __call__(self, jd: float) -> float:
        anchor = self._anchor
        if anchor is not None:
            jd0, lst0 = anchor
            dt = (jd - jd0) * 86400.0
            if abs(dt) <= LST_ANCHOR_S:
                return float((lst0 + dt * SIDEREAL_RAD_PER_S) % (2 * np.pi))
        lst = _lst_rad(jd, *self.site)
        _LST_ANCHORS[self.site] = (jd, lst)
        return lst


def load_time_tables() -> None:
    """Import astropy and load its bundled earth-rotation tables now (about a second of CPU):
    a writer block calls this when it is made, so the first dump does not stall the pipeline
    while packets are arriving."""
    _lst_rad(2451545.0, 0.0, 0.0, 0.0)  # J2000: inside the bundled tables, nothing to warn


def unix_to_jd(unix: float) -> float:
    return unix / 86400.0 + 2440587.5


@dataclass(frozen=True)
class SiteInfo:
    """What the file needs of the array (built from the array description)."""

    telescope_name: str
    latitude_deg: float
    longitude_deg: float
    altitude_m: float
    antenna_names: list[str]
    antenna_numbers: np.ndarray  # [Nants]
    antenna_positions: np.ndarray  # [Nants, 3] ECEF minus site ECEF, metres
    enu: np.ndarray  # [Nants, 3] metres

    @property
    def nant(self) -> int:
        return len(self.antenna_names)


class UVH5WriteError(OSError):
    """Writing a UVH5 file failed (errno, filename); the file keeps every earlier dump."""

    def __init__(self, code: int, reason: str, filename: str, ndump: int | None) -> None:
        super().__init__(code, reason, filename)
        self.ndump = ndump  # dumps the file keeps; None: no dump was complete, no file left

    @classmethod
    def caused_by(cls, exc: BaseException, path: Path, ndump: int | None) -> UVH5WriteError:
        """The error for ``path`` from the exception that stopped the write (its errno)."""
        return cls(getattr(exc, "errno", None) or errno.EIO,
                   getattr(exc, "strerror", None) or str(exc) or type(exc).__name__,
                   str(path), ndump)

    def __reduce__(self) -> tuple:
        return type(self), (self.errno, self.strerror, self.filename, self.ndump)

    @property
    def errno_symbol(self) -> str:
        """``ENOSPC``, ``EIO``...: the symbol of the errno."""
        return errno.errorcode.get(self.errno or 0, str(self.errno))

    def __str__(self) -> str:
        name = self.errno_symbol
        kept = ("no dump was complete, no file left" if self.ndump is None else
                f"the file keeps the {self.ndump} dumps written before")
        return (f"writing {self.filename} failed: [Errno {self.errno} {name}] {self.strerror}; "
                f"{kept}")


#: Offsets, sizes and buffer addresses of direct writes are multiples of this (a page: every
#: logical block size in use divides it).
_DIRECT_ALIGN = 4096
#: statfs magic numbers of filesystems that accept O_DIRECT but copy through their page cache
#: all the same, page by page (tmpfs since Linux 6.6): no direct write to be had there.
_CACHE_ONLY_FILESYSTEMS = {0x01021994: "tmpfs"}


def _filesystem_magic(path: Path) -> int | None:
    """statfs(2)'s f_type of the filesystem holding ``path`` (Linux; None elsewhere). Through
    the process's own symbols (libc's, already loaded): ``ctypes.util.find_library`` would
    cost a millisecond or more per file."""
    import ctypes

    try:
        statfs = ctypes.CDLL(None).statfs
        buf = ctypes.create_string_buffer(512)  # struct statfs: f_type first, a C long
        if statfs(os.fsencode(path), buf) != 0:
            return None
        return ctypes.c_long.from_buffer(buf).value & 0xFFFFFFFF
    except (OSError, AttributeError):
        return None


def _open_direct(path: Path) -> int | None:
    """``path`` opened for direct writes, or None where there are none to be had: no
    O_DIRECT on the platform (macOS), refused by the filesystem, or a filesystem that writes
    through its page cache anyway (:data:`_CACHE_ONLY_FILESYSTEMS`)."""
    if not hasattr(os, "O_DIRECT") or _filesystem_magic(path) in _CACHE_ONLY_FILESYSTEMS:
        return None
    try:
        return os.open(path, os.O_WRONLY | os.O_DIRECT)
    except OSError:
        return None


def _address(a: np.ndarray) -> int:
    """Where ``a``'s data starts (``a.ctypes.data`` makes a ctypes object first: slower)."""
    return a.__array_interface__["data"][0]


class StagedFile:
    """A file for h5py's ``fileobj`` driver that puts HDF5's writes on disk only at ``commit``.

    Between commits, writes and truncations are kept in memory (reads see them), so HDF5 never
    meets an I/O error. ``commit`` writes the bytes past the committed end first (new space: the
    only writes a full disk refuses), grows the file to HDF5's end, overwrites committed bytes in
    the crash-safe order of the module docstring (old bytes saved and restored if one fails), and
    then cuts the file to HDF5's end. A failure cuts the file back to its committed size and
    raises ``OSError`` with errno: the file is again exactly the last committed one.
    ``discard`` drops everything written afterwards (closing HDF5 after a failure).
    ``kill_safe`` False: the publishing write is buffered even where a direct one can be had
    (:meth:`_publish`), for files a rerun removes when a kill leaves them behind.
    """

    def __init__(self, path: str | os.PathLike, *, overwrite: bool,
                 kill_safe: bool = True) -> None:
        self.path = Path(path)
        flags = os.O_RDWR | os.O_CREAT | (os.O_TRUNC if overwrite else os.O_EXCL)
        self.fd = os.open(self.path, flags, 0o644)
        self.size = 0  # bytes on disk (committed)
        self.discard = False
        #: In-place writes in ``[1, atomic_below)`` reach the disk together, in one pwrite, last
        #: (:meth:`set_atomic_below`).
        self.atomic_below = 0
        #: The file's pages below ``atomic_below`` as this object wrote them (None before).
        self._image: bytearray | None = None
        self._page_buf: mmap.mmap | None = None  # page-aligned, for publishing writes
        self._lock = threading.Lock()  # close() (e.g. at exit) waits for a commit to finish
        self._end = 0  # HDF5's end of file
        self._pos = 0
        self._writes: list[tuple[int, bytes | memoryview]] = []  # staged, in order
        self._lent: tuple[int, int] | None = None  # (address, bytes) of a buffer lent
        #: The same file opened for direct I/O, for the publishing write (:meth:`_publish`);
        #: None where there is none to be had (:func:`_open_direct`: tmpfs, macOS) or wanted.
        self.direct_fd = _open_direct(self.path) if kill_safe else None

    # -- what the fileobj driver calls (seek, tell, read, write, truncate, flush)
    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        self._pos = offset + (self._end if whence == os.SEEK_END else
                              self._pos if whence == os.SEEK_CUR else 0)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def read(self, n: int = -1) -> bytes:
        pos = self._pos
        n = max(self._end - pos, 0) if n < 0 else n
        buf = bytearray(n)  # past the end: zeros, as HDF5's sec2 driver reads
        if pos < self.size:
            got = os.pread(self.fd, min(n, self.size - pos), pos)
            buf[:len(got)] = got
        for off, data in self._writes:
            a, b = max(off, pos), min(off + len(data), pos + n)
            if a < b:
                buf[a - pos:b - pos] = data[a - off:b - off]
        self._pos += n
        return bytes(buf)

    def write(self, data: bytes | bytearray | memoryview) -> int:
        if self._lent is None or len(data) != self._lent[1] \
                or _address(np.frombuffer(data, np.uint8)) != self._lent[0]:
            data = bytes(data)  # HDF5's own buffer, which it reuses: a copy
        if not self.discard:
            self._writes.append((self._pos, data))
            self._end = max(self._end, self._pos + len(data))
        self._pos += len(data)
        return len(data)

    def truncate(self, size: int | None = None) -> int:
        size = self._pos if size is None else size
        if not self.discard:
            if size < self._end:  # staged bytes past the new end are gone
                self._writes = [(o, d[:size - o]) for o, d in self._writes if o < size]
            self._end = size
        return size

    def flush(self) -> None:
        """HDF5's flush ends here; the bytes reach the disk at ``commit``."""

    # -- ours
    def lend(self, buf: np.ndarray | None) -> None:
        """Until ``lend(None)``, a write of exactly ``buf`` (HDF5 hands a direct chunk write's
        buffer to the driver as it is) is staged as a view of it, not copied (a tenth of a
        dump's writing at S = 256): the caller leaves ``buf`` unchanged and alive until the
        commit."""
        self._lent = None if buf is None else (_address(buf), buf.nbytes)

    def set_atomic_below(self, end: int) -> None:
        """Publish in-place writes below ``end`` (the metadata HDF5 wrote at creation) in one
        write, last (:meth:`_in_place`), and from now on keep an image of the pages holding
        them, as written through this object: the publishing write's merge and its pages
        come from it, not from the file, whose pages the previous publication's direct write
        dropped from the page cache (two reads from the device per dump)."""
        self.atomic_below = end
        n = -(-end // _DIRECT_ALIGN) * _DIRECT_ALIGN
        self._image = bytearray(n)
        got = os.pread(self.fd, n, 0)
        self._image[:len(got)] = got
        self._page_buf = mmap.mmap(-1, n) if n and self.direct_fd is not None else None

    def _committed(self, lo: int, hi: int) -> bytes:
        """The file's bytes ``[lo, hi)``: from the image where it holds them."""
        img = self._image
        if img is not None and hi <= len(img):
            return bytes(img[lo:hi])
        return os.pread(self.fd, hi - lo, lo)

    def _imaged(self, data: bytes | memoryview, offset: int) -> None:
        """Keep the image equal to the file after ``data`` was written at ``offset``."""
        img = self._image
        if img is not None and offset < len(img):
            end = min(len(img), offset + len(data))
            img[offset:end] = data[:end - offset]

    def commit(self) -> None:
        """Put the staged writes on disk; on failure restore the committed file and raise."""
        with self._lock:
            if not self.discard:
                self._commit()

    def _commit(self) -> None:
        old = self.size
        try:
            for off, data in self._writes:  # new space first (may fail: disk full, quota)
                if off + len(data) > old:
                    cut = max(old - off, 0)
                    self._pwrite(data[cut:], off + cut)
            if self._end > os.fstat(self.fd).st_size:  # all of it, before anything points there
                self._ftruncate(self._end)
            saved: list[tuple[int, bytes]] = []
            try:
                for off, data in self._in_place(old):
                    saved.append((off, self._committed(off, off + len(data))))
                    self._pwrite(data, off)
            except OSError:
                with contextlib.suppress(OSError):  # best effort: put the old bytes back
                    for off, data in reversed(saved):
                        self._pwrite(data, off)
                raise
            if os.fstat(self.fd).st_size != self._end:
                self._ftruncate(self._end)
        except OSError:
            with contextlib.suppress(OSError):  # the first error is the one to report
                self._ftruncate(old)
            raise
        self.size = self._end
        self._writes = []

    def _in_place(self, old: int) -> list[tuple[int, bytes]]:
        """The overwrites of the committed bytes ``[0, old)``, in the order that keeps every
        state between two of them a file that reads as the old one (module docstring): the
        superblock (offset 0; a larger end-of-allocation is harmless) first, then the other
        writes at or past ``atomic_below`` in HDF5's order, then one write of everything HDF5
        changed in ``[1, atomic_below)``, the object headers that publish the new dump."""
        first, middle, atomic = [], [], []
        for off, data in self._writes:
            if off < old:
                part = (off, data[:old - off])
                (first if off == 0 else atomic if off < self.atomic_below else middle).append(part)
        if atomic:
            lo = min(off for off, _ in atomic)
            hi = max(off + len(data) for off, data in atomic)
            buf = bytearray(self._committed(lo, hi))
            for off, data in atomic:  # in HDF5's order: a later write wins
                buf[off - lo:off - lo + len(data)] = data
            atomic = [(lo, bytes(buf))]
        return first + middle + atomic

    def _pwrite(self, data: bytes, offset: int) -> None:
        """Write ``data`` at ``offset``; into the metadata of creation (the write that publishes
        a dump, or puts its old bytes back) as one direct write where possible."""
        if not (0 < offset < self.atomic_below and self._publish(data, offset)):
            self._pwrite_buffered(data, offset)

    def _pwrite_buffered(self, data: bytes, offset: int) -> None:
        view, at = memoryview(data), offset
        while view:  # a write may be short (e.g. up to a file size limit)
            n = os.pwrite(self.fd, view, at)
            view, at = view[n:], at + n
        self._imaged(data, offset)

    def _publish(self, data: bytes, offset: int) -> bool:
        """The publishing write as one direct write of the whole pages it touches (their other
        bytes as they are), so that a kill cannot cut it: a buffered write stops at a page
        boundary when a fatal signal arrives while it copies, and this one spans two or three
        pages; a direct write's I/O, once issued, completes (the killed process waits for it,
        uninterruptibly). False where it cannot be done (no direct writes here, pages past the
        file's end, an alignment the device refuses): the caller writes buffered, as before.
        The kernel writes back and drops the page cache's copy of those pages around it, so
        buffered readers see the new bytes."""
        if self.direct_fd is None:
            return False
        lo, hi = offset - offset % _DIRECT_ALIGN, -(-(offset + len(data)) // _DIRECT_ALIGN) \
            * _DIRECT_ALIGN
        if hi > os.fstat(self.fd).st_size:
            return False
        # page-aligned, as direct I/O wants its buffer: the one kept for it where it is large
        # enough (every publication), else one for this write
        own = self._page_buf is None or len(self._page_buf) < hi - lo
        buf = mmap.mmap(-1, hi - lo) if own else self._page_buf
        try:
            view = memoryview(buf)[:hi - lo]
            view[:] = self._committed(lo, hi)
            view[offset - lo:offset - lo + len(data)] = data
            try:
                n = os.pwrite(self.direct_fd, view, lo)
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                os.close(self.direct_fd)  # refused (alignment, filesystem): buffered from now
                self.direct_fd = None
                return False
            finally:
                view.release()
        finally:
            if own:
                buf.close()
        self._imaged(data[:max(lo + n - offset, 0)], offset)
        if n != hi - lo:  # short: the rest buffered (not expected of a direct write this size)
            self._pwrite_buffered(data[max(lo + n - offset, 0):], max(lo + n, offset))
        return True

    def _ftruncate(self, size: int) -> None:
        os.ftruncate(self.fd, size)
        if self._image is not None and size < len(self._image):
            self._image[size:] = bytes(len(self._image) - size)

    def close(self) -> None:
        with self._lock:
            if self.fd >= 0:
                os.close(self.fd)
                self.fd = -1
            if self.direct_fd is not None:
                os.close(self.direct_fd)
                self.direct_fd = None
            if self._page_buf is not None:
                self._page_buf.close()
                self._page_buf = None


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

    Every failure to create or write the file raises :class:`UVH5WriteError` (from the
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
        self.vis_dtype = (np.dtype([("r", np.float64), ("i", np.float64)]) if float_visdata
                          else visdata_dtype(max_spectra, sample_bits))
        self._lst = LstClock(site.latitude_deg, site.longitude_deg, site.altitude_m)
        self._uvw = (site.enu[self.bmap.idx_2] - site.enu[self.bmap.idx_1]).astype(np.float64)
        self._rows = DumpRows(self.bmap, self.freq_hz.size, self.vis_dtype, self.conjugate)
        try:
            self._io = StagedFile(self.path, overwrite=overwrite, kill_safe=kill_safe)
        except FileExistsError:
            raise FileExistsError(f"{self.path} exists; refusing to overwrite it "
                                  f"(pass overwrite=True to replace it)") from None
        except OSError as exc:  # not created (EROFS, no inode left, quota, EIO): nothing to undo
            raise UVH5WriteError.caused_by(exc, self.path, None) from exc
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
                raise UVH5WriteError.caused_by(exc, self.path, None) from exc
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
               duration_s: float) -> None:
        """Append one dump; on disk when this returns, or :class:`UVH5WriteError` is raised.

        tri : packed triangle ``[C, nbaseline, 2]`` (integers).
        valid : valid spectra per baseline, ``[C, nbaseline]`` or ``[1, nbaseline]``.
        nspectra : spectra integrated per baseline when nothing is missing.
        t_start_unix, duration_s : the dump's start time and length.
        """
        if self.error is not None:
            err = UVH5WriteError.caused_by(self.error, self.path, self.ndump or None)
            raise err from self.error
        if self._file is None:
            raise ValueError(f"{self.path} is closed")
        b = self.bmap
        if tri.shape[0] != self.freq_hz.size:
            raise ValueError(f"dump has {tri.shape[0]} channels, file has {self.freq_hz.size}")
        valid = np.asarray(valid)
        valid = valid[None] if valid.ndim == 1 else valid
        if (valid.ndim != 2 or valid.shape[1] != tri.shape[1]
                or valid.shape[0] not in (1, tri.shape[0])):
            raise ValueError(f"valid counts of shape {valid.shape} for a dump of "
                             f"{tri.shape[0]} channels x {tri.shape[1]} baselines")
        # Counts the same on every baseline: flags and nsamples are repeated chunks, or with
        # every spectrum there no chunks at all (their fill values).
        counts = uniform_counts(valid) if "flags" in self._deflated else None
        filled = {*self._constant, *(FULL_COUNTS if counts is not None
                                     and (counts == nspectra).all() else ())}
        self._rows.fill(tri, valid, nspectra, counts=counts is None)
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
                raise UVH5WriteError.caused_by(exc, self.path, kept) from exc
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
        """Finish the file; raises :class:`UVH5WriteError` if its last bytes cannot be written."""
        if self._file is None:
            return
        if self.error is None:
            try:
                self._file.close()  # HDF5's last flush, into the staged file
                self._io.commit()
            except Exception as exc:
                self._failed(exc)
                self.abandon()
                raise UVH5WriteError.caused_by(exc, self.path, self.ndump) from exc
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
