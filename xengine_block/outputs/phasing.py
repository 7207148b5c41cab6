"""A phase centre for files that need one (the Measurement Set): where it is, and each dump's
UVW and phase factors towards it (docs/design.md, "Measurement Set conventions").

The X-engine has no pointing: its visibilities are unprojected (a zenith drift). A Measurement
Set fixes one direction per field, so the writer phases every dump to it:

- ``zenith``: the ICRS direction of the zenith at the first dump, fixed for the file (the
  drift-scan arrays' usual choice; pyuvdata's ``phase_to_time`` of the first time);
- ``RA,DEC``: degrees, ICRS.

The apparent coordinates, frame angle and UVW are pyuvdata's (``calc_app_coords``,
``calc_frame_pos_angle``, ``calc_uvw``, on astropy and ERFA, IERS offline): the very numbers
pyuvdata's ``phase`` gives the same UVH5 file, so a Measurement Set and the UVH5 file of one run
phased by pyuvdata agree to the float32 rounding of the stored data. Phase factors are
``exp(-2 pi i w nu / c)`` in float64 (pyuvdata's ``_apply_w_proj``), applied to the exact
integer visibilities.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np

from .site import SiteInfo
from .times import offline_iers

log = logging.getLogger(__name__)

#: Dumps whose apparent coordinates are computed in one call (:meth:`Phaser._apparent`).
AHEAD = 64
#: Speed of light, m/s (astropy's, as pyuvdata's phasing uses).
C_M_S = 299792458.0


@dataclass(frozen=True)
class PhaseCentre:
    """``zenith`` (resolved at the first dump) or a fixed ICRS ``ra_deg``, ``dec_deg``."""

    zenith: bool = True
    ra_deg: float = 0.0
    dec_deg: float = 0.0

    @classmethod
    def parse(cls, text: str) -> PhaseCentre:
        """``zenith`` or ``RA,DEC`` in degrees (ICRS); ValueError naming what is wrong."""
        text = text.strip()
        if text.lower() == "zenith":
            return cls()
        parts = text.split(",")
        if len(parts) != 2:
            raise ValueError(f"phase centre {text!r}: 'zenith' or 'RA,DEC' in degrees")
        try:
            ra, dec = (float(p) for p in parts)
        except ValueError:
            raise ValueError(f"phase centre {text!r}: RA and DEC must be numbers "
                             "(degrees)") from None
        if not (math.isfinite(ra) and math.isfinite(dec)) or not -90 <= dec <= 90:
            raise ValueError(f"phase centre {text!r}: DEC must be within [-90, 90] degrees "
                             "and both finite")
        return cls(False, ra % 360.0, dec)

    def __str__(self) -> str:
        """The text :meth:`parse` reads back to this centre (floats to the last digit)."""
        return "zenith" if self.zenith else f"{self.ra_deg!r},{self.dec_deg!r}"


def site_location(site: SiteInfo):  # -> astropy EarthLocation
    """The site as astropy's EarthLocation (WGS84 geodetic, as pyuvdata's)."""
    from astropy import units as u
    from astropy.coordinates import EarthLocation

    return EarthLocation.from_geodetic(site.longitude_deg * u.deg, site.latitude_deg * u.deg,
                                       site.altitude_m * u.m)


def zenith_icrs(site: SiteInfo, jd: float) -> tuple[float, float]:
    """ICRS RA, Dec (radians) of the zenith at ``jd`` (as pyuvdata's ``phase_to_time``)."""
    from astropy import units as u
    from astropy.coordinates import Angle, SkyCoord
    from astropy.time import Time

    offline_iers()
    loc = site_location(site)
    zen = SkyCoord(alt=Angle(90 * u.deg), az=Angle(0 * u.deg), obstime=Time(jd, format="jd"),
                   frame="altaz", location=loc).transform_to("icrs")
    return float(zen.ra.rad), float(zen.dec.rad)


def altitude_deg(site: SiteInfo, ra_rad: float, dec_rad: float, jd: float) -> float:
    """Altitude (degrees) of an ICRS direction at the site at ``jd``."""
    from astropy import units as u
    from astropy.coordinates import AltAz, SkyCoord
    from astropy.time import Time

    offline_iers()
    loc = site_location(site)
    return float(SkyCoord(ra=ra_rad * u.rad, dec=dec_rad * u.rad, frame="icrs").transform_to(
        AltAz(obstime=Time(jd, format="jd"), location=loc)).alt.deg)


class Phaser:
    """Each dump's UVW (metres, pyuvdata's ant_2 - ant_1 direction) and phase factors towards
    a fixed ICRS direction, for the baselines ``ant_1``, ``ant_2`` (antenna numbers)."""

    def __init__(self, site: SiteInfo, ant_1: np.ndarray, ant_2: np.ndarray,
                 ra_rad: float, dec_rad: float) -> None:
        self.site, self.ra, self.dec = site, ra_rad, dec_rad
        self.ant_1, self.ant_2 = np.asarray(ant_1), np.asarray(ant_2)
        self._loc = site_location(site)
        #: Apparent RA, Dec and frame angle of the coming dumps' times, computed together.
        self._ahead: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None

    def _apparent(self, jd: float, lst: float,
                  step_days: float | None) -> tuple[float, float, float]:
        """Apparent coordinates and frame angle at ``jd``: from those computed ahead for the
        times ``jd + i step`` (one vectorised call for :data:`AHEAD` dumps: the per-call cost
        of astropy and ERFA, tens of milliseconds, was most of an append), else computed now
        with the next ones. The apparent coordinates do not depend on ``lst``."""
        from pyuvdata.utils import phasing as ph

        if self._ahead is not None:
            times, ra, dec, pa = self._ahead
            # within 9 ms: a sidereal source's apparent place moves arcseconds a day, so by
            # 1e-7 arcsec (the hour angle comes from the dump's own LST, not from here)
            hit = np.nonzero(np.abs(times - jd) < 1e-7)[0]
            if hit.size:
                i = hit[0]
                return float(ra[i]), float(dec[i]), float(pa[i])
        offline_iers()
        n = AHEAD if step_days else 1
        times = jd + np.arange(n) * (step_days or 0.0)
        ra, dec = ph.calc_app_coords(
            lon_coord=self.ra, lat_coord=self.dec, coord_frame="icrs", coord_epoch=2000.0,
            coord_type="sidereal", time_array=times, lst_array=np.full(n, lst),
            telescope_loc=self._loc)
        pa = ph.calc_frame_pos_angle(time_array=times, app_ra=ra, app_dec=dec,
                                     telescope_loc=self._loc, ref_frame="icrs",
                                     ref_epoch="J2000")
        self._ahead = (times, ra, dec, pa)
        return float(ra[0]), float(dec[0]), float(pa[0])

    def uvw(self, jd: float, lst: float, step_days: float | None = None) -> np.ndarray:
        """``[Nbls, 3]`` UVW at ``jd`` (the dump's midpoint) with the writer's ``lst``;
        ``step_days``: the dumps' spacing, to compute the coming dumps' coordinates now."""
        from pyuvdata.utils import phasing as ph

        n = self.ant_1.size
        app_ra, app_dec, pa = (np.array([v]) for v in self._apparent(jd, lst, step_days))
        return ph.calc_uvw(
            app_ra=np.repeat(app_ra, n), app_dec=np.repeat(app_dec, n),
            frame_pa=np.repeat(pa, n), lst_array=np.full(n, lst), use_ant_pos=True,
            antenna_positions=np.asarray(self.site.antenna_positions, np.float64),
            antenna_numbers=np.asarray(self.site.antenna_numbers), ant_1_array=self.ant_1,
            ant_2_array=self.ant_2, telescope_lat=np.deg2rad(self.site.latitude_deg),
            telescope_lon=np.deg2rad(self.site.longitude_deg))

    @staticmethod
    def factors(w_m: np.ndarray, freq_hz: np.ndarray) -> np.ndarray:
        """``[Nbls, Nfreqs]`` complex128 ``exp(-2 pi i w nu / c)``: what phasing multiplies an
        unprojected visibility (w 0) by (pyuvdata's ``_apply_w_proj``)."""
        w_lambda = w_m.reshape(-1, 1) * (1.0 / C_M_S) * np.asarray(freq_hz).reshape(1, -1)
        return np.exp((-2j * np.pi) * w_lambda)
