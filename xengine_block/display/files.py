"""The display over UVH5 files (``xengine view``): any file pyuvdata reads, ours or another
writer's, its dumps numbered from 0 in time order across the files.

Only the files given are ever opened: each is read once, at start, for its metadata
(``read_data=False``: times, antennas, channels, polarisations), and its data when a request
first needs one of its dumps, kept in a cache bounded in bytes (least recently used file
dropped first), so hours of files take the memory of a few. No request names a path: a dump
is an index into the list made at start.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..outputs.times import jd_to_unix, load_time_tables
from .model import Baselines, Dump, ParamError, flag_summary

#: Bytes of dumps the file cache keeps (a file larger than this is still read, alone).
CACHE_BYTES = 1 << 30


class ViewError(ValueError):
    """A file cannot be shown: one line naming it."""


@dataclass(frozen=True)
class _Entry:
    path: Path
    time_jd: float


def _pol_names(numbers: Sequence[int]) -> tuple[str, ...]:
    from pyuvdata import utils

    return tuple(str(utils.polnum2str(int(n))).lower() for n in numbers)


class FileDumps:
    """The dumps of ``paths`` (UVH5 files of one layout: the same channels and polarisations;
    their times may interleave but no time may repeat)."""

    live = False

    def __init__(self, paths: Sequence[str | Path], cache_bytes: int = CACHE_BYTES) -> None:
        import pyuvdata

        if not paths:
            raise ViewError("no file given")
        load_time_tables()  # offline earth-rotation tables: pyuvdata checks LSTs against them
        self.paths = [Path(p) for p in paths]
        self.cache_bytes = cache_bytes
        entries: list[_Entry] = []
        first = None
        for path in self.paths:
            try:
                uv = pyuvdata.UVData.from_file(str(path), read_data=False, file_type="uvh5")
            except Exception as exc:  # pyuvdata raises many kinds; each file is one line
                reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                raise ViewError(f"{path}: not a UVH5 file pyuvdata reads ({reason})") from None
            shape = (uv.freq_array.ravel().tolist(), _pol_names(uv.polarization_array))
            if first is None:
                first = (path, shape)
            elif shape != first[1]:
                raise ViewError(f"{path}: its channels or polarisations differ from "
                                f"{first[0]}'s (view files of one instance's band together)")
            entries += [_Entry(path, float(t)) for t in np.unique(uv.time_array)]
        entries.sort(key=lambda e: e.time_jd)
        for a, b in zip(entries, entries[1:], strict=False):
            if a.time_jd == b.time_jd:
                raise ViewError(f"{a.path} and {b.path} both hold time JD {a.time_jd!r}")
        self.entries = entries
        self.freq_hz = np.asarray(first[1][0], np.float64)
        self.pols = first[1][1]
        self._cache: OrderedDict[Path, dict[float, Dump]] = OrderedDict()
        self._lock = threading.Lock()

    # ---- the store interface the API reads ---------------------------------------------------
    def count(self) -> tuple[int, int]:
        """(first index held, dumps): every dump of the files is held."""
        return 0, len(self.entries)

    def dump(self, index: int) -> Dump:
        entry = self.entries[index]
        return self._dumps_of(entry.path)[entry.time_jd]

    def status(self) -> dict[str, Any]:
        last = self.dump(len(self.entries) - 1)
        return {"source": "files", "files": [p.name for p in self.paths],
                "dumps": len(self.entries), "first_dump": 0,
                "time_unix": jd_to_unix(self.entries[-1].time_jd),
                "nants": len(last.baselines.antennas), "antennas": last.baselines.antennas,
                "nfreq": int(self.freq_hz.size), "freq_hz": self.freq_hz.tolist(),
                "pols": list(self.pols), "integration_s": last.integration_s,
                "stale": False}

    def health(self, index: int) -> dict[str, Any]:
        lo = max(0, index - 63)
        return {"source": "files",
                "series": [dict(flag_summary(self.dump(i)), dump=i)
                           for i in range(lo, index + 1)]}

    # ---- reading ------------------------------------------------------------------------------
    def _dumps_of(self, path: Path) -> dict[float, Dump]:
        with self._lock:
            dumps = self._cache.get(path)
            if dumps is not None:
                self._cache.move_to_end(path)
                return dumps
            dumps = self._read(path)
            self._cache[path] = dumps
            total = sum(d.nbytes for ds in self._cache.values() for d in ds.values())
            while len(self._cache) > 1 and total > self.cache_bytes:
                _, dropped = self._cache.popitem(last=False)
                total -= sum(d.nbytes for d in dropped.values())
            return dumps

    def _read(self, path: Path) -> dict[float, Dump]:
        import pyuvdata

        try:
            uv = pyuvdata.UVData.from_file(str(path), file_type="uvh5")
        except Exception as exc:  # changed on disk since start: the request is refused
            raise ParamError(f"dump: {path.name} can no longer be read ({exc})") from None
        data = uv.data_array.reshape(uv.Nblts, uv.Nfreqs, uv.Npols)
        flags = uv.flag_array.reshape(data.shape)
        nsamples = uv.nsample_array.reshape(data.shape).astype(np.float32, copy=False)
        freq = uv.freq_array.ravel().astype(np.float64)
        pols = _pol_names(uv.polarization_array)
        out: dict[float, Dump] = {}
        layouts: dict[bytes, Baselines] = {}
        for t in np.unique(uv.time_array):
            rows = np.flatnonzero(uv.time_array == t)
            a1, a2 = uv.ant_1_array[rows], uv.ant_2_array[rows]
            key = a1.tobytes() + a2.tobytes()
            bl = layouts.setdefault(key, Baselines.of(a1, a2))  # one per layout, shared
            out[float(t)] = Dump(float(t), freq, pols, bl, data[rows], flags[rows],
                                 nsamples[rows], float(uv.integration_time[rows[0]]),
                                 sequence=path.name)
        return out
