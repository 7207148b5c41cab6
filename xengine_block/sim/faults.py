"""Faults the F-engine simulator can inject, so that tests and ``pipelines/fx.py`` show what the
input health checks and the RFI flagger find (``docs/flagging.md``).

Input faults (:class:`InputFault`), on one stream, over a range of spectra, applied to the
quantised samples:

- ``dead``: every sample zero (a cable off, a digitiser down);
- ``stuck``: every sample of each channel held at one value (drawn from the simulator's seed,
  the stream and the fault's first spectrum: a frozen digitiser, samples that do not change);
- ``saturated``: the samples multiplied by ``level`` (default 30) and clipped to the
  quantiser's range (a transmitter nearby, an attenuator at 0 dB);
- ``decorrelated``: the samples replaced by independent noise of the same rms (a swapped or
  unconnected cable: power, but none of the sky).

RFI (:class:`RfiSignal`), common to every stream (a transmitter every antenna hears), added to
the voltages before quantisation, in units of the receiver noise's rms:

- ``narrowband``: a tone in one channel, persistent or only in spectra ``[start, stop)``, or
  intermittent (on for the first half of every ``period`` spectra);
- ``broadband``: a burst over every channel in spectra ``[start, stop)``.

Spectra ranges are absolute spectrum indices (``stop`` None: to the end). Everything is
deterministic in the simulator's seed and the spectrum index, like the simulator's noise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: Input fault kinds.
FAULTS = ("dead", "stuck", "saturated", "decorrelated")
#: RFI kinds.
RFI_KINDS = ("narrowband", "broadband")


@dataclass(frozen=True)
class InputFault:
    """A fault of stream ``2 * antenna + pol`` in spectra ``[start, stop)``."""

    kind: str
    antenna: int
    pol: int
    start: int = 0
    stop: int | None = None
    level: float = 30.0  # saturated: the gain before clipping

    def __post_init__(self) -> None:
        if self.kind not in FAULTS:
            raise ValueError(f"fault {self.kind!r}: expected one of {', '.join(FAULTS)}")
        if self.antenna < 0 or self.pol not in (0, 1):
            raise ValueError(f"fault {self.kind}: antenna {self.antenna} pol {self.pol}: "
                             f"expected an antenna index >= 0 and pol 0 (x) or 1 (y)")

    @property
    def stream(self) -> int:
        return 2 * self.antenna + self.pol


@dataclass(frozen=True)
class RfiSignal:
    """RFI of ``amplitude`` noise rms (module docstring)."""

    kind: str
    amplitude: float
    channel: int = 0  # narrowband
    start: int = 0
    stop: int | None = None
    period: int | None = None  # narrowband: intermittent, on for the first half of each period

    def __post_init__(self) -> None:
        if self.kind not in RFI_KINDS:
            raise ValueError(f"RFI {self.kind!r}: expected one of {', '.join(RFI_KINDS)}")
        if not self.amplitude > 0 or self.channel < 0 or (self.period is not None
                                                          and self.period < 2):
            raise ValueError(f"RFI {self.kind}: amplitude > 0, channel >= 0 and a period of "
                             f"at least 2 spectra, got {self.amplitude}, {self.channel}, "
                             f"{self.period}")


def _span(start: int, stop: int | None, t0: int, n: int) -> tuple[int, int]:
    """The part ``[a, b)`` of spectra ``t0 .. t0 + n`` in ``[start, stop)``, relative to t0."""
    a = max(start - t0, 0)
    b = n if stop is None else min(stop - t0, n)
    return a, max(a, b)


def _rng(seed: int, salt: int, t0: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, salt, t0])))


def add_rfi(v: np.ndarray, t0: int, rfi: Sequence[RfiSignal], seed: int) -> None:
    """Add ``rfi`` to float voltages ``v [S, C, n]`` (complex) of spectra ``t0 ..``, before
    the quantiser's gain."""
    n = v.shape[2]
    t = np.arange(t0, t0 + n)
    for i, r in enumerate(rfi):
        a, b = _span(r.start, r.stop, t0, n)
        if a >= b:
            continue
        on = np.zeros(n, bool)
        on[a:b] = True
        if r.period is not None:
            on &= (t % r.period) < r.period // 2
        if r.kind == "narrowband":
            if r.channel >= v.shape[1]:
                continue
            tone = (r.amplitude * np.exp(2j * np.pi * 0.1234 * t)).astype(np.complex64)
            v[:, r.channel, on] += tone[on]
        else:
            g = _rng(seed, 1000 + i, t0)
            burst = (g.standard_normal((v.shape[1], n)) + 1j * g.standard_normal(
                (v.shape[1], n))) * (r.amplitude / np.sqrt(2))
            v[:, :, on] += burst[:, on].astype(np.complex64)


def apply_faults(x: np.ndarray, t0: int, faults: Sequence[InputFault],
                 sample_range: tuple[int, int], seed: int) -> None:
    """Apply ``faults`` to quantised samples ``x [S, C, n, 2]`` int8 of spectra ``t0 ..``."""
    n = x.shape[2]
    lo, hi = sample_range
    for f in faults:
        s = f.stream
        if s >= x.shape[0]:
            continue
        a, b = _span(f.start, f.stop, t0, n)
        if a >= b:
            continue
        seg = x[s, :, a:b]
        if f.kind == "dead":
            seg[...] = 0
        elif f.kind == "stuck":
            held = _rng(seed, 3000 + s, f.start).integers(lo // 4, hi // 4 + 1, (x.shape[1], 2))
            seg[...] = held[:, None, :]
        elif f.kind == "saturated":
            seg[...] = np.clip(seg.astype(np.float32) * f.level, lo, hi)
        else:  # decorrelated: noise of the same rms, none of the sky
            rms = float(np.sqrt(np.mean(seg.astype(np.float32) ** 2))) or 1.0
            noise = _rng(seed, 2000 + s, t0 + a).standard_normal(seg.shape) * rms
            seg[...] = np.clip(np.rint(noise), lo, hi)


def parse_fault(text: str) -> InputFault:
    """``KIND:ANT:POL[:START[:STOP]]`` (pol x or y; START, STOP in spectra)."""
    parts = text.split(":")
    if len(parts) < 3 or len(parts) > 5 or parts[2] not in ("x", "y"):
        raise ValueError(f"fault {text!r}: expected KIND:ANTENNA:POL[:START[:STOP]], POL x or "
                         f"y, KIND one of {', '.join(FAULTS)}")
    try:
        nums = [int(p) for p in (parts[1], *parts[3:])]
    except ValueError:
        raise ValueError(f"fault {text!r}: ANTENNA, START and STOP are integers") from None
    return InputFault(parts[0], nums[0], "xy".index(parts[2]),
                      nums[1] if len(nums) > 1 else 0, nums[2] if len(nums) > 2 else None)


def parse_rfi_signal(text: str) -> RfiSignal:
    """``narrowband:CHAN:AMP[:START:STOP[:PERIOD]]`` or ``broadband:START:STOP:AMP``."""
    kind, _, rest = text.partition(":")
    try:
        nums = [float(p) for p in rest.split(":")] if rest else []
        if kind == "narrowband" and len(nums) in (2, 4, 5):
            stop = int(nums[3]) if len(nums) > 3 else None
            return RfiSignal(kind, nums[1], int(nums[0]), int(nums[2]) if len(nums) > 2 else 0,
                             stop, int(nums[4]) if len(nums) > 4 else None)
        if kind == "broadband" and len(nums) == 3:
            return RfiSignal(kind, nums[2], start=int(nums[0]), stop=int(nums[1]))
    except ValueError as exc:
        raise ValueError(f"RFI {text!r}: {exc}") from None
    raise ValueError(f"RFI {text!r}: expected narrowband:CHAN:AMP[:START:STOP[:PERIOD]] or "
                     f"broadband:START:STOP:AMP")
