"""Input states over time: what changed (one log line per change of state, never per dump),
which inputs were bad and in which dumps (the summaries' ``bad_inputs``), the latest state of
every input (displays and Prometheus gauges), and the flags of their baselines.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from .inputs import (
    BAD_STATES,
    DEFAULT_THRESHOLDS,
    DumpStats,
    Thresholds,
    baseline_flags,
    dump_stats,
    judge,
    stream_label,
)

log = logging.getLogger(__name__)


def dump_ranges(dumps: Sequence[int]) -> str:
    """``0-3,7`` for dumps 0, 1, 2, 3, 7."""
    out, run = [], []
    for d in sorted(dumps):
        if run and d == run[-1] + 1:
            run.append(d)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else f"{run[0]}")
        run = [d]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else f"{run[0]}")
    return ",".join(out)


class HealthMonitor:
    """The states of ``nstream`` inputs of antennas ``antenna_numbers`` (named
    ``antenna_names``), dump after dump.

    Calling it (``monitor()``) returns the latest state per ``(antenna number, pol)``: the
    health provider a display marks bad inputs with. Thread-safe: the pipeline's thread
    judges, a display's or the metrics' thread reads.
    """

    def __init__(self, antenna_numbers: Sequence[int], antenna_names: Sequence[str],
                 thresholds: Thresholds = DEFAULT_THRESHOLDS, name: str = "health") -> None:
        self.numbers = [int(n) for n in antenna_numbers]
        self.names = [str(n) for n in antenna_names]
        self.nstream = 2 * len(self.numbers)
        self.thresholds, self.name = thresholds, name
        self.states = ["ok"] * self.nstream
        self.stats: DumpStats | None = None  # the latest dump's
        #: (stream, reason) -> the dumps it held in
        self.episodes: dict[tuple[int, str], list[int]] = {}
        self._lock = threading.Lock()
        self._previous: DumpStats | None = None

    def label(self, stream: int) -> str:
        ant, pol = stream_label(stream)
        return f"{self.names[ant]}{pol} (antenna {self.numbers[ant]})"

    def record(self, dump: int, stats: DumpStats, states: list[str]) -> None:
        """Take dump ``dump``'s judged ``states``: a log line per input whose state changed."""
        with self._lock:
            for s, (old, new) in enumerate(zip(self.states, states, strict=True)):
                if new != old:
                    level = logging.INFO if new == "ok" else logging.WARNING
                    log.log(level, "%s: input %s %s -> %s from dump %d (power %.4g, %.3g %% "
                            "saturated, correlation %.3g)", self.name, self.label(s), old, new,
                            dump, stats.power[s], 100 * stats.saturated_fraction[s],
                            stats.correlation[s])
                if new in BAD_STATES:
                    self.episodes.setdefault((s, new), []).append(dump)
            self.states = list(states)
            self.stats = stats

    def observe(self, dump: int, tri: np.ndarray, valid: np.ndarray,
                extremes: np.ndarray | None = None,
                parts: np.ndarray | None = None) -> list[str]:
        """Judge a dump as it comes (live: ``stuck`` against the previous dump only) and
        record it; returns the states."""
        stats = dump_stats(tri, valid, self.nstream, extremes, parts, self.thresholds)
        states = judge(stats, self.thresholds, (self._previous,))
        self._previous = stats
        self.record(dump, stats, states)
        return states

    def bad_streams(self, states: Sequence[str] | None = None) -> list[int]:
        states = self.states if states is None else states
        return [s for s, state in enumerate(states) if state in BAD_STATES]

    def flags(self, states: Sequence[str] | None = None) -> np.ndarray:
        """bool ``[nbaseline]``: the baselines of the inputs bad in ``states`` (default: the
        latest)."""
        return baseline_flags(self.bad_streams(states), self.nstream)

    def bad_inputs(self) -> list[dict[str, Any]]:
        """Every (input, reason) judged bad, with its dumps: the summaries' ``bad_inputs``."""
        with self._lock:
            items = sorted(self.episodes.items())
        out = []
        for (s, reason), dumps in items:
            ant, pol = stream_label(s)
            out.append({"antenna": self.numbers[ant], "antenna_name": self.names[ant],
                        "pol": pol, "reason": reason, "dumps": list(dumps)})
        return out

    def history(self) -> str:
        """A sentence for a file's history: which inputs were flagged and why."""
        bad = self.bad_inputs()
        if not bad:
            return "input flagging: no input judged bad"
        return "input flagging: every baseline flagged of " + "; ".join(
            f"{b['antenna_name']}{b['pol']} (antenna {b['antenna']}) {b['reason']} in dumps "
            f"{dump_ranges(b['dumps'])}" for b in bad)

    def latest(self) -> dict[tuple[int, str], str]:
        """The latest state per ``(antenna number, pol)``."""
        with self._lock:
            states = list(self.states)
        return {(self.numbers[s // 2], "xy"[s % 2]): state for s, state in enumerate(states)}

    __call__ = latest

    def gauges(self) -> list[dict[str, Any]]:
        """Per input: labels, state and statistics of the latest dump (Prometheus)."""
        with self._lock:
            stats, states = self.stats, list(self.states)
        out = []
        for s in range(self.nstream):
            ant, pol = stream_label(s)
            out.append({"antenna": self.names[ant], "number": self.numbers[ant], "pol": pol,
                        "state": states[s],
                        "power": float(stats.power[s]) if stats else 0.0,
                        "saturated_fraction": float(stats.saturated_fraction[s]) if stats
                        else 0.0,
                        "bandpass_deviation": float(stats.bandpass_deviation[s]) if stats
                        else 0.0})
        return out


def judge_offline(monitor: HealthMonitor, stats: Sequence[DumpStats]) -> list[list[str]]:
    """Judge a file's dumps with both neighbours known (``stuck`` from the first dump on) and
    record them in ``monitor``; returns each dump's states."""
    out = []
    for i, st in enumerate(stats):
        neighbours = (stats[i - 1] if i else None, stats[i + 1] if i + 1 < len(stats) else None)
        states = judge(st, monitor.thresholds, neighbours)
        monitor.record(i, st, states)
        out.append(states)
    return out


def flag_dumps(monitor: HealthMonitor | None, rfi, vis: np.ndarray, valid: np.ndarray,
               extremes: np.ndarray | None = None,
               parts: np.ndarray | None = None) -> tuple[np.ndarray, dict[str, Any]]:
    """Flags of a file's dumps, judged offline: ``vis [T, C, nbaseline, 2]`` with ``valid``
    spectra (broadcastable to ``[T, C, nbaseline]``), ``extremes``/``parts`` ``[T, S]``.

    ``monitor``: judge the inputs (None: no input flags); ``rfi``: an
    :class:`~xengine_block.health.rfi.AOFlaggerRfi` over the whole time span (None: none).
    Returns bool ``[T, C, nbaseline]`` and the summary's part (``bad_inputs``; ``rfi``: the
    flagged fraction per channel and per dump, over the baselines of no bad input)."""
    from .rfi import flagged_fractions

    t, c, nbl, _ = vis.shape
    valid = np.broadcast_to(np.asarray(valid), (t, c, nbl))
    flags = np.zeros((t, c, nbl), bool)
    summary: dict[str, Any] = {}
    inputs = np.zeros((t, nbl), bool)
    if monitor is not None:
        stats = [dump_stats(vis[i], valid[i], monitor.nstream,
                            None if extremes is None else extremes[i],
                            None if parts is None else parts[i], monitor.thresholds)
                 for i in range(t)]
        for i, states in enumerate(judge_offline(monitor, stats)):
            inputs[i] = monitor.flags(states)
        flags |= inputs[:, None, :]
        summary["bad_inputs"] = monitor.bad_inputs()
        summary["inputs_flagged"] = round(float(inputs.mean()), 6) if inputs.size else 0.0
    if rfi is not None:
        found = rfi.flag(vis, valid, np.broadcast_to(inputs[:, None, :], flags.shape))
        flags |= found
        summary["rfi"] = {"strategy": rfi.strategy_path.name,
                          **flagged_fractions(found, ~inputs)}
    return flags, summary

