"""RFI flags from AOFlagger (PyPI ``aoflagger``: the library and its strategies).

Each antenna pair's time x frequency data, its four polarisation products as AOFlagger's eight
images (re, im of XX, XY, YX, YY), goes through the strategy, and the mask flags the pair's four
products (as MWA's Birli and LOFAR's DP3 run it: per baseline, over the observation's time and
frequency). The strategy is the telescope's where AOFlagger ships one (its ``TelescopeId``:
MWA, LOFAR, JVLA, WSRT, ...), else its generic one, or a Lua file of the user's
(``--rfi aoflagger:STRATEGY.lua``). Visibilities are divided by their spectra first (a dump
with fewer spectra is no dip), and data already missing enter as AOFlagger's input flags.

Offline (``xengine reprocess``), a file's whole time span at once. Live, a sliding window of
:data:`LIVE_WINDOW` dumps (:class:`SlidingRfi`): a dump is flagged when the ``window // 2``
dumps after it have arrived, so its flags come that many dumps late, never more (and at the
end of a sequence, with the dumps there are).
"""

from __future__ import annotations

from collections import deque
from pathlib import Path

import numpy as np

from ..triangle import baseline_index

#: Dumps in the live sliding window (odd: as many after the flagged dump as before it).
LIVE_WINDOW = 9
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


def pair_products(nant: int) -> tuple[np.ndarray, np.ndarray]:
    """(antenna pairs ``[P, 2]`` with a1 <= a2, triangle index of their four products
    ``[P, 4]`` in the order XX, XY, YX, YY)."""
    a1, a2 = np.triu_indices(nant)
    feeds = ((0, 0), (0, 1), (1, 0), (1, 1))
    idx = np.empty((a1.size, 4), np.int64)
    for p, (f1, f2) in enumerate(feeds):
        s1, s2 = 2 * a1 + f1, 2 * a2 + f2
        idx[:, p] = baseline_index(np.minimum(s1, s2), np.maximum(s1, s2))
    return np.stack([a1, a2], axis=1), idx


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

    def flag(self, vis: np.ndarray, valid: np.ndarray, nstream: int) -> np.ndarray:
        """bool ``[T, C, nbaseline]``: RFI found in ``T`` dumps ``vis [T, C, nbaseline, 2]``
        (the packed triangle) with ``valid`` spectra (broadcastable to ``[T, C, nbaseline]``;
        zero: no data, AOFlagger's input flag)."""
        t, c, nbl, _ = vis.shape
        valid = np.broadcast_to(np.asarray(valid), (t, c, nbl))
        out = np.zeros((t, c, nbl), bool)
        if t == 0:
            return out
        pairs, idx = pair_products(nstream // 2)
        images = self.flagger.make_image_set(t, c, 8)
        given = self.flagger.make_flag_mask(t, c, False)
        scale = 1.0 / np.maximum(valid, 1).astype(np.float32)  # [T, C, nbl]
        for p in range(pairs.shape[0]):
            cols = idx[p]
            v = vis[:, :, cols, :].astype(np.float32) * scale[:, :, cols, None]  # [T, C, 4, 2]
            for k in range(4):
                for part in range(2):
                    images.set_image_buffer(2 * k + part, np.ascontiguousarray(v[:, :, k, part].T))
            missing = (valid[:, :, cols] == 0).any(axis=2).T  # [C, T]
            if missing.any():
                given.set_buffer(np.ascontiguousarray(missing))
                mask = self.strategy.run(images, given)
            else:
                mask = self.strategy.run(images)
            flags = np.asarray(mask.get_buffer(), bool).T  # [T, C]
            out[:, :, cols] |= flags[:, :, None]
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
    """Live RFI flags over a sliding window of ``window`` dumps (module docstring): push each
    dump; get back the dumps now flagged (``delay = window // 2`` dumps late), and the rest at
    :meth:`drain`."""

    def __init__(self, flagger: AOFlaggerRfi, nstream: int, window: int = LIVE_WINDOW) -> None:
        if window < 1:
            raise ValueError(f"the RFI window must be at least 1 dump, got {window}")
        self.flagger, self.nstream, self.window = flagger, nstream, window
        self.delay = window // 2
        self._dumps: deque = deque(maxlen=window)  # (key, vis, valid)
        self._next = 0  # index in the window of the next dump to flag

    def push(self, key, vis: np.ndarray, valid: np.ndarray) -> list[tuple[object, np.ndarray]]:
        """Add a dump (``key`` comes back with its flags ``[C, nbaseline]``)."""
        full = len(self._dumps) == self.window
        self._dumps.append((key, np.array(vis, copy=True), np.array(valid, copy=True)))
        if full:
            self._next -= 1
        if len(self._dumps) - self._next <= self.delay:
            return []
        return self._flag(self._next + 1)

    def drain(self) -> list[tuple[object, np.ndarray]]:
        """The dumps not yet flagged (end of a sequence)."""
        return self._flag(len(self._dumps)) if self._dumps else []

    def _flag(self, upto: int) -> list[tuple[object, np.ndarray]]:
        keys, vis, valid = zip(*self._dumps, strict=True)
        c, nbl = vis[0].shape[:2]
        flags = self.flagger.flag(np.stack(vis), np.stack(
            [np.broadcast_to(v, (c, nbl)) for v in valid]), self.nstream)
        out = [(keys[i], flags[i]) for i in range(self._next, upto)]
        self._next = upto
        return out
