"""Measurement Sets (casacore tables: CASA, WSClean, DP3), written dump by dump with
python-casacore (docs/design.md, "Measurement Set conventions").

What is written:

- MAIN: one row per baseline (autocorrelations included) and dump, time-major, the baselines
  in :mod:`xengine_block.outputs.baselines` order (``ANTENNA1 <= ANTENNA2``); ``DATA``
  complex64 ``[Nchan, 4]`` (XX, XY, YX, YY), ``FLAG``, ``WEIGHT_SPECTRUM`` (the fraction of
  spectra integrated, UVH5's ``nsamples``), ``WEIGHT`` (its channel mean) and ``SIGMA``,
  ``UVW``, ``TIME``/``TIME_CENTROID`` (the dump's midpoint, MJD seconds UTC), ``INTERVAL`` and
  ``EXPOSURE`` (its length).
- Subtables: ANTENNA (row = antenna number, as pyuvdata writes them; rows of numbers no
  antenna has are blank and ``FLAG_ROW``), FEED (X and Y receptors per antenna), FIELD and
  SOURCE (the phase centre), POLARIZATION (one: linear, 4 products), SPECTRAL_WINDOW (one),
  DATA_DESCRIPTION (one row for the one band: several rows for one band are what WSClean
  refuses), OBSERVATION (telescope, time range), STATE and PROCESSOR (one row each), HISTORY;
  POINTING is left empty (a drift-scan array does not point; CASA and WSClean need no rows).
- Conventions: the stored visibility is ``x[ANTENNA1] conj(x[ANTENNA2])`` and ``UVW`` is
  ``position(ANTENNA1) - position(ANTENNA2)`` in the phase centre's frame: CASA's reading of
  a row with ``ANTENNA1 < ANTENNA2`` and pyuvdata's ``write_ms`` default, i.e. the UVH5
  visibility phased (:mod:`xengine_block.outputs.phasing`), then conjugated, and its UVW
  negated. Conjugating and negating together leave the sky where it is (the pair obeys
  ``V = sum I exp(-2 pi i (ul + vm + w(n - 1)))`` either way); what the choice fixes is which
  antenna's gain CASA conjugates.

Streaming and crash safety: each dump adds its rows, writes them and flushes the table.
casacore's flush is not atomic (storage managers' headers rewritten in place, then
``table.dat`` renamed into place): a kill inside it leaves a table casacore refuses. So the
writer keeps two copies while it runs (``NAME.ms.writing/a`` and ``/b``) and ``NAME.ms`` is
a symbolic link to the one that holds every complete dump: each dump goes into the copy not
shown, flushed, the link is replaced in one rename, and the other copy takes the same dump.
The tiled data files are hard links shared by the copies (written with the same bytes by
both), so the visibilities are on disk once. At close the copy is renamed to ``NAME.ms``.
docs/design.md ("Measurement Set conventions") has the whole argument;
``tests/outputs/test_ms.py`` kills writers at random moments and reads what they leave. A
full disk is caught before a dump touches the table (:meth:`MSWriter._check_space`). A
write that fails raises :class:`~xengine_block.outputs.errors.OutputWriteError`; the dumps
complete before stay, and an output without a complete dump is removed.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
from pathlib import Path

import numpy as np

from .baselines import (
    POLARIZATIONS,
    DumpRows,
    baseline_map,
    checked_dump,
    flagged_baselines,
    visdata_dtype,
)
from .errors import OutputWriteError
from .phasing import PhaseCentre, Phaser, altitude_deg, site_location, zenith_icrs
from .site import SiteInfo
from .times import LstClock, unix_to_jd, unix_to_mjd_seconds

log = logging.getLogger(__name__)

#: Casacore Stokes codes of the four linear products, in the MS's order XX, XY, YX, YY.
CORR_TYPES = (9, 10, 11, 12)
#: The receptors (of ANTENNA1, of ANTENNA2) of each product.
CORR_PRODUCT = ((0, 0), (0, 1), (1, 0), (1, 1))
#: UVH5 polarisation code of each MS product: where each MS column comes from in the rows.
_UVH5_CODE = {9: -5, 10: -7, 11: -8, 12: -6}
POL_ORDER = tuple([p for p, _, _ in POLARIZATIONS].index(_UVH5_CODE[c]) for c in CORR_TYPES)
#: Frame of FIELD, SOURCE and UVW directions: the phase centre is given in ICRS.
DIRECTION_FRAME = "ICRS"
#: Suffix of the directory that holds a kill-safe writer's two copies while it runs.
WRITING_SUFFIX = ".writing"


def casacore_tables():
    """``casacore.tables``, or ImportError saying how to install it (the ``ms`` extra)."""
    try:
        import casacore.tables as tables
    except ImportError as exc:
        raise ImportError("writing Measurement Sets needs python-casacore: pip install "
                          "'xengine_block[ms]' (or python-casacore)") from exc
    return tables


def _main_desc(tables, nchan: int) -> dict:
    """MAIN's description: the required columns, DATA and WEIGHT_SPECTRUM added, the per-row
    arrays of fixed shape in tiled storage (a dump's rows are whole tiles' worth of cells)."""
    desc = tables.required_ms_desc("MAIN")
    shape = [nchan, len(CORR_TYPES)]
    for name, value, kind, comment in (
            ("DATA", 0j, "complex", "The data column"),
            ("WEIGHT_SPECTRUM", 0.0, "float", "Weight for each data point")):
        col = tables.makearrcoldesc(name, value, valuetype=kind, shape=shape,
                                    datamanagertype="TiledColumnStMan",
                                    datamanagergroup=f"Tiled{name}", comment=comment)
        desc.update(tables.maketabdesc(col))
    for name, group in (("FLAG", "TiledFLAG"), ("UVW", "TiledUVW")):
        desc[name].update(dataManagerType="TiledColumnStMan", dataManagerGroup=group,
                          option=5, shape=np.array(shape if name == "FLAG" else [3]))
    for name in ("WEIGHT", "SIGMA"):
        desc[name].update(dataManagerType="TiledColumnStMan",
                          dataManagerGroup=f"Tiled{name}", option=5,
                          shape=np.array([len(CORR_TYPES)]))
    desc["FLAG_CATEGORY"].update(dataManagerType="TiledShapeStMan",
                                 dataManagerGroup="TiledFlagCategory")
    desc["UVW"]["keywords"]["MEASINFO"]["Ref"] = DIRECTION_FRAME
    for name in ("ARRAY_ID", "DATA_DESC_ID", "FEED1", "FEED2", "FIELD_ID", "OBSERVATION_ID",
                 "PROCESSOR_ID", "SCAN_NUMBER", "STATE_ID", "INTERVAL", "EXPOSURE"):
        desc[name].update(dataManagerType="IncrementalStMan", dataManagerGroup=name)
    return desc


class MSWriter:
    """Append-per-dump Measurement Set writer; the interface of
    :class:`~xengine_block.outputs.uvh5.UVH5Writer` (``append``, ``close``, ``ndump``,
    ``path``) plus ``phase_centre``.

    path : output directory (a Measurement Set is a directory of tables); refused if it exists
        unless ``overwrite`` (then only if it is a table: anything else is never removed).
        While a kill-safe writer runs, ``path`` is a symbolic link to the copy that holds every
        complete dump, in ``path`` + :data:`WRITING_SUFFIX` (module docstring); closed, it is
        the table itself.
    site, freq_hz, channel_width_hz, max_spectra, sample_bits, float_visdata : as UVH5Writer's.
    kill_safe : False writes one table in place (no copy, no link): a kill while casacore
        flushes may leave it unreadable. For outputs written under a temporary name that a
        rerun replaces (reprocessing's).
    phase_centre : :class:`~xengine_block.outputs.phasing.PhaseCentre` or its text
        (``zenith``, ``RA,DEC``).
    """

    def __init__(self, path: str | os.PathLike, site: SiteInfo, freq_hz: np.ndarray,
                 channel_width_hz: float, max_spectra: int, *, sample_bits: int = 8,
                 float_visdata: bool = False, overwrite: bool = False,
                 instrument: str = "xengine_block", history: str = "",
                 x_orientation: str = "east", kill_safe: bool = True,
                 phase_centre: PhaseCentre | str = "zenith") -> None:
        self._tables = casacore_tables()
        self.path = Path(path)
        self.site = site
        self.phase_centre = (phase_centre if isinstance(phase_centre, PhaseCentre)
                             else PhaseCentre.parse(phase_centre))
        self.bmap = baseline_map(site.antenna_numbers)
        self.freq_hz = np.asarray(freq_hz, np.float64)
        self.channel_width_hz = float(channel_width_hz)
        self.conjugate = channel_width_hz < 0
        self.instrument, self.history = instrument, history or "Written by xengine_block."
        self.ndump = 0
        self.error: Exception | None = None
        self._rows = DumpRows(self.bmap, self.freq_hz.size,
                              visdata_dtype(max_spectra, sample_bits, float_visdata),
                              self.conjugate)
        self._lst = LstClock(site.latitude_deg, site.longitude_deg, site.altitude_m)
        self._flag_bls = flagged_baselines(self.bmap, site.flagged)
        #: The site's ITRF position, metres (ANTENNA's POSITION, OBSERVATION's location).
        self._site_xyz = np.array([c.to_value("m") for c in site_location(site).geocentric])
        self._phaser: Phaser | None = None
        self._t_range = [0.0, 0.0]
        self.kill_safe = kill_safe
        self._work = self.path.with_name(self.path.name + WRITING_SUFFIX)
        _clear(self.path, self._work, overwrite)
        #: The table directories written, and their open tables: two copies (kill-safe) that
        #: take each dump in turn, or the output itself.
        self._copies = ([self._work / "a", self._work / "b"] if kill_safe else [self.path])
        self._tabs: list = []
        self._shown = 0  # the copy ``path`` links to
        try:
            for copy in self._copies:
                self._create(copy)
            if kill_safe:
                _share_tiles(*self._copies)
            self._tabs = [self._tables.table(str(c), readonly=False, ack=False)
                          for c in self._copies]
            if kill_safe:
                self._show(0)
        except Exception as exc:
            self._drop()
            raise OutputWriteError.caused_by(_os_error(exc, self.path), self.path, None) from exc

    # ------------------------------------------------------------------ layout
    def _create(self, path: Path) -> None:
        """An empty Measurement Set at ``path``: MAIN's columns and the subtables that do not
        depend on the first dump (closed when made)."""
        t, s = self._tables, self.site
        nchan = self.freq_hz.size
        desc = _main_desc(t, nchan)
        path.parent.mkdir(exist_ok=True)
        dminfo = t.makedminfo(desc)
        for manager in dminfo.values():
            if manager["TYPE"] == "StandardStMan":  # ANTENNA1/2, FLAG_ROW, TIME(_CENTROID)
                manager["SPEC"] = {"BUCKETSIZE": ssm_bucket_bytes(self.bmap.nbls)}
        main = t.default_ms(str(path), desc, dminfo)
        main.putkeyword("xengine_block_conjugation", "ant1-ant2 (CASA)")
        ms = str(path)
        # ANTENNA: row = antenna number (MS antenna ids index this table)
        numbers = np.asarray(s.antenna_numbers, np.int64)
        nrow = int(numbers.max()) + 1 if numbers.size else 0
        pos = np.zeros((nrow, 3))
        names, flag = [""] * nrow, np.ones(nrow, bool)
        pos[numbers] = self._site_xyz + np.asarray(s.antenna_positions, np.float64)
        for name, num in zip(s.antenna_names, numbers, strict=True):
            names[num] = str(name)
        flag[numbers] = False
        with t.table(f"{ms}::ANTENNA", readonly=False, ack=False) as ant:
            ant.addrows(nrow)
            ant.putcol("NAME", names)
            ant.putcol("STATION", [s.telescope_name] * nrow)
            ant.putcol("TYPE", ["GROUND-BASED"] * nrow)
            ant.putcol("MOUNT", ["X-Y"] * nrow)
            ant.putcol("POSITION", pos)
            ant.putcol("OFFSET", np.zeros((nrow, 3)))
            ant.putcol("DISH_DIAMETER", np.zeros(nrow))
            ant.putcol("FLAG_ROW", flag)
        with t.table(f"{ms}::FEED", readonly=False, ack=False) as feed:
            feed.addrows(nrow)
            feed.putcol("ANTENNA_ID", np.arange(nrow, dtype=np.int32))
            feed.putcol("FEED_ID", np.zeros(nrow, np.int32))
            feed.putcol("SPECTRAL_WINDOW_ID", np.full(nrow, -1, np.int32))
            feed.putcol("BEAM_ID", np.full(nrow, -1, np.int32))
            feed.putcol("NUM_RECEPTORS", np.full(nrow, 2, np.int32))
            feed.putcol("INTERVAL", np.full(nrow, 1e30))
            feed.putcol("TIME", np.zeros(nrow))
            feed.putcol("POSITION", np.zeros((nrow, 3)))
            feed.putcol("BEAM_OFFSET", np.zeros((nrow, 2, 2)))
            feed.putcol("POLARIZATION_TYPE", np.array([["X", "Y"]] * nrow))
            feed.putcol("POL_RESPONSE", np.tile(np.eye(2, dtype=np.complex64), (nrow, 1, 1)))
            feed.putcol("RECEPTOR_ANGLE", np.tile([0.0, np.pi / 2], (nrow, 1)))
        with t.table(f"{ms}::POLARIZATION", readonly=False, ack=False) as pol:
            pol.addrows(1)
            pol.putcell("NUM_CORR", 0, len(CORR_TYPES))
            pol.putcell("CORR_TYPE", 0, np.array(CORR_TYPES, np.int32))
            pol.putcell("CORR_PRODUCT", 0, np.array(CORR_PRODUCT, np.int32))
            pol.putcell("FLAG_ROW", 0, False)
        width = np.full(nchan, self.channel_width_hz)
        with t.table(f"{ms}::SPECTRAL_WINDOW", readonly=False, ack=False) as spw:
            spw.addrows(1)
            for name, value in (
                    ("NUM_CHAN", nchan), ("NAME", "band"),
                    ("REF_FREQUENCY", float(self.freq_hz[0]) if nchan else 0.0),
                    ("CHAN_FREQ", self.freq_hz), ("CHAN_WIDTH", width),
                    ("EFFECTIVE_BW", np.abs(width)), ("RESOLUTION", np.abs(width)),
                    ("MEAS_FREQ_REF", 5),  # TOPO
                    ("TOTAL_BANDWIDTH", float(abs(self.channel_width_hz) * nchan)),
                    ("NET_SIDEBAND", -1 if self.conjugate else 1), ("IF_CONV_CHAIN", 0),
                    ("FREQ_GROUP", 0), ("FREQ_GROUP_NAME", ""), ("FLAG_ROW", False)):
                spw.putcell(name, 0, value)
        with t.table(f"{ms}::DATA_DESCRIPTION", readonly=False, ack=False) as dd:
            dd.addrows(1)
            dd.putcell("SPECTRAL_WINDOW_ID", 0, 0)
            dd.putcell("POLARIZATION_ID", 0, 0)
            dd.putcell("FLAG_ROW", 0, False)
        with t.table(f"{ms}::STATE", readonly=False, ack=False) as st:
            st.addrows(1)
            for name, value in (("SIG", True), ("REF", False), ("CAL", 0.0), ("LOAD", 0.0),
                                ("SUB_SCAN", 0), ("OBS_MODE", "OBSERVE_TARGET#ON_SOURCE"),
                                ("FLAG_ROW", False)):
                st.putcell(name, 0, value)
        with t.table(f"{ms}::PROCESSOR", readonly=False, ack=False) as proc:
            proc.addrows(1)
            for name, value in (("TYPE", "CORRELATOR"), ("SUB_TYPE", "xengine_block"),
                                ("TYPE_ID", -1), ("MODE_ID", -1), ("FLAG_ROW", False)):
                proc.putcell(name, 0, value)
        for name in ("FIELD", "POINTING"):
            with t.table(f"{ms}::{name}", readonly=False, ack=False) as sub:
                for col in ("DELAY_DIR", "PHASE_DIR", "REFERENCE_DIR", "DIRECTION", "TARGET"):
                    if col in sub.colnames():
                        kw = sub.getcolkeywords(col)
                        kw["MEASINFO"]["Ref"] = DIRECTION_FRAME
                        sub.putcolkeywords(col, kw)
        source_desc = t.required_ms_desc("SOURCE")
        source_desc["DIRECTION"]["keywords"]["MEASINFO"]["Ref"] = DIRECTION_FRAME
        src = t.table(f"{ms}/SOURCE", source_desc, dminfo=t.makedminfo(source_desc),
                      readonly=False, ack=False)
        src.close()
        main.putkeyword("SOURCE", f"Table: {ms}/SOURCE")
        main.close()

    def _first_dump(self, jd: float) -> None:
        """The phase centre (and its phaser) once the first time is known."""
        pc = self.phase_centre
        if pc.zenith:
            ra, dec = zenith_icrs(self.site, jd)
            name = f"zenith_at_jd{jd:f}"
        else:
            ra, dec = np.deg2rad(pc.ra_deg), np.deg2rad(pc.dec_deg)
            name = f"ra{pc.ra_deg:g}_dec{pc.dec_deg:g}"
            alt = altitude_deg(self.site, ra, dec, jd)
            if alt < 0:
                log.warning("%s: phase centre %s is below the horizon (altitude %.1f deg) at "
                            "the first dump; phased there all the same", self.path, pc, alt)
        self.phase_ra, self.phase_dec = ra, dec
        self._field_name = name
        self._phaser = Phaser(self.site, self.bmap.ant_1, self.bmap.ant_2, ra, dec)

    def _describe(self, path: Path, jd: float) -> None:
        """FIELD, SOURCE, OBSERVATION and HISTORY of the copy at ``path``, with the first
        dump (the phase centre and first time known)."""
        t, ms = self._tables, str(path)
        ra, dec, name = self.phase_ra, self.phase_dec, self._field_name
        direction = np.array([[ra, dec]])
        mjd_s = jd_mjd_seconds(jd)
        with t.table(f"{ms}::FIELD", readonly=False, ack=False) as field:
            field.addrows(1)
            for col in ("DELAY_DIR", "PHASE_DIR", "REFERENCE_DIR"):
                field.putcell(col, 0, direction)
            for col, value in (("NAME", name), ("CODE", ""), ("TIME", mjd_s), ("NUM_POLY", 0),
                               ("SOURCE_ID", 0), ("FLAG_ROW", False)):
                field.putcell(col, 0, value)
        with t.table(f"{ms}/SOURCE", readonly=False, ack=False) as src:
            src.addrows(1)
            for col, value in (("SOURCE_ID", 0), ("TIME", mjd_s), ("INTERVAL", 1e30),
                               ("SPECTRAL_WINDOW_ID", -1), ("NUM_LINES", 0), ("NAME", name),
                               ("CALIBRATION_GROUP", 0), ("CODE", ""),
                               ("DIRECTION", np.array([ra, dec])),
                               ("PROPER_MOTION", np.zeros(2))):
                src.putcell(col, 0, value)
        with t.table(f"{ms}::OBSERVATION", readonly=False, ack=False) as obs:
            # the site itself (pyuvdata's column: readers need not know the telescope)
            obs.addcols(t.makearrcoldesc("TELESCOPE_LOCATION", 0.0, shape=[3],
                                         valuetype="double"))
            obs.addrows(1)
            obs.putcell("TELESCOPE_LOCATION", 0, self._site_xyz)
            for col, value in (("TELESCOPE_NAME", self.site.telescope_name),
                               ("OBSERVER", self.instrument), ("PROJECT", ""),
                               ("SCHEDULE_TYPE", ""), ("RELEASE_DATE", 0.0),
                               ("TIME_RANGE", np.array([mjd_s, mjd_s])),
                               ("FLAG_ROW", False)):
                obs.putcell(col, 0, value)
        with t.table(f"{ms}::HISTORY", readonly=False, ack=False) as hist:
            hist.addrows(1)
            for col, value in (("TIME", mjd_s), ("OBSERVATION_ID", 0), ("MESSAGE", self.history),
                               ("PRIORITY", "NORMAL"), ("ORIGIN", "xengine_block"),
                               ("OBJECT_ID", 0), ("APPLICATION", "xengine_block")):
                hist.putcell(col, 0, value)

    # ------------------------------------------------------------------ appends
    def append(self, tri: np.ndarray, valid: np.ndarray, nspectra: int, t_start_unix: float,
               duration_s: float, flags: np.ndarray | None = None) -> None:
        """Append one dump (arguments as :meth:`UVH5Writer.append`); flushed when this
        returns, or :class:`OutputWriteError` is raised."""
        if self.error is not None:
            raise OutputWriteError.caused_by(_os_error(self.error, self.path), self.path,
                                             self.ndump or None) from self.error
        if not self._tabs:
            raise ValueError(f"{self.path} is closed")
        valid, extra = checked_dump(tri, valid, self.freq_hz.size, flags)
        rows = self._rows
        rows.fill(tri, valid, nspectra)
        if extra is not None:  # bad inputs, RFI (xengine_block.health): flagged, data kept
            rows.add_flags(extra)
        if self._flag_bls is not None:
            rows.flags[self._flag_bls] = True
        vis = rows.visdata
        self.append_rows(vis["r"].astype(np.float64) + 1j * vis["i"].astype(np.float64),
                         rows.flags, rows.nsamples, t_start_unix + duration_s / 2, duration_s)

    def append_rows(self, data: np.ndarray, flags: np.ndarray, nsamples: np.ndarray,
                    mid_unix: float, duration_s: float) -> None:
        """Append one dump given as UVH5 rows (``[Nbls, C, 4]`` in this writer's baseline
        order and UVH5's polarisation order, unprojected): ``append``'s second half, and
        what ``xengine convert`` feeds from a UVH5 file."""
        if self.error is not None:
            raise OutputWriteError.caused_by(_os_error(self.error, self.path), self.path,
                                             self.ndump or None) from self.error
        if not self._tabs:
            raise ValueError(f"{self.path} is closed")
        b = self.bmap
        jd = unix_to_jd(mid_unix)
        lst = self._lst(jd)
        n0 = self.ndump * b.nbls
        try:
            self._check_space()
            if self.ndump == 0:
                self._first_dump(jd)
            uvw = self._phaser.uvw(jd, lst, duration_s / 86400.0)
            data = data * self._phaser.factors(uvw[:, 2], self.freq_hz)[:, :, None]
            order = list(POL_ORDER)
            data = np.conj(data[:, :, order]).astype(np.complex64)
            flags = np.asarray(flags)[:, :, order]
            weights = np.asarray(nsamples, np.float32)[:, :, order]
            wmean = weights.mean(axis=1) if weights.shape[1] else np.zeros((b.nbls, 4))
            sigma = np.where(wmean > 0, 1.0 / np.sqrt(np.where(wmean > 0, wmean, 1.0)), 0.0)
            mjd_s = unix_to_mjd_seconds(mid_unix)
            columns = (
                ("DATA", data), ("FLAG", flags), ("WEIGHT_SPECTRUM", weights),
                ("WEIGHT", wmean.astype(np.float32)), ("SIGMA", sigma.astype(np.float32)),
                ("UVW", -uvw),
                ("ANTENNA1", b.ant_1.astype(np.int32)), ("ANTENNA2", b.ant_2.astype(np.int32)),
                ("TIME", np.full(b.nbls, mjd_s)), ("TIME_CENTROID", np.full(b.nbls, mjd_s)),
                ("INTERVAL", np.full(b.nbls, duration_s)),
                ("EXPOSURE", np.full(b.nbls, duration_s)),
                ("FLAG_ROW", flags.reshape(b.nbls, -1).all(axis=1)),
                ("SCAN_NUMBER", np.ones(b.nbls, np.int32)))
            # Kill-safe: the copy ``path`` does not show takes the dump first and is shown
            # (the link replaced in one rename); the other then takes the same dump.
            first = 1 - self._shown if self.kill_safe else 0
            self._put(first, n0, columns, jd)
        except Exception as exc:
            self.error = exc
            kept: int | None = self.ndump
            if self.ndump == 0:
                self._drop()
                kept = None
            raise OutputWriteError.caused_by(_os_error(exc, self.path), self.path, kept) from exc
        self._t_range = [self._t_range[0] if self.ndump else mjd_s - duration_s / 2,
                         mjd_s + duration_s / 2]
        self.ndump += 1
        if self.kill_safe:
            self._show(first)
            try:
                self._put(1 - first, n0, columns, jd)
            except Exception as exc:
                self._lost_copy(first, n0, columns, exc)
                raise OutputWriteError.caused_by(_os_error(exc, self.path), self.path,
                                                 self.ndump) from exc

    def _put(self, k: int, n0: int, columns: tuple, jd: float) -> None:
        """One dump's rows into copy ``k`` (its first-dump subtables too), flushed."""
        if n0 == 0:
            self._describe(self._copies[k], jd)
        self._tabs[k].addrows(self.bmap.nbls)
        self._write_rows(self._tabs[k], n0, columns)

    def _write_rows(self, ms, n0: int, columns: tuple) -> None:
        """The dump's columns into rows ``n0`` on of the open table ``ms``, flushed."""
        for col, value in columns:
            ms.putcol(col, value, startrow=n0, nrow=self.bmap.nbls)
        ms.flush()

    def _lost_copy(self, shown: int, n0: int, columns: tuple, exc: Exception) -> None:
        """The copy behind failed to take the dump the shown copy has: it is closed (what its
        flush writes into the tile files both share may be part of that dump's rows), the
        shown copy's rows of that dump are written again over it, and the writer stops (the
        output keeps every dump so far)."""
        self.error = exc
        behind, self._tabs[1 - shown] = self._tabs[1 - shown], None
        try:
            behind.close()
        except Exception:  # noqa: S110 (the error is the one being reported)
            pass
        self._write_rows(self._tabs[shown], n0, columns)

    def _show(self, k: int) -> None:
        """Point ``path`` at copy ``k``: a new link renamed over the old, so a reader (or a
        kill) sees the one copy or the other, each a whole table."""
        link = self.path.with_name(f".{self.path.name}.link")
        link.unlink(missing_ok=True)
        os.symlink(os.path.relpath(self._copies[k], self.path.parent), link)
        os.replace(link, self.path)
        self._shown = k

    def _check_space(self) -> None:
        """ENOSPC before the table is touched when the filesystem has not room for twice a
        dump's rows (and a tile's worth more): casacore, out of space in the middle of a
        flush, leaves storage-manager headers that disagree with the table's row count, a
        table that no longer opens. A disk filling up slowly stops here, the table intact."""
        b = self.bmap
        row = self.freq_hz.size * len(CORR_TYPES) * (8 + 1 + 4) + 3 * 8 + 2 * 4 * 4 + 64
        need = 2 * b.nbls * row + 4 * (1 << 20)
        st = os.statvfs(self.path)
        if st.f_bavail * st.f_frsize < need:
            raise OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} (less than {need} bytes "
                                        f"free for the next dump)")

    def close(self) -> None:
        """Finish the table (flushed already after every dump): the observation's time range
        written, and, kill-safe, the copy with every dump renamed to ``path`` and the other
        removed. After a failure: the output as it was shown, every complete dump."""
        if not self._tabs:
            return
        tabs, self._tabs = self._tabs, []
        keep = self._shown if self.kill_safe else 0
        try:
            if self.error is None and self.kill_safe:
                keep = 1 - self._shown  # the copy not shown takes the time range, then shown
            if self.error is None and self.ndump:  # once (reopening it cost 9 ms a dump)
                with self._tables.table(f"{self._copies[keep]}::OBSERVATION", readonly=False,
                                        ack=False) as obs:
                    obs.putcell("TIME_RANGE", 0, np.array(self._t_range))
            for k in sorted(range(len(tabs)), key=lambda k: k == keep):
                if tabs[k] is not None:
                    tabs[k].close()
            if self.kill_safe:
                self._show(keep)
                self._finish(keep)
        except Exception as exc:
            raise OutputWriteError.caused_by(_os_error(exc, self.path), self.path,
                                             self.ndump) from exc

    def _finish(self, keep: int) -> None:
        """``path`` becomes copy ``keep`` itself (the link removed, the copy renamed in its
        place), and the working directory goes. A kill between the two steps leaves the
        finished table in the working directory."""
        self.path.unlink()
        os.rename(self._copies[keep], self.path)
        shutil.rmtree(self._work)

    def abandon(self) -> None:
        """Close without writing more (after a failure): as :meth:`close` after a failure, or
        nothing left when no dump was complete."""
        if self.ndump == 0:
            self._drop()
            return
        if self.error is None:
            self.error = RuntimeError("abandoned")
        try:
            self.close()
        except OutputWriteError:  # noqa: S110 (the first error was reported already)
            pass

    def _drop(self) -> None:
        """Remove an output none of whose dumps was complete."""
        tabs, self._tabs = self._tabs, []
        for tab in tabs:
            try:
                if tab is not None:
                    tab.close()
            except Exception:  # noqa: S110 (the first error was reported already)
                pass
        if self.path.is_symlink():
            self.path.unlink()
        shutil.rmtree(self._work if self.kill_safe else self.path, ignore_errors=True)

    def __enter__(self) -> MSWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def ssm_bucket_bytes(nbls: int) -> int:
    """MAIN's StandardStMan bucket: about a dump's rows (25 bytes each), 32 KiB to 4 MiB.
    casacore's default for these columns is 772 bytes, an index entry per 30 rows that the
    manager keeps in memory and rewrites at every flush: a long run's appends then slow down
    and its memory grows with the rows written."""
    return int(min(max(1 << (25 * nbls - 1).bit_length(), 1 << 15), 1 << 22))


def _clear(path: Path, work: Path, overwrite: bool) -> None:
    """Make room for a new output at ``path``: refused if anything is there (or a killed
    writer's working directory ``work``) unless ``overwrite``, and then removed only if it is
    a table (or a link to one) and ``work`` only if it holds tables."""
    there = [p for p in (path, work) if p.exists() or p.is_symlink()]
    if not there:
        return
    if not overwrite:
        raise FileExistsError(f"{there[0]} exists; refusing to overwrite it "
                              f"(pass overwrite=True to replace it)")
    if path.exists() and not (path / "table.dat").is_file():
        raise FileExistsError(f"{path} exists and is no table; refusing to remove it")
    if work.exists() and not all((c / "table.dat").is_file() for c in work.iterdir()):
        raise FileExistsError(f"{work} holds something else than tables; refusing to "
                              f"remove it")
    if path.is_symlink():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)
    shutil.rmtree(work, ignore_errors=True)


def _share_tiles(a: Path, b: Path) -> None:
    """Make copy ``b``'s tiled data files (``table.f*_TSM*``: DATA, FLAG, WEIGHT_SPECTRUM,
    UVW, WEIGHT, SIGMA) hard links of ``a``'s, both still empty: the two copies take the
    same dumps, so each writes into them the bytes the other wrote, and the data is on disk
    once. A copy only writes rows past those the other shows, or rewrites shown ones with the
    same bytes."""
    for tiles in sorted(a.glob("table.f*_TSM*")):
        other = b / tiles.name
        if tiles.stat().st_size or not other.is_file() or other.stat().st_size:
            raise RuntimeError(f"{tiles} and {other}: the new copies' tile files differ")
        tmp = b / f".{tiles.name}.link"
        try:
            os.link(tiles, tmp)
        except OSError as exc:  # a filesystem without hard links: each copy keeps its own
            log.info("%s: no hard links here (%s); the copies' data is on disk twice",
                     b.parent, exc.strerror)
            return
        os.replace(tmp, other)


def jd_mjd_seconds(jd: float) -> float:
    """A JD (UTC) as MJD seconds, for the subtables' times."""
    return (jd - 2400000.5) * 86400.0


def _os_error(exc: BaseException, path: Path | None = None) -> BaseException:
    """casacore reports failed writes as RuntimeError with the system's message, or without
    the errno at all ("write error ...: Success"): an errno for it where the message names one
    (ENOSPC, EDQUOT, EIO), ENOSPC for a write error on a filesystem with no block left, else
    the exception itself."""
    if isinstance(exc, OSError):
        return exc
    text = str(exc)
    first = text.splitlines()[0][:200] if text else type(exc).__name__
    for code in (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS, errno.EACCES):
        if os.strerror(code).lower() in text.lower():
            return OSError(code, f"{os.strerror(code)} ({first})")
    if "write error" in text.lower() and path is not None:
        try:
            full = os.statvfs(path if path.exists() else path.parent).f_bavail == 0
        except OSError:
            full = False
        if full:
            return OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} ({first})")
    return exc
