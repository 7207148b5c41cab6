"""An MWA observation's metafits (``OBSID_metafits.fits``) as the array of ``--array``: what MWA
ships with every observation, read with astropy's FITS reader.

What is read, and the sources that agree on it (MWATelescope/mwalib ``src/rfinput/mod.rs``,
``src/metafits_context/mod.rs``, ``src/antenna/mod.rs``; mwax_udp2sub ``read_metafits``;
pyuvdata ``uvdata/mwa_corr_fits.py`` ``read_metafits``):

- the ``TILEDATA`` binary table (mwalib and udp2sub find it by that name), one row per input
  (``NINPUTS`` rows): ``Antenna`` (the antenna's index, 0..N-1), ``Tile`` (its tile id),
  ``TileName``, ``Pol`` (``X`` or ``Y``), ``Flag``, ``North``, ``East``, ``Height`` (metres);
- the antennas in ``Antenna`` order, which is the MWAX subfile's input order (udp2sub writes
  input ``Antenna << 1 | (Pol == 'Y')``; mwalib sorts its rf inputs by the same key): named by
  ``TileName`` and numbered by tile id, as mwalib's ``Antenna.tile_name`` / ``tile_id`` and
  pyuvdata's ``antenna_names`` / ``antenna_numbers``; position from the X input's row (mwalib's
  ``Antenna::new``; pyuvdata's odd rows);
- an antenna is flagged when either of its inputs has ``Flag`` 1 (mwalib: ``flagged: flag ==
  1`` per input; Birli flags the tile): it is correlated and written like the others, its
  baselines flagged (:class:`~xengine_block.array.ArrayDescription` ``flagged``);
- the site: mwalib's ``MWALIB_MWA_LATITUDE_RADIANS``, ``MWALIB_MWA_LONGITUDE_RADIANS`` and
  ``MWALIB_MWA_ALTITUDE_METRES`` (-26d42m11.94986s, 116d40m14.93485s, 377.827 m; the metafits
  carries no site); ``TELESCOP`` and ``INSTRUME`` name the telescope and instrument.

Positions: ``East`` and ``North`` are metres from the array centre (mwalib and pyuvdata say so).
``Height`` is documented there as "from the array centre", but it is metres above sea level in
every metafits of mwalib's test files (367 to 377 m; the site is at 377.827 m), so the up
coordinate is ``Height`` less the site's altitude. pyuvdata's reader takes ``Height`` as the up
coordinate itself, which puts the tiles about 375 m above the site in its ECEF positions; the
baselines (uvw, differences of positions) are the same either way.

Anything else (no ``TILEDATA``, missing columns, a ``Pol`` other than X/Y, an antenna without
both inputs, rows other than ``NINPUTS``, garbage) is an :class:`~xengine_block.array.ArrayError`
of one line.
"""

from __future__ import annotations

import io
import math
import warnings
from typing import Any

import numpy as np

from ..array import ArrayDescription, ArrayError

#: The TILEDATA columns read.
COLUMNS = ("Antenna", "Tile", "TileName", "Pol", "Flag", "North", "East", "Height")
#: mwalib src/lib.rs: the MWA's site.
MWA_LATITUDE_RAD = -0.4660608448386394
MWA_LONGITUDE_RAD = 2.0362898668561042
MWA_ALTITUDE_M = 377.827
#: The first bytes of every FITS file (its primary header's first card).
FITS_MAGIC = b"SIMPLE  ="
#: Suffixes taken as metafits even if their first bytes say otherwise (then refused).
SUFFIXES = (".fits", ".metafits", ".fit")


def looks_fits(raw: bytes) -> bool:
    return raw[:len(FITS_MAGIC)] == FITS_MAGIC


def array_from_metafits(raw: bytes) -> ArrayDescription:
    """The array of a metafits' bytes (module docstring); ArrayError of one line if it is not
    one."""
    from astropy.io import fits

    if not looks_fits(raw):
        raise ArrayError("not a FITS file (no SIMPLE card at its start)")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # astropy warns of what the checks below refuse
            with fits.open(io.BytesIO(raw), memmap=False, lazy_load_hdus=False) as hdus:
                primary = dict(hdus[0].header)
                names = [h.name for h in hdus]
                if "TILEDATA" not in names:
                    raise ArrayError(f"no TILEDATA table (HDUs: {', '.join(names)}): not an MWA "
                                     f"metafits")
                table = hdus["TILEDATA"]
                if not isinstance(table, fits.BinTableHDU):
                    raise ArrayError(f"TILEDATA is not a binary table (an "
                                     f"{type(table).__name__})")
                have = set(table.columns.names)
                missing = [c for c in COLUMNS if c not in have]
                if missing:
                    raise ArrayError(f"TILEDATA lacks column(s) {', '.join(missing)}")
                cols = {c: np.asarray(table.data[c]) for c in COLUMNS}
    except ArrayError:
        raise
    except Exception as exc:  # noqa: BLE001 - astropy raises many types on a damaged file
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ArrayError(f"not a readable FITS file: {text}") from None
    return _array(primary, cols)


def _ints(col: np.ndarray, name: str) -> np.ndarray:
    if col.dtype.kind not in "iu" or col.ndim != 1:
        raise ArrayError(f"TILEDATA {name} must be integers, got {col.dtype} {list(col.shape)}")
    return col.astype(np.int64)


def _array(primary: dict[str, Any], cols: dict[str, np.ndarray]) -> ArrayDescription:
    nrow = len(cols["Antenna"])
    ninputs = primary.get("NINPUTS")
    try:
        ninputs = int(ninputs)
    except (TypeError, ValueError):
        raise ArrayError(f"NINPUTS must be a whole number of inputs, got {ninputs!r}") from None
    if ninputs != nrow:
        raise ArrayError(f"NINPUTS = {ninputs} but TILEDATA has {nrow} rows (udp2sub refuses "
                         f"the same)")
    if nrow == 0 or nrow % 2:
        raise ArrayError(f"TILEDATA has {nrow} rows: two inputs (X, Y) per tile are needed")
    antenna, tile, flag = (_ints(cols[c], c) for c in ("Antenna", "Tile", "Flag"))
    pol = [str(p).strip() for p in cols["Pol"]]
    names = [str(n).strip() for n in cols["TileName"]]
    pos = np.stack([cols[c] for c in ("East", "North", "Height")], axis=1)
    if pos.dtype.kind not in "fiu" or pos.ndim != 2:
        raise ArrayError("TILEDATA East, North and Height must be numbers (metres)")
    pos = pos.astype(np.float64)
    by_ant: dict[int, dict[str, int]] = {}
    for row, (a, p) in enumerate(zip(antenna.tolist(), pol, strict=True)):
        if p not in ("X", "Y"):
            raise ArrayError(f"TILEDATA row {row}: Pol {p!r} is neither X nor Y")
        if p in by_ant.setdefault(a, {}):
            raise ArrayError(f"TILEDATA rows {by_ant[a][p]} and {row}: antenna {a} has two "
                             f"{p} inputs")
        by_ant[a][p] = row
    rows = []
    for a in sorted(by_ant):
        x, y = by_ant[a].get("X"), by_ant[a].get("Y")
        if x is None or y is None:
            raise ArrayError(f"TILEDATA antenna {a} lacks its {'X' if x is None else 'Y'} input")
        if tile[x] != tile[y] or names[x] != names[y]:
            raise ArrayError(f"TILEDATA antenna {a}: its X and Y inputs name different tiles "
                             f"({tile[x]} {names[x]!r}, {tile[y]} {names[y]!r})")
        rows.append((x, y))
    xs = [x for x, _ in rows]
    if not np.isfinite(pos[xs]).all():
        raise ArrayError("TILEDATA East, North and Height must be finite")
    enu = pos[xs] - [0.0, 0.0, MWA_ALTITUDE_M]
    flagged = [names[x] for x, y in rows if flag[x] == 1 or flag[y] == 1]
    telescope = str(primary.get("TELESCOP", "MWA")).strip() or "MWA"
    instrument = str(primary.get("INSTRUME", "")).strip() or None
    return ArrayDescription(telescope, math.degrees(MWA_LATITUDE_RAD),
                            math.degrees(MWA_LONGITUDE_RAD), MWA_ALTITUDE_M,
                            [names[x] for x in xs], [int(tile[x]) for x in xs], enu,
                            instrument=instrument, flagged=flagged)
