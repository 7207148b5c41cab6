"""UVH5 visibility files (pyuvdata's HDF5 format), written with h5py (DESIGN.md section 7).

Conventions, written down once:

- For antennas ant_1 <= ant_2 and feeds (p1, p2) the stored visibility is
  ``conj(x[ant_1, p1]) * x[ant_2, p2] = K[s2, s1]`` with ``s = 2 * ant + pol`` and the X-engine's
  ``K[j, k] = x_j conj(x_k)``. From the packed triangle (j <= k): ``K[s2, s1] = conj(K[s1, s2])``
  when s1 <= s2, else it is stored directly (only YX of an autocorrelation).
- Polarisations XX -5, YY -6, XY -7 (x feed of ant_1, y feed of ant_2), YX -8.
- Phase centre "unprojected" (zenith drift): uvw = ENU(ant_2) - ENU(ant_1), metres.
- Time is the JD of the integration midpoint; LST from astropy at the site.

Streaming: every per-baseline-time dataset is resizable; each dump is one append followed by an
update of Nblts/Ntimes and a flush, so that a writer killed at any moment leaves a file that
reads with every dump completed before the kill (tested with SIGKILL). Two settings make that
hold: HDF5's metadata cache may not evict (so dataset extents reach the disk only at a flush,
together), and Nblts/Ntimes are compact datasets (their values live in metadata, so they cannot
reach the disk before the extents they describe).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

from .geometry import INT32_MAX, MAX_COMPLEX_TERM
from .triangle import baseline_index

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


@dataclass(frozen=True)
class BaselineMap:
    """Where each (antenna pair, polarisation) of the file comes from in the packed triangle."""

    ant_1: np.ndarray  # [Nbls]
    ant_2: np.ndarray  # [Nbls]
    index: np.ndarray  # [Nbls, Npols] triangle index
    conj: np.ndarray  # [Nbls, Npols] True where the triangle value must be conjugated

    @property
    def nbls(self) -> int:
        return self.ant_1.size


def baseline_map(nant: int) -> BaselineMap:
    """File baseline order: ant_1 <= ant_2, ant_1 major; four polarisations each."""
    a1, a2 = np.triu_indices(nant)
    feeds = np.array([(p1, p2) for _, p1, p2 in POLARIZATIONS])
    s1 = 2 * a1[:, None] + feeds[None, :, 0]
    s2 = 2 * a2[:, None] + feeds[None, :, 1]
    lo, hi = np.minimum(s1, s2), np.maximum(s1, s2)
    # wanted K[s2, s1]; the triangle holds K[lo, hi]; equal to it iff s2 == lo (s2 < s1).
    conj = ~(s2 < s1)
    return BaselineMap(a1, a2, baseline_index(lo, hi), conj)


def triangle_to_uvh5(tri: np.ndarray, bmap: BaselineMap) -> np.ndarray:
    """Packed triangle ``[C, nbaseline, 2]`` -> ``[Nbls, C, Npols, 2]`` in the UVH5 convention."""
    v = tri[:, bmap.index, :]  # [C, Nbls, Npols, 2]
    v = np.moveaxis(v, 0, 1).copy()  # [Nbls, C, Npols, 2]
    v[..., 1] = np.where(bmap.conj[:, None, :], -v[..., 1], v[..., 1])
    return v


def visdata_dtype(max_spectra: int) -> np.dtype:
    """int32 compound while no integration of ``max_spectra`` can overflow, else float64."""
    base = np.int32 if max_spectra * MAX_COMPLEX_TERM <= INT32_MAX else np.float64
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


class UVH5Writer:
    """Append-per-dump UVH5 writer.

    Parameters
    ----------
    path : output file; refused if it exists unless ``overwrite``.
    site : antennas and site.
    freq_hz : centre frequency of each channel; ``channel_width_hz`` their width.
    max_spectra : largest number of spectra integrated in one dump (chooses int32 or float64).
    """

    def __init__(self, path: str | os.PathLike, site: SiteInfo, freq_hz: np.ndarray,
                 channel_width_hz: float, max_spectra: int, *, overwrite: bool = False,
                 instrument: str = "xengine_block", history: str = "",
                 x_orientation: str = "east") -> None:
        self.path = Path(path)
        if self.path.exists() and not overwrite:
            raise FileExistsError(f"{self.path} exists; refusing to overwrite it "
                                  f"(pass overwrite=True to replace it)")
        self.site = site
        self.bmap = baseline_map(site.nant)
        self.freq_hz = np.asarray(freq_hz, np.float64)
        self.ndump = 0
        self.vis_dtype = visdata_dtype(max_spectra)
        self._uvw = (site.enu[self.bmap.ant_2] - site.enu[self.bmap.ant_1]).astype(np.float64)
        # Default (earliest) file format on purpose: newer superblocks mark the file "open for
        # write" and a crashed writer would leave it unreadable without h5clear.
        self._file = h5py.File(self.path, "w")
        cfg = self._file.id.get_mdc_config()
        cfg.incr_mode = cfg.decr_mode = cfg.flash_incr_mode = 0  # required to stop evictions
        cfg.evictions_enabled = False
        self._file.id.set_mdc_config(cfg)
        self._create(channel_width_hz, instrument, history, x_orientation)
        self._file.flush()

    # ------------------------------------------------------------------ layout
    def _create(self, channel_width_hz: float, instrument: str, history: str,
                x_orientation: str) -> None:
        s, h = self.site, self._file.create_group("Header")
        nfreq, npol, nbls = self.freq_hz.size, len(POLARIZATIONS), self.bmap.nbls

        def text(name: str, value: str) -> None:
            h[name] = np.bytes_(value.encode("ascii", "replace"))

        text("version", UVH5_VERSION)
        text("telescope_name", s.telescope_name)
        text("instrument", instrument)
        text("history", history or "Written by xengine_block.")
        text("vis_units", "uncalib")
        text("blt_order", "time, baseline")
        text("x_orientation", x_orientation)
        h["latitude"] = float(s.latitude_deg)
        h["longitude"] = float(s.longitude_deg)
        h["altitude"] = float(s.altitude_m)
        h["Nants_telescope"] = s.nant
        h["antenna_numbers"] = np.asarray(s.antenna_numbers, np.int64)
        h["antenna_names"] = np.array([n.encode("ascii") for n in s.antenna_names])
        h["antenna_positions"] = np.asarray(s.antenna_positions, np.float64)
        h["Nants_data"] = s.nant
        h["Nbls"] = nbls
        h["Nfreqs"] = nfreq
        h["Npols"] = npol
        h["Nspws"] = 1
        h["Nphase"] = 1
        h["freq_array"] = self.freq_hz
        h["channel_width"] = np.full(nfreq, float(channel_width_hz))
        h["spw_array"] = np.array([0], np.int64)
        h["flex_spw_id_array"] = np.zeros(nfreq, np.int64)
        h["polarization_array"] = np.array([p for p, _, _ in POLARIZATIONS], np.int64)
        pc = h.create_group("phase_center_catalog").create_group("0")
        pc["cat_name"] = np.bytes_(b"zenith")
        pc["cat_type"] = np.bytes_(b"unprojected")
        pc["cat_lon"] = 0.0
        pc["cat_lat"] = np.pi / 2
        pc["cat_frame"] = np.bytes_(b"altaz")
        # Counters updated after every dump; compact, i.e. stored in metadata (module docstring).
        for name in ("Nblts", "Ntimes"):
            dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
            dcpl.set_layout(h5py.h5d.COMPACT)
            h5py.h5d.create(h.id, name.encode(), h5py.h5t.STD_I64LE,
                            h5py.h5s.create(h5py.h5s.SCALAR), dcpl=dcpl).write(
                h5py.h5s.ALL, h5py.h5s.ALL, np.zeros((), np.int64))
        for name, (shape, dtype) in _BLT_HEADER.items():
            h.create_dataset(name, shape=(0, *shape), maxshape=(None, *shape), dtype=dtype,
                             chunks=(max(nbls, 1), *shape))
        d = self._file.create_group("Data")
        chunk = (max(1, min(nbls, (1 << 20) // max(1, nfreq * npol * 8))), nfreq, npol)
        d.create_dataset("visdata", shape=(0, nfreq, npol), maxshape=(None, nfreq, npol),
                         dtype=self.vis_dtype, chunks=chunk)
        d.create_dataset("flags", shape=(0, nfreq, npol), maxshape=(None, nfreq, npol),
                         dtype=bool, chunks=chunk)
        d.create_dataset("nsamples", shape=(0, nfreq, npol), maxshape=(None, nfreq, npol),
                         dtype=np.float32, chunks=chunk)

    # ------------------------------------------------------------------ appends
    def append(self, tri: np.ndarray, valid: np.ndarray, nspectra: int, t_start_unix: float,
               duration_s: float) -> None:
        """Append one dump.

        tri : packed triangle ``[C, nbaseline, 2]`` (integers).
        valid : valid spectra per baseline, ``[C, nbaseline]`` or ``[1, nbaseline]``.
        nspectra : spectra integrated per baseline when nothing is missing.
        t_start_unix, duration_s : the dump's start time and length.
        """
        b = self.bmap
        vis = triangle_to_uvh5(tri, b)  # [Nbls, C, Npols, 2]
        cnt = np.moveaxis(np.broadcast_to(valid, (tri.shape[0], valid.shape[-1]))[:, b.index],
                          0, 1)  # [Nbls, C, Npols]
        if vis.shape[1] != self.freq_hz.size:
            raise ValueError(f"dump has {vis.shape[1]} channels, file has {self.freq_hz.size}")
        jd = unix_to_jd(t_start_unix + duration_s / 2)
        lst = _lst_rad(jd, self.site.latitude_deg, self.site.longitude_deg, self.site.altitude_m)
        n0, n1 = self.ndump * b.nbls, (self.ndump + 1) * b.nbls
        h, d = self._file["Header"], self._file["Data"]
        rows = {
            "time_array": np.full(b.nbls, jd), "lst_array": np.full(b.nbls, lst),
            "integration_time": np.full(b.nbls, duration_s),
            "ant_1_array": b.ant_1, "ant_2_array": b.ant_2, "uvw_array": self._uvw,
            "phase_center_id_array": np.zeros(b.nbls, np.int64),
            "phase_center_app_ra": np.full(b.nbls, lst),
            "phase_center_app_dec": np.full(b.nbls, np.deg2rad(self.site.latitude_deg)),
            "phase_center_frame_pa": np.zeros(b.nbls),
        }
        out = np.empty(vis.shape[:3], self.vis_dtype)
        out["r"], out["i"] = vis[..., 0], vis[..., 1]
        for name, value in rows.items():
            h[name].resize(n1, axis=0)
            h[name][n0:n1] = value
        for name, value in (("visdata", out), ("flags", cnt == 0),
                            ("nsamples", (cnt / nspectra).astype(np.float32))):
            d[name].resize(n1, axis=0)
            d[name][n0:n1] = value
        self.ndump += 1
        h["Nblts"][()] = n1
        h["Ntimes"][()] = self.ndump
        self._file.flush()

    def close(self) -> None:
        if self._file.id.valid:
            self._file.close()

    def __enter__(self) -> UVH5Writer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
