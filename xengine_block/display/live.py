"""The display of a running chain: a sink block reading the integrator's output without holding
it back, and the bounded history of dumps the server reads.

Never stalling the pipeline: :class:`DisplayBlock` is an *unguaranteed* reader of the
integrator's rings (``guarantee=False``): the writer does not wait for it; a dump it was
overtaken on is held as no data (``lost``), as the UVH5 writer writes one, so the display's
dump numbers stay those of the run's files. Its work per dump is one copy of the frame and the
UVH5 writer's compiled row pass (the GIL released). :class:`LiveDumps` keeps the last
``history`` dumps (drop-oldest, a ``deque``), so memory stays flat over any run; the HTTP
threads only read it under a lock held for a pointer copy, so a browser that stalls stalls only
its own connection's thread.

Each dump becomes rows exactly as :class:`~xengine_block.outputs.uvh5.UVH5Writer` would write
it (the same baseline map, row pass, flags and nsamples, conjugation of an inverted band), so
the API answers for a live dump what the file will hold.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from ..array import ArrayDescription
from ..blocks.base import BlockLogic, common_frames, lost_frames_any
from ..blocks.headers import channel_freqs, frame_start_unix, paired_inputs
from ..geometry import Geometry
from ..integration import counts_per_channel
from ..outputs.baselines import POLARIZATIONS, DumpRows, baseline_map, visdata_dtype
from ..outputs.times import unix_to_jd
from ..runtime.pipeline import Block, MultiTransformBlock
from ..runtime.ring import Ring
from ..visibility_orders import as_triangle
from .model import Baselines, Dump, flag_summary

#: Dumps the live display keeps by default (``[display] history``).
DEFAULT_HISTORY = 64
#: Health samples kept (one per dump).
HEALTH_SAMPLES = 600
#: No dump for this many dump lengths (and at least :data:`STALE_MIN_S`): the page says so.
STALE_DUMPS = 3.0
STALE_MIN_S = 5.0

POL_NAMES = tuple({-5: "xx", -6: "yy", -7: "xy", -8: "yx"}[code] for code, *_ in POLARIZATIONS)


class LiveDumps:
    """The last ``history`` dumps of a running chain, numbered from 0 since the start, and a
    health sample per dump from ``counters`` (a callable returning the service's counters:
    :meth:`~xengine_block.service.live.CorrelatorService.display_counters`)."""

    live = True

    def __init__(self, history: int = DEFAULT_HISTORY,
                 counters: Callable[[], dict[str, Any]] | None = None) -> None:
        if history < 1:
            raise ValueError(f"history must be >= 1, got {history}")
        self.history = history
        self.counters = counters
        self._dumps: deque[Dump] = deque(maxlen=history)
        self._health: deque[dict[str, Any]] = deque(maxlen=HEALTH_SAMPLES)
        self._total = 0
        self._sequences = 0
        self._sequence = ""
        self._last_arrival: float | None = None
        self._started = time.time()
        self._lock = threading.Lock()

    def new_sequence(self, name: str) -> None:
        with self._lock:
            self._sequences += 1
            self._sequence = name

    def add(self, dump: Dump) -> None:
        """Append a dump (the oldest beyond ``history`` dropped) and a health sample."""
        sample: dict[str, Any] = {"time_unix": time.time(), "dump_time_unix": dump.time_unix}
        if self.counters is not None:
            try:
                sample.update(self.counters())
            except Exception as exc:  # a counter that fails to read must not stop the block
                sample["error"] = f"{type(exc).__name__}: {exc}"
        with self._lock:
            sample["dump"] = self._total
            self._dumps.append(dump)
            self._total += 1
            self._last_arrival = time.time()
            self._health.append(sample)

    def skip(self, n: int) -> None:
        """``n`` dumps lost and not held (more than the history in one go)."""
        with self._lock:
            self._dumps.clear()
            self._total += n

    # ---- the store interface the API reads ---------------------------------------------------
    def count(self) -> tuple[int, int]:
        """(first index held, dumps since the start)."""
        with self._lock:
            return self._total - len(self._dumps), self._total

    def dump(self, index: int) -> Dump:
        with self._lock:
            return self._dumps[index - (self._total - len(self._dumps))]

    def status(self) -> dict[str, Any]:
        with self._lock:
            last = self._dumps[-1] if self._dumps else None
            total, held, arrival = self._total, len(self._dumps), self._last_arrival
            sequences, sequence = self._sequences, self._sequence
        now = time.time()
        since = now - (arrival if arrival is not None else self._started)
        limit = max(STALE_MIN_S, STALE_DUMPS * (last.integration_s if last else 0.0))
        out: dict[str, Any] = {
            "source": "live", "dumps": total, "first_dump": total - held, "history": self.history,
            "sequences": sequences, "sequence": sequence,
            "seconds_since_last_dump": round(since, 3), "stale": since > limit,
            "time_unix": last.time_unix if last else None}
        if last is not None:
            out.update(nants=len(last.baselines.antennas), antennas=last.baselines.antennas,
                       nfreq=int(last.freq_hz.size), freq_hz=last.freq_hz.tolist(),
                       pols=list(last.pols), integration_s=last.integration_s)
        return out

    def health(self, index: int) -> dict[str, Any]:
        with self._lock:
            series = list(self._health)
        return {"source": "live", "series": series,
                "latest": series[-1] if series else None,
                "inputs": flag_summary(self.dump(index))["inputs"]}


class DisplayLogic(BlockLogic):
    """Sink of the integrator's (visibilities, valid counts): each dump into ``store`` as the
    UVH5 writer's rows; an unguaranteed reader unless told otherwise (module docstring)."""

    def __init__(self, vis: Block | Ring, valid: Block | Ring | None = None, *,
                 store: LiveDumps, guarantee: bool = False, **kwargs: Any) -> None:
        super().__init__(paired_inputs(vis, valid, optional=True), gulp_nframe=1,
                         guarantee=guarantee, **kwargs)
        self.orings = []
        self.store = store

    def on_sequence(self, iseqs: list) -> list[dict[str, Any]]:
        hdr = self.hdr = iseqs[0].header
        self.t0 = iseqs[0].time_tag
        self._next = 0
        self.nspectra = int(hdr["nspectra"])
        self.geometry = Geometry.from_dict(hdr["geometry"])
        array = ArrayDescription.from_dict(hdr["array"])
        bmap = baseline_map(np.asarray(array.antenna_numbers))
        self.baselines = Baselines.of(bmap.ant_1, bmap.ant_2)
        self.freqs = channel_freqs(hdr)
        float_vis = hdr["_tensor"]["dtype"].startswith("cf")
        dtype = visdata_dtype(self.nspectra, self.geometry.sample_bits, float_vis)
        self.rows = DumpRows(bmap, self.freqs.size, dtype, hdr["chan_bw_hz"] < 0)
        self.store.new_sequence(str(hdr.get("name", "")))
        return []

    def define_output_nframes(self, input_nframes: list[int]) -> list[int]:
        return []

    def _add(self, tri: np.ndarray, valid: np.ndarray, frame: int, lost: bool = False) -> None:
        if valid.shape[0] > 1:
            valid = counts_per_channel(valid, self.geometry)
        self.rows.fill(tri, valid, self.nspectra)
        start = frame_start_unix(self.hdr, self.t0 + frame * self.nspectra)
        duration = self.nspectra / self.hdr["fs_hz"]
        self.store.add(Dump(unix_to_jd(start + duration / 2), self.freqs, POL_NAMES,
                            self.baselines, self.rows.visdata.copy(), self.rows.flags.copy(),
                            self.rows.nsamples.copy(), duration,
                            sequence=str(self.hdr.get("name", "")), lost=lost))

    def on_data(self, ispans: list, ospans: list) -> list[int]:
        lo, hi = common_frames(ispans)
        for f in range(max(lo, self._next), hi):
            self._next = f + 1
            tri = as_triangle(self.array(ispans[0])[f - ispans[0].frame_offset], self.hdr)
            if np.iscomplexobj(tri):  # a new array already
                tri = np.stack([tri.real, tri.imag], axis=-1).astype(np.float64, copy=False)
            else:  # a view of the ring: copied before the writer can come back to it
                tri = np.array(tri, copy=True)
            if len(ispans) > 1:
                valid = self.array(ispans[1])[f - ispans[1].frame_offset].copy()
            else:
                valid = np.full((1, self.geometry.nbaseline), self.nspectra, np.int64)
            if self.overwritten(ispans):  # the writer came back while it was read: lost
                self._lost(f)
                continue
            self._add(tri, valid, f)
        return []

    def _lost(self, frame: int) -> None:
        self.lost_frames += 1
        self.nodata_outputs += 1
        zeros = np.zeros((self.freqs.size, self.geometry.nbaseline, 2), np.int64)
        self._add(zeros, np.zeros((1, self.geometry.nbaseline), np.int64), frame, lost=True)

    def on_skip(self, lost: list[slice], ospans: list) -> list[int]:
        frames = lost_frames_any(lost)
        frames = range(max(frames.start, self._next), frames.stop)
        if len(frames) > self.store.history:  # only the last history's worth is held
            self.store.skip(len(frames) - self.store.history)
            self.lost_frames += len(frames) - self.store.history
            frames = frames[-self.store.history:]
        for frame in frames:
            self._next = frame + 1
            self._lost(frame)
        return []


class DisplayBlock(DisplayLogic, MultiTransformBlock):
    __doc__ = DisplayLogic.__doc__
