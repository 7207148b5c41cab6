"""The array description: telescope, site and antennas (docs/design.md, "Geometry", "Ring
headers" and "UVH5 conventions").

One :class:`ArrayDescription` travels in every capture ring header (``to_dict``) so downstream
blocks (UVH5 writer, quick-look) need no side channel. It holds what an observatory's array
configuration holds: the telescope name, the site (WGS84 geodetic latitude, longitude, altitude)
and per antenna a name, a number and a position east/north/up of the site in metres.

Conventions written down once:

- Two streams per antenna: stream ``s = 2 * antenna_index + pol``, pol 0 = X, 1 = Y.
- ``antenna_positions`` are ECEF positions minus the site's ECEF position, metres (what UVH5
  stores); the ENU -> ECEF rotation is :attr:`ArrayDescription.enu_to_ecef`.
- uvw of a baseline (ant_1, ant_2) is ``position(ant_2) - position(ant_1)`` (docs/design.md,
  "Sign and conjugation").

The default array is the MWA's 128 tiles shipped as pyuvdata package data
(``pyuvdata/data/mwa128_ant_layouts.npz``: ``ENH`` east/north/height-above-sea offsets and
``arrcent``, the array centre in ECEF), 256 streams: the published design's S.

Array files are TOML (read with :mod:`tomllib`; the exact form :meth:`ArrayDescription.to_toml`
writes is read by :func:`parse_array_toml` ten times faster, to the same values)::

    telescope_name = "MWA"
    instrument = "xengine_block"      # optional, defaults to telescope_name
    x_orientation = "east"            # optional

    [site]
    latitude_deg = -26.703319
    longitude_deg = 116.67081
    altitude_m = 377.0

    [[antenna]]
    name = "Tile001"
    number = 0
    enu_m = [-149.785, 265.814, 0.011]
    flagged = true                    # optional: its baselines written flagged, data kept

Invalid content raises :class:`ArrayError` naming the field and what was expected.
"""

from __future__ import annotations

import math
import os
import re
import tomllib
from collections.abc import Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

#: WGS84 ellipsoid (the frame UVH5 positions and astropy's geodetic coordinates use).
WGS84_A = 6378137.0
WGS84_F = 1.0 / 298.257223563
WGS84_E2 = WGS84_F * (2.0 - WGS84_F)

#: Polarisations per antenna (X, Y) and their names, in stream order.
POLS = ("X", "Y")

_TOP_KEYS = {"telescope_name", "instrument", "x_orientation", "site", "antenna"}
_SITE_KEYS = {"latitude_deg", "longitude_deg", "altitude_m"}
_ANT_KEYS = {"name", "number", "enu_m"}
_ANT_OPTIONAL = {"flagged"}
_X_ORIENTATIONS = ("east", "north")


class ArrayError(ValueError):
    """An array description field is invalid; the message names the field."""


def ecef_from_lla(lat_deg: float, lon_deg: float, alt_m: float) -> np.ndarray:
    """WGS84 geodetic latitude/longitude (degrees) and height (m) -> ECEF (m)."""
    lat, lon = math.radians(lat_deg), math.radians(lon_deg)
    n = WGS84_A / math.sqrt(1.0 - WGS84_E2 * math.sin(lat) ** 2)
    return np.array([(n + alt_m) * math.cos(lat) * math.cos(lon),
                     (n + alt_m) * math.cos(lat) * math.sin(lon),
                     (n * (1.0 - WGS84_E2) + alt_m) * math.sin(lat)])


def lla_from_ecef(xyz: Sequence[float]) -> tuple[float, float, float]:
    """ECEF (m) -> WGS84 latitude, longitude (degrees), height (m); iterates to < 1e-12 rad."""
    x, y, z = (float(v) for v in xyz)
    lon = math.atan2(y, x)
    p = math.hypot(x, y)
    lat = math.atan2(z, p * (1.0 - WGS84_E2))
    for _ in range(20):
        n = WGS84_A / math.sqrt(1.0 - WGS84_E2 * math.sin(lat) ** 2)
        alt = p / math.cos(lat) - n
        new = math.atan2(z, p * (1.0 - WGS84_E2 * n / (n + alt)))
        if abs(new - lat) < 1e-13:
            lat = new
            break
        lat = new
    n = WGS84_A / math.sqrt(1.0 - WGS84_E2 * math.sin(lat) ** 2)
    alt = p / math.cos(lat) - n
    return math.degrees(lat), math.degrees(lon), alt


def enu_to_ecef_rotation(lat_deg: float, lon_deg: float) -> np.ndarray:
    """3x3 matrix R with ``ecef_offset = R @ enu``; its columns are the E, N, U unit vectors."""
    lat, lon = math.radians(lat_deg), math.radians(lon_deg)
    sl, cl, so, co = math.sin(lat), math.cos(lat), math.sin(lon), math.cos(lon)
    return np.array([[-so, -sl * co, cl * co],
                     [co, -sl * so, cl * so],
                     [0.0, cl, sl]])


def _number(value: Any, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ArrayError(f"{field} must be a number, got {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise ArrayError(f"{field} must be finite, got {value!r}")
    return value


def _require(d: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in d:
        raise ArrayError(f"{where}{key} is required")
    return d[key]


def _check_keys(d: Any, allowed: set[str], where: str) -> None:
    if not isinstance(d, Mapping):
        raise ArrayError(f"{where.rstrip('.') or 'array description'} must be a table, "
                         f"got {type(d).__name__}")
    unknown = sorted(set(d) - allowed)
    if unknown:
        raise ArrayError(f"unknown field(s) {', '.join(where + k for k in unknown)}; "
                         f"expected {', '.join(sorted(allowed))}")


# The form ArrayDescription.to_toml writes, line by line (parse_array_toml's fast path).
_STR = r'"([^"\\\x00-\x1f\x7f]*)"'  # a basic string without escapes or control characters
_INT = r"(-?(?:0|[1-9][0-9]*))"
_NUM = r"(-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:e[+-]?[0-9]+)?)"  # TOML integer or float (repr's)
_HEAD = "\n".join([f"telescope_name = {_STR}", f"instrument = {_STR}",
                   f"x_orientation = {_STR}", "", r"\[site\]", f"latitude_deg = {_NUM}",
                   f"longitude_deg = {_NUM}", f"altitude_m = {_NUM}", ""])
_ANT = "\n".join(["", r"\[\[antenna\]\]", f"name = {_STR}", f"number = {_INT}",
                  rf"enu_m = \[{_NUM}, {_NUM}, {_NUM}\]", ""])
_CANONICAL = re.compile(f"{_HEAD}(?:{_ANT})+")
_HEAD_RE, _ANT_RE = re.compile(_HEAD), re.compile(_ANT)


def _toml_number(text: str) -> int | float:
    """A TOML number as :mod:`tomllib` reads it: a float where it has a fraction or exponent."""
    return float(text) if "." in text or "e" in text else int(text)


def parse_array_toml(text: str) -> dict[str, Any]:
    """The document of an array file's ``text``: what :func:`tomllib.loads` returns.

    Why: tomllib reads a 128-antenna file in milliseconds, serially before reprocessing's first
    integration. The form :meth:`ArrayDescription.to_toml` writes (those lines, single spaces,
    strings without escapes, repr's numbers) is matched whole by one regular expression and
    converted as tomllib converts (``float``/``int`` of the same digits), several times faster.
    Any other
    text (comments, other spacing or order, escapes, ``inf``) goes to tomllib, whose errors are
    the ones raised."""
    if _CANONICAL.fullmatch(text) is None:
        return tomllib.loads(text)
    head = _HEAD_RE.match(text)
    name, instrument, x_orientation, lat, lon, alt = head.groups()
    num = _toml_number
    return {"telescope_name": name, "instrument": instrument, "x_orientation": x_orientation,
            "site": {"latitude_deg": num(lat), "longitude_deg": num(lon), "altitude_m": num(alt)},
            "antenna": [{"name": a, "number": int(k), "enu_m": [num(e), num(n), num(u)]}
                        for a, k, e, n, u in _ANT_RE.findall(text, head.end())]}


class ArrayDescription:
    """Telescope, site and antennas; validated on construction.

    Parameters
    ----------
    telescope_name : telescope (UVH5 ``telescope_name``).
    latitude_deg, longitude_deg, altitude_m : WGS84 site (the ENU origin).
    antenna_names : unique ASCII names, one per antenna.
    antenna_numbers : unique non-negative integers, one per antenna.
    enu_m : ``[nant, 3]`` positions east, north, up of the site, metres.
    instrument : UVH5 ``instrument`` (default: the telescope name).
    x_orientation : direction of the X feeds, ``"east"`` or ``"north"``.
    flagged : names of antennas known bad (an MWA metafits' ``Flag``): correlated and
        written like the others, their baselines flagged in UVH5 (data and nsamples kept).
    """

    def __init__(self, telescope_name: str, latitude_deg: float, longitude_deg: float,
                 altitude_m: float, antenna_names: Sequence[str],
                 antenna_numbers: Sequence[int], enu_m: Any, *,
                 instrument: str | None = None, x_orientation: str = "east",
                 flagged: Sequence[str] = ()) -> None:
        if not isinstance(telescope_name, str) or not telescope_name:
            raise ArrayError(f"telescope_name must be a non-empty string, got {telescope_name!r}")
        instrument = telescope_name if instrument is None else instrument
        if not isinstance(instrument, str) or not instrument:
            raise ArrayError(f"instrument must be a non-empty string, got {instrument!r}")
        if x_orientation not in _X_ORIENTATIONS:
            raise ArrayError(f"x_orientation must be one of {_X_ORIENTATIONS}, "
                             f"got {x_orientation!r}")
        lat = _number(latitude_deg, "site.latitude_deg")
        lon = _number(longitude_deg, "site.longitude_deg")
        alt = _number(altitude_m, "site.altitude_m")
        if not -90.0 <= lat <= 90.0:
            raise ArrayError(f"site.latitude_deg must be in [-90, 90], got {lat}")
        if not -180.0 <= lon <= 360.0:
            raise ArrayError(f"site.longitude_deg must be in [-180, 360], got {lon}")
        if not -12000.0 <= alt <= 100000.0:
            raise ArrayError(f"site.altitude_m must be in [-12000, 100000] m, got {alt}")
        names = list(antenna_names)
        numbers = list(antenna_numbers)
        if not names:
            raise ArrayError("antenna: at least one antenna is required")
        for i, name in enumerate(names):
            if not isinstance(name, str) or not name or not name.isascii():
                raise ArrayError(f"antenna[{i}].name must be a non-empty ASCII string, "
                                 f"got {name!r}")
        if len(numbers) != len(names):
            raise ArrayError(f"antenna_numbers has {len(numbers)} entries for "
                             f"{len(names)} antenna names")
        for i, num in enumerate(numbers):
            if isinstance(num, bool) or not isinstance(num, (int, np.integer)) or num < 0:
                raise ArrayError(f"antenna[{i}].number must be a non-negative integer, "
                                 f"got {num!r}")
        for field, values in (("name", names), ("number", numbers)):
            seen: dict[Any, int] = {}
            for i, v in enumerate(values):
                if v in seen:
                    raise ArrayError(f"antenna[{i}].{field} {v!r} duplicates "
                                     f"antenna[{seen[v]}].{field}")
                seen[v] = i
        try:
            enu = np.array(enu_m, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise ArrayError(f"enu_m must be numbers of shape [{len(names)}, 3]: {exc}") from None
        if enu.shape != (len(names), 3):
            raise ArrayError(f"enu_m must have shape [{len(names)}, 3] (one east, north, up "
                             f"triple per antenna), got {list(enu.shape)}")
        if not np.all(np.isfinite(enu)):
            bad = int(np.argwhere(~np.isfinite(enu))[0, 0])
            raise ArrayError(f"antenna[{bad}].enu_m must be finite, got {enu[bad].tolist()}")
        enu.flags.writeable = False
        bad = set(flagged)
        unknown = sorted(bad - set(names), key=str)
        if unknown:
            raise ArrayError(f"flagged antenna(s) {', '.join(map(repr, unknown))} are not in "
                             f"the array")
        self.telescope_name = telescope_name
        self.instrument = instrument
        self.x_orientation = x_orientation
        self.latitude_deg, self.longitude_deg, self.altitude_m = lat, lon, alt
        self.antenna_names: tuple[str, ...] = tuple(names)
        self.antenna_numbers: tuple[int, ...] = tuple(int(n) for n in numbers)
        self.enu_m = enu
        #: The flagged antennas' names, in the array's order.
        self.flagged: tuple[str, ...] = tuple(n for n in names if n in bad)

    # ------------------------------------------------------------------ sizes and streams
    @property
    def nant(self) -> int:
        return len(self.antenna_names)

    @property
    def nstream(self) -> int:
        """Streams S = 2 per antenna (X, Y)."""
        return 2 * self.nant

    @staticmethod
    def stream_index(antenna_index: int, pol: int) -> int:
        """Stream of (antenna index, pol 0 = X / 1 = Y): ``2 * antenna_index + pol``."""
        return 2 * antenna_index + pol

    @staticmethod
    def stream_antenna_pol(stream: int) -> tuple[int, int]:
        """(antenna index, pol) of a stream."""
        return divmod(stream, 2)

    @property
    def flagged_mask(self) -> np.ndarray:
        """``[nant]`` bool: which antennas are flagged."""
        return np.array([n in self.flagged for n in self.antenna_names], bool)

    @property
    def stream_names(self) -> list[str]:
        """``"<antenna>X"`` / ``"<antenna>Y"`` in stream order (logs, plots)."""
        return [f"{name}{pol}" for name in self.antenna_names for pol in POLS]

    # ------------------------------------------------------------------ positions
    @cached_property
    def site_ecef(self) -> np.ndarray:
        """Site position in ECEF metres (WGS84)."""
        return ecef_from_lla(self.latitude_deg, self.longitude_deg, self.altitude_m)

    @cached_property
    def enu_to_ecef(self) -> np.ndarray:
        """Rotation R with ``ecef - site_ecef = R @ enu`` (columns: E, N, U unit vectors)."""
        return enu_to_ecef_rotation(self.latitude_deg, self.longitude_deg)

    @property
    def antenna_positions(self) -> np.ndarray:
        """``[nant, 3]`` ECEF positions minus the site's ECEF position, metres (UVH5's)."""
        return self.enu_m @ self.enu_to_ecef.T

    @property
    def ecef_m(self) -> np.ndarray:
        """``[nant, 3]`` absolute ECEF positions, metres."""
        return self.site_ecef + self.antenna_positions

    def earth_location(self):
        """The site as an astropy ``EarthLocation`` (for AltAz and LST)."""
        from astropy import units as u
        from astropy.coordinates import EarthLocation
        return EarthLocation.from_geodetic(self.longitude_deg * u.deg, self.latitude_deg * u.deg,
                                           self.altitude_m * u.m)

    # ------------------------------------------------------------------ derived arrays
    def subset(self, n_ant: int) -> ArrayDescription:
        """The first ``n_ant`` antennas (same site): small examples and tests."""
        if isinstance(n_ant, bool) or not isinstance(n_ant, int) or not 1 <= n_ant <= self.nant:
            raise ArrayError(f"subset n_ant must be an integer in [1, {self.nant}], got {n_ant!r}")
        return self.select(range(n_ant))

    def select(self, indices: Sequence[int]) -> ArrayDescription:
        """The antennas at ``indices``, in that order (same site, flags kept)."""
        keep = list(indices)
        names = [self.antenna_names[i] for i in keep]
        return ArrayDescription(self.telescope_name, self.latitude_deg, self.longitude_deg,
                                self.altitude_m, names, [self.antenna_numbers[i] for i in keep],
                                self.enu_m[keep], instrument=self.instrument,
                                x_orientation=self.x_orientation,
                                flagged=[n for n in names if n in self.flagged])

    # ------------------------------------------------------------------ serialisation
    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form (ring headers); ``from_dict`` inverts it exactly."""
        return {
            "telescope_name": self.telescope_name,
            "instrument": self.instrument,
            "x_orientation": self.x_orientation,
            "site": {"latitude_deg": self.latitude_deg, "longitude_deg": self.longitude_deg,
                     "altitude_m": self.altitude_m},
            "antenna": [{"name": n, "number": k, "enu_m": p,
                         **({"flagged": True} if n in self.flagged else {})}
                        for n, k, p in zip(self.antenna_names, self.antenna_numbers,
                                           self.enu_m.tolist(), strict=True)],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ArrayDescription:
        """Build from ``to_dict`` output or a parsed TOML file, validating every field."""
        _check_keys(d, _TOP_KEYS, "")
        site = _require(d, "site", "")
        _check_keys(site, _SITE_KEYS, "site.")
        ants = _require(d, "antenna", "")
        if not isinstance(ants, Sequence) or isinstance(ants, str):
            raise ArrayError("antenna must be an array of tables ([[antenna]] in TOML)")
        for i, a in enumerate(ants):
            _check_keys(a, _ANT_KEYS | _ANT_OPTIONAL, f"antenna[{i}].")
            for key in _ANT_KEYS:
                _require(a, key, f"antenna[{i}].")
            if not isinstance(a.get("flagged", False), bool):
                raise ArrayError(f"antenna[{i}].flagged must be true or false, got "
                                 f"{a['flagged']!r}")
            pos = a["enu_m"]
            if not isinstance(pos, Sequence) or isinstance(pos, str) or len(pos) != 3:
                raise ArrayError(f"antenna[{i}].enu_m must be [east, north, up] in metres, "
                                 f"got {pos!r}")
            for j, v in enumerate(pos):
                _number(v, f"antenna[{i}].enu_m[{j}]")
        return cls(_require(d, "telescope_name", ""),
                   _require(site, "latitude_deg", "site."),
                   _require(site, "longitude_deg", "site."),
                   _require(site, "altitude_m", "site."),
                   [a["name"] for a in ants], [a["number"] for a in ants],
                   [a["enu_m"] for a in ants],
                   instrument=d.get("instrument"), x_orientation=d.get("x_orientation", "east"),
                   flagged=[a["name"] for a in ants if a.get("flagged", False)])

    @classmethod
    def from_toml(cls, path: str | os.PathLike) -> ArrayDescription:
        """Read an array file (format in the module docstring)."""
        try:
            with open(path, "rb") as f:
                d = parse_array_toml(f.read().decode())
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ArrayError(f"{path}: not valid TOML: {exc}") from None
        try:
            return cls.from_dict(d)
        except ArrayError as exc:
            raise ArrayError(f"{path}: {exc}") from None

    def to_toml(self) -> str:
        """The array file text (``from_toml`` reads it back exactly: floats use repr)."""
        lines = [f"telescope_name = {_toml_str(self.telescope_name)}",
                 f"instrument = {_toml_str(self.instrument)}",
                 f"x_orientation = {_toml_str(self.x_orientation)}", "", "[site]",
                 f"latitude_deg = {self.latitude_deg!r}",
                 f"longitude_deg = {self.longitude_deg!r}",
                 f"altitude_m = {self.altitude_m!r}"]
        for name, num, pos in zip(self.antenna_names, self.antenna_numbers,
                                  self.enu_m.tolist(), strict=True):
            lines += ["", "[[antenna]]", f"name = {_toml_str(name)}", f"number = {num}",
                      f"enu_m = [{', '.join(repr(v) for v in pos)}]"]
            if name in self.flagged:
                lines.append("flagged = true")
        return "\n".join(lines) + "\n"

    def write_toml(self, path: str | os.PathLike) -> None:
        Path(path).write_text(self.to_toml(), encoding="ascii")

    # ------------------------------------------------------------------ comparisons
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ArrayDescription):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    def __hash__(self) -> int:
        return hash((self.telescope_name, self.antenna_names, self.enu_m.tobytes()))

    def __repr__(self) -> str:
        return (f"ArrayDescription({self.telescope_name!r}, {self.nant} antennas, "
                f"lat={self.latitude_deg:.6f}, lon={self.longitude_deg:.6f}, "
                f"alt={self.altitude_m:.1f} m)")


def _toml_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def mwa128() -> ArrayDescription:
    """The MWA's 128 tiles from pyuvdata's package data (256 streams: the published design's S).

    Site from ``arrcent`` (ECEF -> WGS84); ENU up = tile height above sea level minus the site
    altitude. Tiles are named ``Tile001``..``Tile128`` and numbered 0..127 in file order
    (the file carries no names).
    """
    try:
        import pyuvdata
    except ImportError as exc:  # pragma: no cover - pyuvdata is an install requirement
        raise ImportError("the default array reads pyuvdata's mwa128_ant_layouts.npz: "
                          "pip install pyuvdata") from exc
    path = Path(pyuvdata.__file__).parent / "data" / "mwa128_ant_layouts.npz"
    with np.load(path) as d:
        enh = np.round(np.asarray(d["ENH"], np.float64), 3)  # float32 in the file; mm given
        arrcent = np.asarray(d["arrcent"], np.float64)
    lat, lon, alt = lla_from_ecef(arrcent)
    # Snap float noise from the ECEF round trip (the file's centre is exact to ~1e-9 m).
    lat, lon, alt = round(lat, 9), round(lon, 9), round(alt, 6)
    enu = enh.copy()
    enu[:, 2] = np.round(enu[:, 2] - alt, 3)
    n = len(enu)
    return ArrayDescription("MWA", lat, lon, alt, [f"Tile{i + 1:03d}" for i in range(n)],
                            list(range(n)), enu, instrument="MWA", x_orientation="east")


def default_array(n_ant: int | None = None) -> ArrayDescription:
    """The default array (MWA 128 tiles), or its first ``n_ant`` antennas."""
    arr = mwa128()
    return arr if n_ant is None else arr.subset(n_ant)
