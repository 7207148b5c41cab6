"""A measures directory for CASA (``casatools``) built offline, so that CASA's own tools can be
run against our Measurement Sets on machines that cannot download NRAO's measures data.

casatools refuses to import unless ``geodetic/IERSeop2000`` resolves; casaconfig, left to
itself, tries to download the whole data set. Here the two tables CASA's time conversions read
are written from what astropy ships (``astropy-iers-data``: IERS Bulletin B's EOP C04 series and
ERFA's leap-second table), Debian's ``casacore-data`` ephemerides and observatories are linked
in where installed, and a site configuration turns casaconfig's updates off
(``CASASITECONFIG``: casaconfig's documented site-config variable).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

#: Debian's casacore-data (ephemerides, geodetic/Observatories, geodetic/IGRF), when installed.
DEBIAN_DATA = Path("/usr/share/casacore/data")
#: MJD of 1972-01-01, from which TAI - UTC is a whole number of seconds.
MJD_1972 = 41317


def _eop_table(tables, path: Path) -> None:
    """``IERSeop2000`` as casacore's MeasIERS reads it: one row a day (MJD, pole x/y in
    arcsec, UT1 - UTC and LOD in s, celestial pole offsets dX/dY in arcsec, their errors),
    keywords MJD0 (the day before the first row) and dMJD (1 day)."""
    from astropy.utils import iers

    b = iers.IERS_B.open()
    mjd = np.asarray(b["MJD"].to_value("d"), np.float64)
    cols = {"MJD": mjd, "x": b["PM_x"].to_value("arcsec"), "y": b["PM_y"].to_value("arcsec"),
            "dUT1": b["UT1_UTC"].to_value("s"), "LOD": b["LOD"].to_value("s"),
            "dX": b["dX_2000A"].to_value("arcsec"), "dY": b["dY_2000A"].to_value("arcsec"),
            "Dx": b["e_PM_x"].to_value("arcsec"), "Dy": b["e_PM_y"].to_value("arcsec"),
            "DdUT1": b["e_UT1_UTC"].to_value("s"), "DLOD": b["e_LOD"].to_value("s"),
            "DdX": b["e_dX_2000A"].to_value("arcsec"), "DdY": b["e_dY_2000A"].to_value("arcsec")}
    _write(tables, path, cols, {"MJD0": int(mjd[0]) - 1, "dMJD": 1.0,
                                "VS_TYPE": "IERS EOP C04 (astropy-iers-data)"})


def _tai_utc_table(tables, path: Path) -> None:
    """``TAI_UTC`` from ERFA's leap seconds since 1972 (MJD of each step, TAI - UTC after it;
    casacore's Offset/Multiplier describe the drifting pre-1972 offsets, zero here)."""
    import erfa

    steps = erfa.leap_seconds.get()
    steps = steps[steps["year"] >= 1972]
    mjd = np.array([erfa.cal2jd(int(y), int(m), 1)[1] for y, m in
                    zip(steps["year"], steps["month"], strict=True)], np.float64)
    _write(tables, path, {"MJD": mjd, "dUTC": np.asarray(steps["tai_utc"], np.float64),
                          "Offset": np.full(mjd.size, float(MJD_1972)),
                          "Multiplier": np.zeros(mjd.size)},
           {"MJD0": int(mjd[0]) - 1, "dMJD": 0.0, "VS_TYPE": "TAI_UTC difference obtained "
                                                             "from ERFA's leap seconds"})


def _write(tables, path: Path, cols: dict, keywords: dict) -> None:
    desc = tables.maketabdesc([tables.makescacoldesc(name, 0.0) for name in cols])
    n = len(next(iter(cols.values())))
    with tables.table(str(path), desc, nrow=n, ack=False) as t:
        for name, value in cols.items():
            t.putcol(name, np.asarray(value, np.float64))
        t.putkeywords({"VS_CREATE": "2026/12/07/00:00", "VS_DATE": "2026/12/07/00:00",
                       "VS_VERSION": "0001.0001", **keywords})


def casa_measures(root: Path) -> dict[str, str]:
    """Build the measures directory under ``root``; the environment a casatools subprocess
    needs (``CASASITECONFIG`` naming a site configuration that points at it)."""
    import casacore.tables as tables

    data = root / "measures"
    (data / "geodetic").mkdir(parents=True, exist_ok=True)
    _eop_table(tables, data / "geodetic" / "IERSeop2000")
    _tai_utc_table(tables, data / "geodetic" / "TAI_UTC")
    ephemerides = DEBIAN_DATA / "ephemerides"
    if ephemerides.is_dir():
        os.symlink(ephemerides, data / "ephemerides")
    else:
        (data / "ephemerides").mkdir()
    for name in ("Observatories", "IGRF"):
        if (DEBIAN_DATA / "geodetic" / name).is_dir():
            os.symlink(DEBIAN_DATA / "geodetic" / name, data / "geodetic" / name)
    site = root / "casasiteconfig.py"
    site.write_text(f"measurespath = {str(data)!r}\nmeasures_auto_update = False\n"
                    f"data_auto_update = False\nlogfile = {str(root / 'casa.log')!r}\n")
    return {"CASASITECONFIG": str(site)}
