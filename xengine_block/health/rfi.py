"""RFI flags from AOFlagger (PyPI ``aoflagger``: the library and its strategies).

Each baseline and polarisation product's time x frequency data (one entry of the packed
triangle: AOFlagger's two images, re and im) goes through the strategy, and its mask flags that
product (MWA's Birli and LOFAR's DP3 run AOFlagger per baseline likewise, over the
observation's time and frequency). One product at a time, not an antenna pair's four together:
a bad input's jump (a cable pulled, a transmitter switched on) must not flag its antenna's
other, healthy pol; and the visibilities of inputs judged bad enter as AOFlagger's input flags,
left out of its statistics like the missing data.

The strategy is the telescope's where AOFlagger ships one (its ``TelescopeId``: MWA, LOFAR,
JVLA, WSRT, ...), else its generic one, or a Lua file of the user's
(``--rfi aoflagger:STRATEGY.lua``). Visibilities are divided by their spectra first (a dump
with fewer spectra is no dip), and data already missing enter as AOFlagger's input flags.

Offline (``xengine reprocess``), a file's whole time span at once. Live (:class:`SlidingRfi`),
each dump as it comes, over a window of itself and the :data:`LIVE_WINDOW` - 1 dumps before
it: no delay (its flags go out with it), the window bounded; the price is that the newest dump
lies at its window's edge, where AOFlagger sees its neighbours on one side only.
"""

from __future__ import annotations

from collections import deque
from pathlib import Path

import numpy as np

#: Dumps in the live sliding window: the dump flagged and those before it.
LIVE_WINDOW = 8
#: ``TelescopeId`` names of AOFlagger's strategies by telescope name, lower case.
TELESCOPES = {"mwa": "MWA", "lofar": "LOFAR", "jvla": "JVLA", "vla": "JVLA", "wsrt": "WSRT",
              "parkes": "Parkes", "arecibo": "Arecibo", "aartfaac": "AARTFAAC",
              "bighorns": "Bighorns"}


class RfiUnavailable(RuntimeError):
    """AOFlagger (or the strategy) cannot be used; the message says why."""


def parse_rfi(text: str) -> tuple[str, Path | None]:
    """``aoflagger`` or ``aoflagger:STRATEGY.lua`` -> (method, strategy file or None)."""
    method, _, strategy = text.partition(":")
    if method != "aoflagger":
        raise ValueError(f"RFI flagger {method!r}: expected aoflagger or aoflagger:STRATEGY.lua")
    if _ and not strategy:
        raise ValueError("aoflagger: with a colon, name a strategy file (aoflagger:FILE.lua)")
    path = Path(strategy) if strategy else None
    if path is not None and not path.is_file():
        raise ValueError(f"AOFlagger strategy {path}: no such file")
    return method, path


class AOFlaggerRfi:
    """AOFlagger with the strategy for ``telescope`` (or ``strategy``, a Lua file)."""

    def __init__(self, telescope: str = "", strategy: Path | None = None) -> None:
        try:
            import aoflagger
        except ImportError as exc:
            raise RfiUnavailable(f"--rfi aoflagger needs AOFlagger's Python module "
                                 f"(pip install aoflagger, or the 'flagging' extra): "
                                 f"{exc}") from None
        self._ao = aoflagger
        self.flagger = aoflagger.AOFlagger()
        if strategy is None:
            tid = getattr(aoflagger.TelescopeId, TELESCOPES.get(telescope.lower(), "Generic"))
            strategy = Path(self.flagger.find_strategy_file(tid))
        self.strategy_path = Path(strategy)
        try:
            self.strategy = self.flagger.load_strategy_file(str(strategy))
        except Exception as exc:  # noqa: BLE001 - AOFlagger raises RuntimeError or its own
            raise RfiUnavailable(f"AOFlagger strategy {strategy}: {exc}") from None

    def flag(self, vis: np.ndarray, valid: np.ndarray,
             given: np.ndarray | None = None) -> np.ndarray:
        """bool ``[T, C, nbaseline]``: RFI found in ``T`` dumps ``vis [T, C, nbaseline, 2]``
        (the packed triangle) with ``valid`` spectra (broadcastable to ``[T, C, nbaseline]``;
        zero: no data), ``given``: visibilities flagged already (bad inputs), which AOFlagger
        leaves out of its statistics (with the missing ones) and which are not returned."""
        t, c, nbl, _ = vis.shape
        valid = np.broadcast_to(np.asarray(valid), (t, c, nbl))
        out = np.zeros((t, c, nbl), bool)
        if t == 0:
            return out
        images = self.flagger.make_image_set(t, c, 2)
        mask_in = self.flagger.make_flag_mask(t, c, False)
        for b in range(nbl):
            n = valid[:, :, b]
            known = n == 0 if given is None else (n == 0) | given[:, :, b]
            if known.all():
                continue
            v = vis[:, :, b, :].astype(np.float32) / np.maximum(n, 1)[:, :, None]
            images.set_image_buffer(0, np.ascontiguousarray(v[:, :, 0].T))
            images.set_image_buffer(1, np.ascontiguousarray(v[:, :, 1].T))
            if known.any():
                mask_in.set_buffer(np.ascontiguousarray(known.T))
                mask = self.strategy.run(images, mask_in)
            else:
                mask = self.strategy.run(images)
            out[:, :, b] = np.asarray(mask.get_buffer(), bool).T & ~known
        return out


def flagged_fractions(flags: np.ndarray, among: np.ndarray | None = None) -> dict[str, list]:
    """Flagged fraction per channel and per dump of ``flags [T, C, nbl]`` over the baselines
    ``among`` (bool ``[T, nbl]``; default all)."""
    t, c, nbl = flags.shape
    weight = (np.ones((t, nbl), bool) if among is None else among)[:, None, :]
    n = np.broadcast_to(weight, flags.shape)
    hit = flags & n
    per_chan = hit.sum(axis=(0, 2)) / np.maximum(n.sum(axis=(0, 2)), 1)
    per_dump = hit.sum(axis=(1, 2)) / np.maximum(n.sum(axis=(1, 2)), 1)
    total = hit.sum() / max(int(n.sum()), 1)
    return {"flagged_fraction": round(float(total), 6),
            "per_channel": [round(float(x), 6) for x in per_chan],
            "per_dump": [round(float(x), 6) for x in per_dump]}


class SlidingRfi:
    """Live RFI flags (module docstring): each dump flagged as it comes, over a window of
    itself and the ``window - 1`` dumps before it."""

    def __init__(self, flagger: AOFlaggerRfi, window: int = LIVE_WINDOW) -> None:
        if window < 1:
            raise ValueError(f"the RFI window must be at least 1 dump, got {window}")
        self.flagger, self.window = flagger, window
        self._dumps: deque = deque(maxlen=window)  # (vis, valid, given) [C, nbaseline, ...]

    def push(self, vis: np.ndarray, valid: np.ndarray, given: np.ndarray) -> np.ndarray:
        """Add a dump (``vis [C, nbaseline, 2]``, ``valid`` and ``given`` flags broadcastable
        to ``[C, nbaseline]``); returns its RFI flags ``[C, nbaseline]``."""
        c, nbl = vis.shape[:2]
        self._dumps.append((np.array(vis, copy=True), np.array(np.broadcast_to(valid, (c, nbl))),
                            np.array(np.broadcast_to(given, (c, nbl)))))
        vis_w, valid_w, given_w = (np.stack(a) for a in zip(*self._dumps, strict=True))
        return self.flagger.flag(vis_w, valid_w, given_w)[-1]

    def reset(self) -> None:
        """Forget the window (a new sequence)."""
        self._dumps.clear()
