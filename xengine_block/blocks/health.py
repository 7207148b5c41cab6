"""HealthBlock: the flags of each dump, from input health and RFI (``docs/flagging.md``).

Inputs (lockstep): the integrate block's visibilities ``ci64 [-1, C, nbl]`` and valid counts
``i64 [-1, G, nbl]``. Output: flags ``u8 [-1, C, nbl]`` in the packed triangle's order, one
frame per dump, which the UVH5 writer reads in lockstep with the dumps
(:class:`~xengine_block.blocks.writer.UVH5WriterBlock`'s ``flags`` input): the flags enter
through the dump data the writers receive.

Each dump's inputs are judged (:class:`~xengine_block.health.monitor.HealthMonitor`: one log
line per change of state, the latest states for displays and metrics) with the X-engine's
counts of samples at the quantiser's extremes where it counts them
(``XEngineBlock(count_extremes=True)``); with ``flag_inputs`` every baseline of an input judged
bad is flagged in that dump. With ``rfi`` (an :class:`~xengine_block.health.rfi.AOFlaggerRfi`)
the dump goes through AOFlagger over a sliding window of the dumps before it
(:class:`~xengine_block.health.rfi.SlidingRfi`: no delay). Off unless asked: the chain adds
this block only with ``[flagging]`` keys set.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from ..array import ArrayDescription
from ..geometry import Geometry
from ..health.inputs import DEFAULT_THRESHOLDS, Thresholds
from ..health.monitor import HealthMonitor
from ..health.rfi import LIVE_WINDOW, AOFlaggerRfi, SlidingRfi
from ..integration import counts_per_channel
from ..runtime.pipeline import Block, MultiTransformBlock
from ..runtime.ring import Ring
from .base import BlockLogic, common_frames, lost_frames_any
from .headers import derive_header, paired_inputs, require_keys

log = logging.getLogger(__name__)

#: Header keys the block reads.
HEALTH_KEYS = ("nspectra", "array", "geometry")


class HealthLogic(BlockLogic):
    """Flags of each dump (module docstring).

    Parameters
    ----------
    vis, valid : the integrate block (its two outputs), or its two rings.
    flag_inputs : flag the baselines of inputs judged bad (else only judged and reported).
    rfi : AOFlagger, or None; ``rfi_window``: dumps in its sliding window.
    thresholds : when an input is judged bad.
    xengine : the X-engine block whose extremes counts to read (None: not counted).
    """

    def __init__(self, vis: Block | Ring, valid: Block | Ring | None = None, *,
                 flag_inputs: bool = True, rfi: AOFlaggerRfi | None = None,
                 rfi_window: int = LIVE_WINDOW, thresholds: Thresholds = DEFAULT_THRESHOLDS,
                 xengine: Any = None, **kwargs: Any) -> None:
        super().__init__(paired_inputs(vis, valid), gulp_nframe=1, **kwargs)
        self.orings = [self.create_ring(space=self.irings[0].space)]  # one output: the flags
        self.flag_inputs, self.thresholds, self.xengine = flag_inputs, thresholds, xengine
        self.rfi = None if rfi is None else SlidingRfi(rfi, rfi_window)
        self.monitor: HealthMonitor | None = None
        #: Per dump, the fraction RFI-flagged (of the baselines of no bad input); per channel,
        #: those flagged and those looked at.
        self.rfi_per_dump: list[float] = []
        self._rfi_chan: np.ndarray | None = None

    def on_sequence(self, iseqs: list) -> list[dict[str, Any]]:
        hdr = iseqs[0].header
        require_keys(hdr, HEALTH_KEYS, self.name)
        array = ArrayDescription.from_dict(hdr["array"])
        self.geometry = Geometry.from_dict(hdr["geometry"])
        self.nspectra = int(hdr["nspectra"])
        self.t0 = iseqs[0].time_tag
        if self.monitor is None or self.monitor.numbers != list(array.antenna_numbers):
            self.monitor = HealthMonitor(array.antenna_numbers, array.antenna_names,
                                         self.thresholds, name=self.name)
        if self.rfi is not None:
            self.rfi.reset()
        self._next = 0
        shape = list(hdr["_tensor"]["shape"])
        return [derive_header(hdr, name=f"{iseqs[0].name}.flags", dtype="u8", shape=shape,
                              labels=["time", "freq", "baseline"],
                              scales=hdr["_tensor"].get("scales") or [None] * 3,
                              units=[None, None, None])]

    def define_output_nframes(self, input_nframes: list[int]) -> list[int]:
        return [max(input_nframes)]

    def _flags(self, frame: int, vis: np.ndarray, valid: np.ndarray) -> np.ndarray:
        """The flags ``[C, nbl]`` of dump ``frame``."""
        g = self.geometry
        if valid.shape[0] not in (1, g.nchan):
            valid = counts_per_channel(valid, g)
        t0 = self.t0 + frame * self.nspectra
        extremes = (None if self.xengine is None
                    else self.xengine.take_extremes(t0, t0 + self.nspectra))
        parts = np.full(g.nstream, 2 * g.nchan * self.nspectra, np.int64)
        states = self.monitor.observe(frame, vis, valid, extremes, parts)
        inputs = self.monitor.flags(states) if self.flag_inputs else np.zeros(g.nbaseline, bool)
        flags = np.broadcast_to(inputs, (g.nchan, g.nbaseline)).copy()
        if self.rfi is not None and valid.any():
            found = self.rfi.push(vis, valid, flags)
            among = ~flags
            self.rfi_per_dump.append(float(found[among].mean()) if among.any() else 0.0)
            chan = np.stack([(found & among).sum(axis=1), among.sum(axis=1)])
            self._rfi_chan = chan if self._rfi_chan is None else self._rfi_chan + chan
            flags |= found
        return flags

    def latest_states(self) -> dict[tuple[int, str], str]:
        """The latest state per ``(antenna number, pol)`` (``{}`` before the first dump): the
        health provider a display marks bad inputs with (safe from any thread)."""
        return self.monitor() if self.monitor is not None else {}

    @property
    def rfi_fraction(self) -> float:
        """The last dump's RFI-flagged fraction (0 before any)."""
        return self.rfi_per_dump[-1] if self.rfi_per_dump else 0.0

    def report(self) -> dict[str, Any]:
        """The summary's part: ``bad_inputs``, and with RFI flagging ``rfi`` (the flagged
        fraction per dump and per channel)."""
        out: dict[str, Any] = {"bad_inputs": self.monitor.bad_inputs() if self.monitor else []}
        if self.rfi is not None:
            chan = self._rfi_chan
            out["rfi"] = {"window_dumps": self.rfi.window,
                          "per_dump": [round(x, 6) for x in self.rfi_per_dump],
                          "per_channel": [] if chan is None else
                          [round(float(h) / max(int(n), 1), 6) for h, n in chan.T]}
        return out

    def on_data(self, ispans: list, ospans: list) -> list[int]:
        lo, hi = common_frames(ispans)
        vis_in, valid_in = self.array(ispans[0]), self.array(ispans[1])
        out = self.array(ospans[0])
        n = 0
        for f in range(max(lo, self._next), hi):
            vis = vis_in[f - ispans[0].frame_offset]
            valid = valid_in[f - ispans[1].frame_offset]
            if not self.guarantee:
                vis, valid = vis.copy(), valid.copy()
            out[n] = self._flags(f, vis, valid)
            self._next = f + 1
            n += 1
        return [n]

    def on_skip(self, lost: list[slice], ospans: list) -> list[int]:
        """Lost dumps: no flags (the writer writes them as no data, flagged already)."""
        out, n = self.array(ospans[0]), 0
        for f in lost_frames_any(lost):
            if f >= self._next:
                out[n] = 0
                self._next = f + 1
                n += 1
        return [n]


class HealthBlock(HealthLogic, MultiTransformBlock):
    __doc__ = HealthLogic.__doc__
