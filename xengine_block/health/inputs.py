"""Input health from one dump: statistics per input (antenna x pol, stream ``s = 2 * antenna
+ pol``) from what the X-engine computed (the packed triangle, docs/design.md "Packet and frame
layouts") and counted (samples at the quantiser's extremes), and the states they are judged in.

Statistics (:class:`DumpStats`), per input:

- ``power``: the autocorrelation per spectrum, averaged over channels (levels squared, re^2 +
  im^2), compared with the array's median;
- ``bandpass_deviation``: the median over channels of ``|b(c) / B(c) - 1|``, ``b`` the input's
  bandpass normalised to its mean, ``B`` the median of those of the live inputs (hera_qm's
  auto_metrics judge autocorrelations' shape against the array median likewise);
- ``saturated_fraction``: the fraction of sample parts (re and im) at the quantiser's extremes
  (ci8: -128 and +127; ci4: -8 and +7), counted in the backend's pass over the samples
  (katgpucbf counts saturated samples per input the same way);
- ``correlation``: the largest, over every input of another antenna, of the correlation
  coefficient ``mean_c |V_jk| / sqrt(mean_c A_j mean_c A_k)`` (hera_qm's ant_metrics judge dead and
  cross-polarised antennas from the correlation matrix).

States (:data:`STATES`), the first that holds in this order:

- ``dead``: no power at all (every sample zero);
- ``stuck``: samples that do not change: the autocorrelation equal, channel for channel and to
  the last bit, in an adjacent dump of the same spectra (a constant or a repeating pattern gives
  the same sums every dump; live noise never does). One dump alone cannot show it: live, the
  first dump of a stuck input is judged on its own;
- ``saturated``: ``saturated_fraction`` above ``Thresholds.saturated_fraction`` and above
  ``saturated_excess`` times the median of the live inputs' (a transmitter every input hears,
  clipping every one in its channel, is RFI, for the RFI flagger, not a broken input);
- ``high_power`` / ``low_power``: power above ``high_power_factor`` times the median of the
  live inputs' power, or below it divided by ``low_power_factor``;
- ``decorrelated``: ``correlation`` at the noise floor (below ``noise floor + decorrelated_sigma``
  standard deviations of a channel-averaged noise coefficient) while the median input sees a
  common signal above it; needs three antennas.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from ..triangle import baseline_index, triangle_streams

#: Feed names by pol index (stream ``2 * antenna + pol``).
POLS = ("x", "y")
#: An input's states: ``ok``, then the bad ones in the order they are judged (module docstring).
STATES = ("ok", "dead", "stuck", "saturated", "high_power", "low_power", "decorrelated")
BAD_STATES = STATES[1:]
#: Each state as a number (Prometheus gauges): its index in :data:`STATES`.
STATE_CODE = {s: i for i, s in enumerate(STATES)}


@dataclass(frozen=True)
class Thresholds:
    """When an input is judged bad (module docstring); the defaults are the documented ones
    (``docs/flagging.md``), each configurable (``[flagging]`` keys of ``xengine correlate``).
    """

    #: Fraction of sample parts at the quantiser's extremes above which an input is saturated.
    #: Gaussian noise at the simulator's levels (rms 11 of 127 for ci8, 3 of 7 for ci4) puts
    #: 0 and about 0.4 % there.
    saturated_fraction: float = 0.02
    #: ... and above this factor times the array's median fraction.
    saturated_excess: float = 4.0
    #: Power above this factor times the array's median: ``high_power`` (10: +10 dB).
    high_power_factor: float = 10.0
    #: Power below the array's median divided by this factor: ``low_power`` (10: -10 dB).
    low_power_factor: float = 10.0
    #: Standard deviations of a noise correlation coefficient (averaged over channels) above
    #: its mean under which an input counts as uncorrelated with another.
    decorrelated_sigma: float = 6.0

    def __post_init__(self) -> None:
        if not 0 < self.saturated_fraction <= 1:
            raise ValueError(f"saturated_fraction must be in (0, 1], got "
                             f"{self.saturated_fraction}")
        for name in ("saturated_excess", "high_power_factor", "low_power_factor"):
            if not getattr(self, name) > 1:
                raise ValueError(f"{name} must be > 1, got {getattr(self, name)}")
        if not self.decorrelated_sigma > 0:
            raise ValueError(f"decorrelated_sigma must be > 0, got {self.decorrelated_sigma}")

    def to_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


#: The documented defaults.
DEFAULT_THRESHOLDS = Thresholds()


@dataclass
class DumpStats:
    """One dump's statistics per input (module docstring), ``[S]`` each, with the
    autocorrelations they came from (``autos [C, S]``, exact) and the spectra per channel
    (``valid [C, S]``)."""

    power: np.ndarray
    bandpass_deviation: np.ndarray
    saturated_fraction: np.ndarray
    correlation: np.ndarray
    #: The correlation below which an input counts as uncorrelated (the noise floor plus the
    #: thresholds' margin), for this dump's spectra and channels.
    correlation_floor: float
    autos: np.ndarray
    valid: np.ndarray

    @property
    def nstream(self) -> int:
        return self.power.size


def auto_index(nstream: int) -> np.ndarray:
    """Triangle index of each stream's autocorrelation."""
    s = np.arange(nstream)
    return np.asarray(baseline_index(s, s))


def dump_stats(tri: np.ndarray, valid: np.ndarray, nstream: int,
               extremes: np.ndarray | None = None, parts: np.ndarray | None = None,
               thresholds: Thresholds = DEFAULT_THRESHOLDS) -> DumpStats:
    """Statistics of a dump: ``tri [C, nbaseline, 2]`` exact sums, ``valid`` spectra per
    baseline (``[C or 1, nbaseline]``, or ``[C]``), ``extremes [S]`` sample parts at the
    quantiser's extremes out of ``parts [S]`` counted (None: not counted, fraction 0)."""
    tri = np.asarray(tri)
    valid = np.asarray(valid)
    valid = valid[:, None] if valid.ndim == 1 else valid
    a_idx = auto_index(nstream)
    autos = tri[:, a_idx, 0].astype(np.int64)  # [C, S]
    v_auto = np.broadcast_to(valid, tri.shape[:2])[:, a_idx].astype(np.float64)
    counted = v_auto > 0
    per_spec = np.where(counted, autos / np.maximum(v_auto, 1), 0.0)  # [C, S]
    power = per_spec.sum(axis=0) / np.maximum(counted.sum(axis=0), 1)
    live = power > 0
    deviation = np.zeros(nstream)
    if live.any():
        # NaN where a channel has no spectrum: the medians leave it out (numpy's nanmedian,
        # only then: it costs several times the plain median)
        median = np.median if counted.all() else np.nanmedian
        shape = np.where(counted, per_spec, np.nan)[:, live] / power[live]
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.abs(shape / median(shape, axis=1, keepdims=True) - 1)
        median = np.median if np.isfinite(rel).all() else np.nanmedian
        rel[~np.isfinite(rel)] = np.nan
        deviation[live] = np.nan_to_num(median(rel, axis=0))
    if extremes is None:
        fraction = np.zeros(nstream)
    else:
        fraction = np.asarray(extremes, np.float64) / np.maximum(np.asarray(parts, np.float64), 1)
    corr, floor = best_correlation(tri, v_auto, autos, nstream, thresholds.decorrelated_sigma)
    return DumpStats(power, deviation, fraction, corr, floor, autos, v_auto)


def best_correlation(tri: np.ndarray, valid: np.ndarray, autos: np.ndarray, nstream: int,
                     sigma: float) -> tuple[np.ndarray, float]:
    """Per input, the largest correlation coefficient with an input of another antenna
    (``valid``: the spectra of each autocorrelation, ``[C, S]``),
    ``mean_c |V_jk(c)| / sqrt(mean_c A_j(c) mean_c A_k(c))`` (channel-averaged moduli over
    channel-averaged powers: one pass over the triangle, in float32), and the floor below
    which a coefficient is noise: the mean of a noise coefficient's modulus, ``sqrt(pi / 4N)``
    for N spectra (Rayleigh), plus ``sigma`` of its standard deviations over C channels,
    ``sqrt((4 - pi) / 4NC)``."""
    j, k = triangle_streams(nstream)
    nchan = tri.shape[0]
    n = float(np.median(valid)) if valid.size else 0.0
    floor = (math.sqrt(math.pi / (4 * n)) + sigma * math.sqrt((4 - math.pi) / (4 * n * nchan))
             if n > 0 else math.inf)
    v = tri.astype(np.float32)
    mod = np.hypot(v[..., 0], v[..., 1]).mean(axis=0)  # [nbl]
    p = autos.mean(axis=0).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        inv = np.where(p > 0, 1 / np.sqrt(p), 0.0).astype(np.float32)
    rho = mod * inv[j] * inv[k]
    rho[(j // 2) == (k // 2)] = 0  # the same antenna's inputs: not another antenna
    full = np.zeros((nstream, nstream), np.float32)
    full[j, k] = rho
    full[k, j] = rho
    return full.max(axis=1).astype(np.float64), floor


def judge(stats: DumpStats, thresholds: Thresholds = DEFAULT_THRESHOLDS,
          neighbours: tuple[DumpStats | None, ...] = ()) -> list[str]:
    """Each input's state (:data:`STATES`, module docstring) in this dump; ``neighbours``: the
    adjacent dumps' statistics (the previous one live; the previous and the next offline), for
    ``stuck``."""
    t = thresholds
    s = stats.nstream
    seen = (stats.valid > 0).any(axis=0)  # no spectrum: nothing to judge (flagged as missing)
    live = stats.power > 0
    median = float(np.median(stats.power[live])) if live.any() else 0.0
    clipped = (float(np.median(stats.saturated_fraction[live])) if live.any() else 0.0
               ) * t.saturated_excess
    stuck = np.zeros(s, bool)
    for other in neighbours:
        if other is None or other.autos.shape != stats.autos.shape:
            continue
        same = (other.autos == stats.autos).all(axis=0) & (other.valid == stats.valid).all(axis=0)
        stuck |= same & live
    signal = stats.correlation[live & ~stuck]
    common = signal.size >= 3 and float(np.median(signal)) > stats.correlation_floor
    antennas = np.unique(np.flatnonzero(live) // 2).size
    decorrelated = (common and antennas >= 3) & (stats.correlation < stats.correlation_floor)
    conditions = [~seen, ~live, stuck,
                  stats.saturated_fraction > max(t.saturated_fraction, clipped),
                  stats.power > t.high_power_factor * median,
                  stats.power < median / t.low_power_factor, decorrelated]
    codes = np.select(conditions, [0, 1, 2, 3, 4, 5, 6], default=0)
    return [STATES[c] for c in codes]


def stream_label(stream: int) -> tuple[int, str]:
    """(antenna index, pol name) of a stream."""
    return stream // 2, POLS[stream % 2]


def baseline_flags(bad_streams: np.ndarray | list[int], nstream: int) -> np.ndarray:
    """bool ``[nbaseline]``: every baseline (in the packed triangle) with a bad stream in it,
    autocorrelations and cross-pol products included."""
    j, k = triangle_streams(nstream)
    bad = np.zeros(nstream, bool)
    bad[np.asarray(bad_streams, np.intp)] = True
    return bad[j] | bad[k]


def stats_record(stats: DumpStats, states: list[str]) -> list[dict[str, Any]]:
    """Per input, its state and statistics as plain numbers (JSON, metrics)."""
    return [{"stream": i, "state": states[i], "power": float(stats.power[i]),
             "bandpass_deviation": float(stats.bandpass_deviation[i]),
             "saturated_fraction": float(stats.saturated_fraction[i]),
             "correlation": float(stats.correlation[i])} for i in range(stats.nstream)]
