"""Time and sidereal time of dumps, without the network: one clock for every visibility
writer (docs/design.md, "UVH5 conventions": LST offline).

Time is the JD (UTC) of the integration midpoint; LST is astropy's apparent sidereal time at
the site, asked once per :data:`LST_ANCHOR_S` and run on at the sidereal rate between asks.
astropy's IERS downloads are off: its bundled tables serve.
"""

from __future__ import annotations

import numpy as np


def offline_iers() -> None:
    """astropy without IERS downloads (docs/design.md, LST offline): its bundled tables, and
    extrapolation past their end, wherever a time is turned into an Earth angle (LST, apparent
    coordinates, UVW)."""
    from astropy.utils import iers

    iers.conf.auto_download = False
    iers.conf.auto_max_age = None


def _lst_rad(jd: float, lat_deg: float, lon_deg: float, alt_m: float) -> float:
    """Apparent local sidereal time (radians) without touching the network."""
    from astropy import units as u
    from astropy.coordinates import EarthLocation
    from astropy.time import Time

    offline_iers()
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


def jd_to_unix(jd: float) -> float:
    return (jd - 2440587.5) * 86400.0


def unix_to_mjd_seconds(unix: float) -> float:
    """Unix seconds as a Measurement Set's TIME: MJD seconds, UTC (from the Unix time itself:
    a JD in float64 is good to 40 us only)."""
    return unix + 40587 * 86400.0
