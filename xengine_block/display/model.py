"""The display's data model: dumps as a UVH5 file holds them, and the questions the page asks
of them (a baseline's spectrum, every input's bandpass, the baseline matrix, a waterfall).

A :class:`Dump` is one integration in the UVH5 convention (docs/design.md, "UVH5
conventions"): rows of antenna pairs ``(ant_1, ant_2)`` by antenna *number*, ``[Nbls, Nfreqs,
Npols]`` visibilities, flags and nsamples, whatever made it: pyuvdata reading a file
(:mod:`.files`) or the live chain's integrated frames turned into rows by the UVH5 writer's
own row pass (:mod:`.live`). The queries read those rows exactly as pyuvdata's
``UVData.get_data`` does: a pair asked for in the other order than the file's is the stored
row conjugated, with its polarisation's feeds swapped (``xy`` <-> ``yx``), so the API answers
what the file holds, value for value.

Every question a request can ask is checked here and refused with :class:`ParamError`, one
line naming the parameter (the server's 400).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from ..outputs.times import jd_to_unix

#: Input health marks (the per-input health states another module decides: dead, saturated,
#: ...), given to the display as a callable returning ``{(antenna, pol): state}`` or a list of
#: ``{"antenna": A, "pol": "x", "state": "dead"}``.
HealthMarks = Callable[[], Mapping[tuple[int, str], str] | Iterable[Mapping[str, Any]]]
#: An input's bandpass further than this factor from the array's median (its median over
#: channels, either way) is marked an outlier; so is an input with no power at all.
OUTLIER_FACTOR = 3.0
#: Most dumps a waterfall request may span (``last``).
MAX_WATERFALL = 256


class ParamError(ValueError):
    """A request's parameter is wrong: one line naming it (HTTP 400)."""


@dataclass(frozen=True, eq=False)
class Baselines:
    """The rows of a dump: antenna numbers per row and where each pair is."""

    ant_1: np.ndarray
    ant_2: np.ndarray
    row: dict[tuple[int, int], int] = field(repr=False)

    @classmethod
    def of(cls, ant_1: Sequence[int], ant_2: Sequence[int]) -> Baselines:
        a1, a2 = np.asarray(ant_1, np.int64), np.asarray(ant_2, np.int64)
        return cls(a1, a2, {(int(x), int(y)): i for i, (x, y) in enumerate(zip(a1, a2,
                                                                               strict=True))})

    @cached_property
    def antenna_set(self) -> frozenset[int]:
        """The antenna numbers (computed once for every dump of these rows)."""
        return frozenset({*self.ant_1.tolist(), *self.ant_2.tolist()})

    @cached_property
    def _antennas(self) -> tuple[int, ...]:
        return tuple(sorted(self.antenna_set))

    @property
    def antennas(self) -> list[int]:
        """The antenna numbers, sorted."""
        return list(self._antennas)


@dataclass(frozen=True, eq=False)
class Dump:
    """One integration as a UVH5 file holds it.

    ``vis``: ``[Nbls, Nfreqs, Npols]`` complex, or the UVH5 writer's compound ``(r, i)`` rows
    (converted only where a request reads them); ``flags`` bool and ``nsamples`` float32 of the
    same shape; ``pols`` pyuvdata's names (``xx``, ``yy``, ``xy``, ``yx``...); ``time_jd`` the
    JD of the integration's midpoint (``time_array``); ``lost``: the display never saw this
    dump (its ring overtook it), held as no data so indices stay those of the run."""

    time_jd: float
    freq_hz: np.ndarray
    pols: tuple[str, ...]
    baselines: Baselines
    vis: np.ndarray
    flags: np.ndarray
    nsamples: np.ndarray
    integration_s: float = 0.0
    sequence: str = ""
    lost: bool = False

    @property
    def time_unix(self) -> float:
        return jd_to_unix(self.time_jd)

    @property
    def nbytes(self) -> int:
        return self.vis.nbytes + self.flags.nbytes + self.nsamples.nbytes

    def complex_rows(self, rows: Any, pol: int | slice = slice(None),
                     chans: slice = slice(None)) -> np.ndarray:
        """``vis[rows, chans, pol]`` as complex128."""
        v = self.vis[rows, chans, pol]
        if v.dtype.names:
            out = np.empty(v.shape, np.complex128)
            out.real, out.imag = v["r"], v["i"]
            return out
        return v.astype(np.complex128, copy=False)

    # ---- lookups (pyuvdata's get_data semantics) -------------------------------------------
    def pol_index(self, pol: str) -> int:
        try:
            return self.pols.index(pol.lower())
        except ValueError:
            raise ParamError(f"pol: {pol!r} is not in the data (pols: "
                             f"{', '.join(self.pols)})") from None

    def where(self, ant1: int, ant2: int, pol: str) -> tuple[int, int, bool]:
        """(row, pol index, conjugate) of ``(ant1, ant2, pol)``."""
        for a in (ant1, ant2):
            if a not in self.baselines.antenna_set:
                ants = self.baselines.antennas
                raise ParamError(f"antenna {a} is not in the data (antennas: "
                                 f"{_ranges(ants)})")
        p = self.pol_index(pol)
        row = self.baselines.row.get((ant1, ant2))
        if row is not None:
            return row, p, False
        row = self.baselines.row.get((ant2, ant1))
        if row is None:
            raise ParamError(f"baseline ({ant1}, {ant2}) is not in the data")
        return row, self.pol_index(conj_pol(pol)), True

    def spectrum(self, ant1: int, ant2: int, pol: str) -> tuple[np.ndarray, np.ndarray,
                                                                np.ndarray]:
        """(complex visibilities, flags, nsamples) of one baseline and polarisation."""
        row, p, conj = self.where(ant1, ant2, pol)
        v = self.complex_rows(row, p)
        return (np.conj(v) if conj else v), self.flags[row, :, p], self.nsamples[row, :, p]


def conj_pol(pol: str) -> str:
    """The polarisation of the conjugate baseline: feeds swapped (``xy`` <-> ``yx``)."""
    p = pol.lower()
    return p[::-1] if len(p) == 2 else p


def _ranges(values: list[int]) -> str:
    """``0..7, 9``: a list of integers, runs shortened."""
    out, i = [], 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[j] + 1:
            j += 1
        out.append(str(values[i]) if j == i else f"{values[i]}..{values[j]}")
        i = j + 1
    return ", ".join(out)


def finite(values: np.ndarray) -> list[Any]:
    """A float array as a JSON list; NaN and infinities (another writer's file) as null."""
    a = np.asarray(values, np.float64)
    if np.isfinite(a).all():
        return a.tolist()
    return [x if math.isfinite(x) else None for x in a.tolist()]


# ---- the questions ---------------------------------------------------------------------------

def baseline(dump: Dump, ant1: int, ant2: int, pol: str) -> dict[str, Any]:
    """``/api/v1/baseline``: one baseline's spectrum as the file holds it."""
    v, flags, nsamples = dump.spectrum(ant1, ant2, pol)
    return {"ant1": ant1, "ant2": ant2, "pol": pol.lower(), "time_unix": dump.time_unix,
            "time_jd": dump.time_jd, "freq_hz": finite(dump.freq_hz), "re": finite(v.real),
            "im": finite(v.imag), "nsamples": finite(nsamples), "flags": flags.tolist(),
            "lost": dump.lost}


def feed_pols(dump: Dump) -> list[tuple[str, int]]:
    """(feed, pol index) of the autocorrelation polarisations (``xx`` -> ``x``)."""
    return [(p[0], i) for i, p in enumerate(dump.pols) if len(p) == 2 and p[0] == p[1]]


def normalise_marks(marks: Any) -> dict[tuple[int, str], str]:
    """Health marks in either accepted shape (:data:`HealthMarks`) as ``{(antenna, feed):
    state}``; anything else is refused (a programming error, not a request's)."""
    if isinstance(marks, Mapping):
        return {(int(a), str(p).lower()): str(s) for (a, p), s in marks.items()}
    return {(int(m["antenna"]), str(m["pol"]).lower()): str(m["state"]) for m in marks}


def autos(dump: Dump, marks: HealthMarks | None = None) -> dict[str, Any]:
    """``/api/v1/autos``: every input's bandpass (the real part of its autocorrelation), the
    array's median bandpass, and the outliers: an input whose median ratio to the array's
    median is beyond :data:`OUTLIER_FACTOR` either way, or with no power. ``marks``: the input
    health states to show with them (optional)."""
    given = normalise_marks(marks()) if marks is not None else {}
    bl = dump.baselines
    ants = [a for a in bl.antennas if (a, a) in bl.row]
    rows = np.array([bl.row[(a, a)] for a in ants], np.intp)
    feeds = feed_pols(dump)
    # [input, channel], antenna-major: (ant0, x), (ant0, y), (ant1, x)...
    power = np.stack([dump.complex_rows(rows, p).real for _, p in feeds], axis=1).reshape(
        len(ants) * len(feeds), dump.freq_hz.size) if feeds and ants else \
        np.zeros((0, dump.freq_hz.size))
    nsamples = np.stack([dump.nsamples[rows, :, p].mean(axis=-1) for _, p in feeds],
                        axis=1).ravel() if feeds and ants else np.zeros(0)
    flagged = np.stack([dump.flags[rows, :, p].all(axis=-1) for _, p in feeds],
                       axis=1).ravel() if feeds and ants else np.zeros(0, bool)
    median = np.median(power, axis=0) if power.size else np.zeros(dump.freq_hz.size)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = (np.median(power / median, axis=1) if (median > 0).any()
                 else np.full(len(power), np.nan))
    dead = ~power.any(axis=1)
    outlier = dead | ~np.isfinite(ratio) | (ratio < 1 / OUTLIER_FACTOR) | (ratio > OUTLIER_FACTOR)
    inputs = []
    for k, (ant, (feed, _)) in enumerate((a, f) for a in ants for f in feeds):
        entry = {"antenna": ant, "pol": feed, "power": finite(power[k]),
                 "nsamples": float(nsamples[k]), "flagged": bool(flagged[k]),
                 "ratio": float(ratio[k]) if np.isfinite(ratio[k]) else None,
                 "outlier": bool(outlier[k])}
        state = given.get((ant, feed))
        if state is not None and state != "ok":  # only states worth a mark
            entry["state"] = state
        inputs.append(entry)
    return {"time_unix": dump.time_unix, "time_jd": dump.time_jd,
            "freq_hz": finite(dump.freq_hz), "median": finite(median), "inputs": inputs,
            "marks": marks is not None, "lost": dump.lost}


def channel_range(dump: Dump, chan_lo: int | None, chan_hi: int | None) -> tuple[int, int]:
    """``[lo, hi)`` channels, defaulting to all; refused outside the dump's."""
    n = dump.freq_hz.size
    lo = 0 if chan_lo is None else chan_lo
    hi = n if chan_hi is None else chan_hi
    if not 0 <= lo < hi <= n:
        raise ParamError(f"chan_lo, chan_hi: [{lo}, {hi}) is not a channel range within "
                         f"[0, {n})")
    return lo, hi


MATRIX_QUANTITIES = ("amplitude", "phase", "coherence")


def matrix(dump: Dump, pol: str, chan_lo: int | None = None, chan_hi: int | None = None,
           quantities: Sequence[str] = MATRIX_QUANTITIES) -> dict[str, Any]:
    """``/api/v1/matrix``: N x N over the antennas (sorted by number), every entry ``(i, j)``
    the baseline ``(antennas[i], antennas[j], pol)`` read as :meth:`Dump.spectrum` does (so
    Hermitian: ``(j, i)`` is the conjugate baseline), over channels ``[chan_lo, chan_hi)``:

    - ``amplitude``: the channels' mean of ``|V_ij|``;
    - ``phase``: the angle (radians) of the channels' mean of ``V_ij``;
    - ``coherence``: the channels' mean of ``|V_ij| / sqrt(V_ii V_jj)``, the autos those of
      each side's feed (``xy``: ``x`` of i, ``y`` of j), over the channels where both autos
      are > 0 (0 where none is).

    ``quantities``: which of them to answer (the page asks for the one it shows).
    """
    p = dump.pol_index(pol)
    name = dump.pols[p]
    lo, hi = channel_range(dump, chan_lo, chan_hi)
    ants = dump.baselines.antennas
    pos = {a: k for k, a in enumerate(ants)}
    bl = dump.baselines
    i = np.array([pos[a] for a in bl.ant_1.tolist()], np.intp)
    j = np.array([pos[a] for a in bl.ant_2.tolist()], np.intp)
    n, nchan = len(ants), hi - lo
    v = np.zeros((n, n, nchan), np.complex128)
    chans = slice(lo, hi)
    v[i, j] = dump.complex_rows(slice(None), p, chans)
    # (j, i): the row's conjugate with the feeds swapped; an auto row's own (i, i) stays
    swapped = dump.pols.index(conj_pol(name)) if conj_pol(name) in dump.pols else None
    cross = i != j
    if swapped is not None:
        v[j[cross], i[cross]] = np.conj(dump.complex_rows(np.flatnonzero(cross), swapped,
                                                          chans))
    autos_ = {}
    auto_rows = np.flatnonzero(~cross)
    for feed in {name[0], name[-1]}:
        a = np.zeros((n, nchan))
        if feed + feed in dump.pols:
            a[i[auto_rows]] = dump.complex_rows(auto_rows, dump.pols.index(feed + feed),
                                                chans).real
        autos_[feed] = a
    ai, aj = autos_[name[0]][:, None, :], autos_[name[-1]][None, :, :]
    good = (ai > 0) & (aj > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        per = np.where(good, np.abs(v) / np.sqrt(np.where(good, ai * aj, 1.0)), 0.0)
    count = good.sum(axis=-1)
    coherence = np.where(count > 0, per.sum(axis=-1) / np.maximum(count, 1), 0.0)
    values = {"amplitude": lambda: np.abs(v).mean(axis=-1),
              "phase": lambda: np.angle(v.mean(axis=-1)), "coherence": lambda: coherence}
    return {"pol": name, "time_unix": dump.time_unix, "time_jd": dump.time_jd,
            "chan_lo": lo, "chan_hi": hi, "antennas": ants,
            **{q: [finite(r) for r in values[q]()] for q in quantities}, "lost": dump.lost}


def waterfall(dumps: list[tuple[int, Dump]], ant1: int, ant2: int, pol: str) -> dict[str, Any]:
    """``/api/v1/waterfall``: one baseline's amplitude and phase, dump by channel."""
    rows = [(i, d, d.spectrum(ant1, ant2, pol)[0]) for i, d in dumps]
    return {"ant1": ant1, "ant2": ant2, "pol": pol.lower(),
            "dumps": [i for i, _, _ in rows], "time_unix": [d.time_unix for _, d, _ in rows],
            "freq_hz": finite(dumps[-1][1].freq_hz) if dumps else [],
            "amplitude": [finite(np.abs(v)) for *_, v in rows],
            "phase": [finite(np.angle(v)) for *_, v in rows]}


def flag_summary(dump: Dump) -> dict[str, Any]:
    """A dump's flag and nsamples summary: the fraction flagged, the mean nsamples, and per
    input (its autocorrelation) the mean nsamples (1: every spectrum arrived)."""
    per_input = []
    for ant in dump.baselines.antennas:
        row = dump.baselines.row.get((ant, ant))
        if row is None:
            continue
        for feed, p in feed_pols(dump):
            per_input.append({"antenna": ant, "pol": feed,
                              "nsamples": float(np.mean(dump.nsamples[row, :, p])),
                              "flagged_fraction": float(np.mean(dump.flags[row, :, p]))})
    return {"time_unix": dump.time_unix, "flagged_fraction": float(np.mean(dump.flags)),
            "nsamples_mean": float(np.mean(dump.nsamples)), "inputs": per_input,
            "lost": dump.lost}
