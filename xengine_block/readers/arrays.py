"""Which array a recording was made with: our array TOML, a telescope-info file (BLRI's
``telinfo`` YAML/TOML, what COSMIC and ATA users have) or an MWA metafits (:mod:`.metafits`),
matched to the recording's antennas.

Telescope-info files (MydonSolutions/BLRI src/blri/fileformats/telinfo.py
``TelescopeInformation``): ``telescope_name``, ``longitude`` and ``latitude`` (degrees, numbers
or ``D:M:S`` strings), ``altitude`` (m), ``antenna_position_frame`` and ``antennas``, each with
``name``, ``number`` and ``position``. Frames: ``xyz`` is ECEF relative to the site (BLRI writes
these positions unchanged as UVH5 ``antenna_positions``, which pyuvdata defines so; its
``transform_antenna_positions_xyz_to_enu`` rotates them by longitude and latitude, i.e. treats
them as ECEF-aligned), ``ecef`` absolute ECEF (BLRI subtracts the site), ``enu`` east, north,
up of the site in metres.

Matching (:func:`match_antennas`): a recording that names its antennas (GUPPI ``ANTNMSxx``,
ATA's LO letter dropped; DADA ``ANTS``; MWAX ``Tile%03d`` of the tile ids) keeps the array
file's antennas it names, in the array file's order; where the names are not all the array's
but the recording numbers its antennas (MWAX: tile ids) and the numbers are all the array's,
by number (a metafits' antennas are named by ``TileName`` and numbered by tile id: ``HexE6`` is
tile 1006). One that names none takes the array file's antennas in order (BLRI does the same;
a metafits lists them in the MWAX subfile's input order).
Without an array file a single-antenna recording gets its header's telescope, sited from
pyuvdata's known telescopes; a multi-antenna one is refused.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..array import (
    ArrayDescription,
    ArrayError,
    enu_to_ecef_rotation,
    lla_from_ecef,
    parse_array_toml,
)
from .base import RecordingError, RecordingMeta
from .metafits import SUFFIXES as METAFITS_SUFFIXES
from .metafits import array_from_metafits, looks_fits

TELINFO_FRAMES = ("xyz", "ecef", "enu")
_TELINFO_KEYS = {"telescope_name", "longitude", "latitude", "altitude",
                 "antenna_position_frame", "antennas"}


def _degrees(value: Any, field: str) -> float:
    """Degrees from a number or ``D:M:S`` (BLRI parse.degrees_process: the sign of the first
    part applies to all)."""
    if isinstance(value, str):
        parts = value.strip().split(":")
        try:
            first = float(parts[0])
            sign = -1.0 if parts[0].strip().startswith("-") else 1.0
            rest = sum(float(p) / 60 ** (i + 1) for i, p in enumerate(parts[1:]))
        except ValueError:
            raise ArrayError(f"{field} {value!r} is not degrees (a number or D:M:S)") from None
        return first + sign * rest
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ArrayError(f"{field} must be degrees, got {value!r}")
    return float(value)


def is_telinfo(doc: Mapping[str, Any]) -> bool:
    return "antenna_position_frame" in doc or "antennas" in doc


def array_from_telinfo(doc: Mapping[str, Any]) -> ArrayDescription:
    """A telescope-info document (parsed YAML/TOML) as an :class:`ArrayDescription`."""
    missing = sorted(_TELINFO_KEYS - set(doc))
    if missing:
        raise ArrayError(f"telescope info lacks {', '.join(missing)}")
    frame = str(doc["antenna_position_frame"]).lower()
    if frame not in TELINFO_FRAMES:
        raise ArrayError(f"antenna_position_frame must be one of {TELINFO_FRAMES}, got "
                         f"{doc['antenna_position_frame']!r}")
    lat = _degrees(doc["latitude"], "latitude")
    lon = _degrees(doc["longitude"], "longitude")
    alt = doc["altitude"]
    if isinstance(alt, bool) or not isinstance(alt, (int, float)) or not math.isfinite(alt):
        raise ArrayError(f"altitude must be metres, got {alt!r}")
    ants = doc["antennas"]
    if not isinstance(ants, Sequence) or isinstance(ants, str) or not ants:
        raise ArrayError("antennas must be a non-empty list")
    names, numbers, pos = [], [], []
    for i, a in enumerate(ants):
        if not isinstance(a, Mapping):
            raise ArrayError(f"antennas[{i}] must be a table, got {type(a).__name__}")
        for key in ("name", "number", "position"):
            if key not in a:
                raise ArrayError(f"antennas[{i}].{key} is required")
        names.append(str(a["name"]))
        numbers.append(a["number"])
        p = a["position"]
        if (not isinstance(p, Sequence) or isinstance(p, str) or len(p) != 3
                or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in p)):
            raise ArrayError(f"antennas[{i}].position must be 3 numbers (metres), got {p!r}")
        pos.append([float(v) for v in p])
    p = np.array(pos, np.float64)
    rot = enu_to_ecef_rotation(lat, lon)
    if frame == "enu":
        enu = p
    else:
        if frame == "ecef":
            from ..array import ecef_from_lla
            p = p - ecef_from_lla(lat, lon, float(alt))
        enu = p @ rot  # ECEF offsets -> ENU: R^T applied to each row
    return ArrayDescription(str(doc["telescope_name"]), lat, lon, float(alt), names, numbers,
                            enu)


#: Descriptions already made in this process, by file kind and content: reprocessing reads
#: the array file once per recording file (0.8 ms of parsing and checking at 128 antennas,
#: in the serial start of every file); an edited file is different bytes, read anew.
_LOADED: dict[tuple[str, bytes], ArrayDescription] = {}
_LOADED_MAX = 8


def load_array(path: str | os.PathLike) -> ArrayDescription:
    """``--array FILE``: our array TOML (:mod:`~xengine_block.array`), a telescope-info
    YAML/TOML (module docstring), told apart by their keys, or an MWA metafits (a FITS file, by
    its first bytes or suffix). ArrayError names the file."""
    path = Path(path)
    suffix = path.suffix.lower()
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ArrayError(f"{path}: {exc.strerror or exc}") from None
    kind = ("metafits" if looks_fits(raw) or suffix in METAFITS_SUFFIXES else
            "yaml" if suffix in (".yaml", ".yml") else "toml")
    yaml_file = kind == "yaml"
    known = _LOADED.get((kind, raw))
    if known is not None:
        return known  # immutable: tuples and a read-only enu_m
    if kind == "metafits":
        try:
            array = array_from_metafits(raw)
        except ArrayError as exc:
            raise ArrayError(f"{path}: {exc}") from None
        return _remember(kind, raw, array)
    if yaml_file:
        try:
            import yaml
        except ImportError:
            raise ArrayError(f"{path}: reading YAML needs PyYAML (pip install pyyaml, "
                             f"extra 'recordings')") from None
    try:
        doc = yaml.safe_load(raw.decode()) if yaml_file else parse_array_toml(raw.decode())
    except Exception as exc:  # noqa: BLE001 - YAML and TOML parsers raise their own types
        raise ArrayError(f"{path}: not valid {path.suffix.lstrip('.') or 'TOML'}: "
                         f"{str(exc).splitlines()[0]}") from None
    if not isinstance(doc, Mapping):
        raise ArrayError(f"{path}: expected a table of keys, got {type(doc).__name__}")
    try:
        array = array_from_telinfo(doc) if is_telinfo(doc) else ArrayDescription.from_dict(doc)
    except ArrayError as exc:
        raise ArrayError(f"{path}: {exc}") from None
    return _remember(kind, raw, array)


def _remember(kind: str, raw: bytes, array: ArrayDescription) -> ArrayDescription:
    if len(_LOADED) >= _LOADED_MAX:
        _LOADED.clear()
    _LOADED[kind, raw] = array
    return array


def known_site(telescope: str | None) -> tuple[str, float, float, float] | None:
    """(name, latitude, longitude, altitude) of a telescope pyuvdata knows (offline: its own
    ``KNOWN_TELESCOPES``), matched without case; None otherwise."""
    if not telescope:
        return None
    from pyuvdata.telescopes import KNOWN_TELESCOPES

    for name, info in KNOWN_TELESCOPES.items():
        if name.lower() == telescope.strip().lower() and info.get("location") is not None:
            loc = info["location"]
            lat, lon, alt = lla_from_ecef([float(loc.x.value), float(loc.y.value),
                                           float(loc.z.value)])
            return name, lat, lon, alt
    return None


def match_antennas(meta: RecordingMeta, array: ArrayDescription | None,
                   where: str = "") -> tuple[ArrayDescription, list[int]]:
    """(the recorded antennas as an array, in the array file's order; the file antenna index
    of each). RecordingError (one line, saying what to pass) when they cannot be matched."""
    if array is None:
        if meta.nant > 1:
            raise RecordingError(f"{where}{meta.nant} antennas and no positions: pass --array "
                                 f"FILE (an array TOML or a telinfo YAML/TOML naming "
                                 f"{_names(meta)})")
        site = known_site(meta.telescope)
        if site is None:
            raise RecordingError(f"{where}telescope {meta.telescope!r} has no site known here "
                                 f"(pyuvdata knows {_known()}): pass --array FILE with its site")
        name, lat, lon, alt = site
        ant = (meta.antenna_names or (name,))[0]
        return ArrayDescription(name, lat, lon, alt, [ant], [0], [[0.0, 0.0, 0.0]]), [0]
    if meta.antenna_names is None and meta.antenna_numbers is not None:
        return _match_numbers(meta.antenna_numbers, array, where)
    if meta.antenna_names is None:
        if array.nant != meta.nant:
            raise RecordingError(f"{where}the recording names none of its {meta.nant} "
                                 f"antennas, so they are the array file's in order, but "
                                 f"--array lists {array.nant}")
        return array, list(range(meta.nant))
    recorded, listed = meta.antenna_names, array.antenna_names
    missing = [n for n in recorded if n not in listed]
    numbers = meta.antenna_numbers
    if missing and numbers is not None and set(numbers) <= set(array.antenna_numbers):
        recorded, listed, missing = numbers, array.antenna_numbers, []  # by number (tile id)
    if missing:
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        ids = ""
        if numbers is not None:
            lost = [str(k) for k in numbers if k not in array.antenna_numbers]
            ids = (f" (nor number(s) {', '.join(lost[:5])}{' ...' if len(lost) > 5 else ''}: "
                   f"not by name, not by number)")
        raise RecordingError(f"{where}--array lacks recorded antenna(s) "
                             f"{', '.join(missing[:5])}{more}{ids}")
    return _recorded_subset(array, recorded, listed)


def _recorded_subset(array: ArrayDescription, recorded: Sequence, listed: Sequence,
                     ) -> tuple[ArrayDescription, list[int]]:
    """The antennas of ``array`` (keys ``listed``: its names or numbers) that the recording
    has (``recorded``: the same keys, in the file's order), in the array's order, and the
    file antenna of each."""
    index = {n: i for i, n in enumerate(recorded)}
    keep = [i for i, n in enumerate(listed) if n in index]
    return array.select(keep), [index[listed[i]] for i in keep]


def _match_numbers(numbers: Sequence[int], array: ArrayDescription,
                   where: str) -> tuple[ArrayDescription, list[int]]:
    """:func:`match_antennas` for a recording that numbers its antennas but names none (LWA
    stands): the array file's antennas of those numbers, in the array file's order."""
    have = set(array.antenna_numbers)
    missing = [n for n in numbers if n not in have]
    if missing:
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        raise RecordingError(f"{where}--array lacks recorded antenna number(s) "
                             f"{', '.join(map(str, missing[:5]))}{more} (the recording's "
                             f"stand numbers)")
    return _recorded_subset(array, numbers, array.antenna_numbers)


def _names(meta: RecordingMeta) -> str:
    if not meta.antenna_names:
        return f"its {meta.nant} antennas in order"
    shown = ", ".join(meta.antenna_names[:4])
    return shown + (", ..." if meta.nant > 4 else "")


def _known() -> str:
    from pyuvdata.telescopes import KNOWN_TELESCOPES
    return ", ".join(sorted(KNOWN_TELESCOPES))
