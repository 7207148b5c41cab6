"""Bifrost's sequence headers -> our header contract (docs/bifrost.md, "Headers from Bifrost").

Two kinds of header reach the X-engine from Bifrost's world:

- **Flat capture headers** (no ``_tensor``): what the LWA pipelines' sequence callbacks give
  Bifrost's ``UDPCapture`` / ``UDPVerbsCapture`` / ``DiskReader`` for the ``chips`` and
  ``snap2`` formats. The ring holds ``(time, chan, stand*pol)`` ci4 bytes, real part in the high
  nibble (the capture copies payload words verbatim: Bifrost ``src/formats/chips.hpp``
  ``CHIPSProcessor``, ``snap2.hpp``); one frame is one spectrum of every channel and input.
  Two dialects, checked against the callbacks that write them:

  * LWA-SV ADP / NDP (``lwa-project/lwa_sv`` ``scripts/adp_drx.py`` @c5af46b6 and
    ``lwa-project/ng_digital_processor`` ``scripts/ndp_drx.py`` @018b046a, ``CaptureOp
    .seq_callback``): ``time_tag`` = ``(utc_start - 1970) * FS + seq0 * (FS // CHAN_BW)`` in
    ticks of the LWA clock ``FS`` = 196 MHz (``AdpCommon.py`` / ``NdpCommon.py``), ``seq0`` =
    spectra since ``utc_start``, ``cfreq`` = ``(chan0 + (nchan - 1) / 2) * CHAN_BW`` (the centre
    of the band), ``bw`` = ``nchan * CHAN_BW``, ``nstand`` = ``nsrc * 16`` (ADP) or ``* 32``
    (NDP), ``npol`` 2, ``complex``, ``nbit`` 4.
  * OVRO-LWA lwa352 (``realtimeradio/caltech-bifrost-dsp``
    ``pipeline/lwa352_pipeline/blocks/capture_block.py`` @58816094 ``Capture.seq_callback``):
    ``time_tag`` = a counter of sequences, ``sync_time`` = Unix seconds of spectrum 0 (from the
    SNAP2 packets), ``seq0`` = spectra since ``sync_time``, ``sfreq`` = ``chan0 * chan_bw`` (the
    first channel's centre), ``bw_hz`` = ``nchan * chan_bw``, ``fs_hz`` = the **ADC** rate
    (196 MHz), ``system_nchan``, ``nstand``, ``npol``, ``complex``, ``nbit`` 4; older copies add
    ``input_to_ant`` (``[nstand*npol, 2]``: input ``n`` is stand ``S``, pol ``P``).

  Mapped as: our ``time_tag`` = ``seq0``; ``fs_hz`` (spectra per second) = ``chan_bw_hz`` =
  ``bw / nchan`` (critically sampled PFB channels: a spectrum per ``1 / chan_bw``); ADP/NDP
  ``sync_time`` = ``(time_tag - seq0 * FS / chan_bw) / FS`` (``utc_start``), lwa352's is its
  own; ``freq0_hz`` = ``cfreq - (nchan - 1) / 2 * chan_bw`` computed in exact rational
  arithmetic from the header's floats (ADP/NDP) or ``sfreq`` (lwa352). The header's own values
  stay, those we overwrite kept as ``capture_time_tag`` and ``adc_fs_hz`` (lwa352's ``fs_hz``).
- **Bifrost tensors** ``['time', 'freq', 'station' | 'stand', 'pol']`` (``bifrost.blocks``):
  times and frequencies from ``_tensor.scales`` (``[offset, step]``: value of index ``n`` is
  ``offset + n * step``): ``fs_hz = 1 / step`` of time, ``sync_time`` the time offset,
  ``freq0_hz`` / ``chan_bw_hz`` the freq scale.

Neither says where the antennas are or what they are called: without an ``array`` given to the
block (or in the header), :func:`assumed_array` is used and the block logs that once.
"""

from __future__ import annotations

import logging
import numbers
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from ..array import ArrayDescription, default_array
from ..geometry import NIBBLE_ORDERS
from ..sample_layout import SampleLayout

log = logging.getLogger(__name__)

#: Ticks per second of LWA time tags (ADP/NDP ``FS``: ``AdpCommon.py``, ``NdpCommon.py``).
LWA_TIME_TAG_HZ = 196e6
#: Keys every flat capture header has (both dialects).
FLAT_KEYS = ("seq0", "chan0", "nchan", "nstand", "npol", "complex", "nbit")
#: Dialect -> the keys that identify it and that it needs.
DIALECT_KEYS = {"lwa-sv": ("time_tag", "cfreq", "bw"), "lwa352": ("sync_time", "sfreq", "bw_hz")}
#: Header key saying which adaptation made a header (its value: the dialect or "tensor").
ADAPTED_KEY = "header_source"
#: Voltage tensor labels we read (Bifrost's correlate input; ``stand`` as lwa352 names it).
TENSOR_LABELS = (["time", "freq", "station", "pol"], ["time", "freq", "stand", "pol"])


class HeaderError(ValueError):
    """A header we cannot correlate exactly; the message names the key and its value."""


def _bad(key: str, value: Any, why: str) -> HeaderError:
    return HeaderError(f"header {key} = {value!r}: {why}")


#: Units of tensor scales we read, per base unit (Bifrost's blocks write e.g. ``'MHz'``:
#: ``blocks/guppi_raw.py``); no unit means the base unit.
UNITS = {"s": {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9},
         "Hz": {"Hz": 1.0, "kHz": 1e3, "MHz": 1e6, "GHz": 1e9}}


def _scale(tensor: Mapping[str, Any], axis: int, base: str) -> tuple[float, float] | None:
    """``(offset, step)`` of a tensor axis in ``base`` units (``s`` or ``Hz``), or None."""
    scales = tensor.get("scales") or [None] * len(tensor["shape"])
    units = tensor.get("units") or [None] * len(tensor["shape"])
    factor = UNITS[base].get(units[axis] or base)
    if not scales[axis] or factor is None:
        return None
    return float(scales[axis][0]) * factor, float(scales[axis][1]) * factor


def _int(hdr: Mapping[str, Any], key: str, lo: int = 0) -> int:
    v = hdr[key]
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < lo:
        raise _bad(key, v, f"must be an integer >= {lo}")
    return int(v)


def _real(hdr: Mapping[str, Any], key: str) -> float:
    v = hdr[key]
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise _bad(key, v, "must be a number")
    return float(v)


# ------------------------------------------------------------------------- the array
#: Spacing of the assumed array's placeholder positions (a line to the east), metres.
ASSUMED_SPACING_M = 1.0


def assumed_array(nstation: int) -> ArrayDescription:
    """What the blocks assume when no header or argument describes the array: ``nstation``
    antennas named ``station0``, ``station1``, ... numbered 0, 1, ... in input order, at the
    site of the default array (:func:`~xengine_block.array.default_array`: the MWA's, from
    pyuvdata's package data), on a line to the east :data:`ASSUMED_SPACING_M` apart. The
    positions are placeholders (distinct, because UVH5 readers refuse cross-correlations
    without a baseline): correlations are exact, but nothing can be phased or imaged until a
    real array is given."""
    site = default_array(1)
    enu = [[ASSUMED_SPACING_M * i, 0.0, 0.0] for i in range(nstation)]
    return ArrayDescription("unknown", site.latitude_deg, site.longitude_deg, site.altitude_m,
                            [f"station{i}" for i in range(nstation)], list(range(nstation)),
                            enu, instrument="xengine_block")


def _array(hdr: Mapping[str, Any], array: ArrayDescription | None, nstation: int,
           assumed: list[str]) -> dict[str, Any]:
    if "array" in hdr:
        return hdr["array"]
    if array is None:
        array = assumed_array(nstation)
        assumed.append(f"no array given: assumed {nstation} antennas station0..station"
                       f"{nstation - 1} at placeholder positions ({ASSUMED_SPACING_M:g} m "
                       f"apart to the east) on the default site (lat "
                       f"{array.latitude_deg:.4f}, lon {array.longitude_deg:.4f}): uvw mean "
                       f"nothing; pass array= for names and positions")
    elif array.nant != nstation:
        raise _bad("nstand", nstation, f"the array given has {array.nant} antennas")
    return array.to_dict()


# ------------------------------------------------------------------------- flat headers
def dialect(hdr: Mapping[str, Any]) -> str:
    """Which flat-header dialect ``hdr`` is (``lwa-sv``: ADP/NDP, or ``lwa352``), or
    :class:`HeaderError` naming the keys it lacks."""
    for name, keys in DIALECT_KEYS.items():
        if keys[1] in hdr:
            missing = [k for k in (*FLAT_KEYS, *keys) if k not in hdr]
            if missing:
                raise HeaderError(f"{name} capture header lacks {missing} (docs/bifrost.md: "
                                  f"Headers from Bifrost)")
            return name
    missing = [k for k in FLAT_KEYS if k not in hdr]
    raise HeaderError("header has no _tensor and is no LWA capture header: it lacks "
                      "'cfreq' (ADP/NDP) or 'sfreq' (lwa352)"
                      + (f" and {missing}" if missing else ""))


def capture_layout(nchan: int, nstand: int, npol: int, nbit: int, nibble_order: str,
                   input_to_ant: Any = None) -> SampleLayout:
    """One spectrum of a capture ring, ``[chan][input]`` with input ``stand * npol + pol``
    (or as ``input_to_ant`` says), as a :class:`SampleLayout`."""
    encoding = "ci4" if nbit == 4 else "ci8"
    if npol == 1:  # one stream per stand: streams pair up as they come
        axes = [("freq", nchan), ("stream", nstand)]
    else:
        axes = [("freq", nchan), ("station", nstand), ("pol", npol)]
    layout = SampleLayout.from_axes(axes, encoding=encoding, nibble_order=nibble_order)
    if input_to_ant is None:
        return layout
    inputs = [list(map(int, p)) for p in input_to_ant]
    where = {(s, p): n for n, (s, p) in enumerate(inputs)}
    want = [(s, p) for s in range(nstand) for p in range(npol)]
    if len(inputs) != nstand * npol or sorted(where) != want:
        raise _bad("input_to_ant", f"<{len(inputs)} inputs>", f"must list each of {nstand} "
                   f"stands x {npol} pols once ([stand, pol] per input)")
    step = layout.stream_offsets[1] - layout.stream_offsets[0]  # bytes per input
    return layout.replace(stream_offsets=tuple(where[sp] * step for sp in want))


def _single_pol(key: str, value: Any, nstation: int, allowed: bool) -> None:
    """One polarisation: its stations pair up into our two-stream antennas (``allowed``: the
    correlate block, whose matrix has no antennas), which needs an even count."""
    if not allowed:
        raise _bad(key, value, "one polarisation: the X-engine's streams are antennas' X and "
                               "Y; correlate it with xengine_block.bifrost.correlate (a "
                               "station matrix, no antennas)")
    if nstation % 2:
        raise _bad(key, value, f"{nstation} stations of one pol are merged into pairs of "
                               f"streams: their count must be even")


def flat_to_contract(hdr: Mapping[str, Any], *, array: ArrayDescription | None = None,
                     time_tag_hz: float = LWA_TIME_TAG_HZ, nibble_order: str = "re_high",
                     single_pol: bool = False) -> tuple[dict[str, Any], list[str]]:
    """A flat capture header -> (our contract header, what was assumed); see the module
    docstring for the mapping. :class:`HeaderError` names the key that is wrong.
    ``single_pol``: accept ``npol`` 1 (:func:`_single_pol`)."""
    kind = dialect(hdr)
    nchan, nstand = _int(hdr, "nchan", 1), _int(hdr, "nstand", 1)
    npol, nbit, seq0 = _int(hdr, "npol", 1), _int(hdr, "nbit", 1), _int(hdr, "seq0")
    chan0 = _int(hdr, "chan0")
    if hdr["complex"] is not True:
        raise _bad("complex", hdr["complex"], "real samples cannot be correlated here")
    if nbit not in (4, 8):
        raise _bad("nbit", nbit, "4 (ci4) or 8 (ci8) bits per part are correlated exactly")
    if npol not in (1, 2):
        raise _bad("npol", npol, "must be 1 or 2")
    if npol == 1:
        _single_pol("npol" if not single_pol else "nstand",
                    npol if not single_pol else nstand, nstand, single_pol)
    if nibble_order not in NIBBLE_ORDERS:
        raise _bad("nibble_order", nibble_order, f"must be one of {NIBBLE_ORDERS}")
    assumed: list[str] = []
    out = {k: v for k, v in hdr.items() if k != "_tensor"}
    if kind == "lwa-sv":
        chan_bw = Fraction(_real(hdr, "bw")) / nchan
        freq0 = Fraction(_real(hdr, "cfreq")) - Fraction(nchan - 1, 2) * chan_bw
        ticks = Fraction(time_tag_hz) / chan_bw  # time-tag ticks per spectrum
        if ticks.denominator != 1:
            raise _bad("bw", hdr["bw"], f"channels of {float(chan_bw)} Hz are no whole number "
                                        f"of {time_tag_hz} Hz time-tag ticks")
        tag = _int(hdr, "time_tag")
        sync = (tag - seq0 * ticks) / Fraction(time_tag_hz)
        out.update(capture_time_tag=tag, time_tag_hz=time_tag_hz,
                   ticks_per_spectrum=int(ticks))
        assumed.append(f"time_tag counts {time_tag_hz / 1e6:g} MHz ticks (LWA FS)")
        if abs(freq0 - chan0 * chan_bw) > chan_bw / 1000:
            log.warning("capture header: cfreq %r puts channel 0 at %.6f Hz, chan0 * bw / "
                        "nchan at %.6f Hz; using cfreq", hdr["cfreq"], float(freq0),
                        float(chan0 * chan_bw))
    else:
        chan_bw = Fraction(_real(hdr, "bw_hz")) / nchan
        freq0 = Fraction(_real(hdr, "sfreq"))
        sync = Fraction(_real(hdr, "sync_time"))
        out.update(capture_time_tag=hdr.get("time_tag"))
        if "fs_hz" in hdr:
            out["adc_fs_hz"] = hdr["fs_hz"]
    if chan_bw <= 0:
        raise _bad("bw" if kind == "lwa-sv" else "bw_hz", hdr.get("bw", hdr.get("bw_hz")),
                   "must be > 0")
    fs = float(chan_bw)  # spectra per second per channel (critically sampled channels)
    assumed.append(f"{fs:g} spectra per second (one per 1 / channel width)")
    layout = capture_layout(nchan, nstand, npol, nbit, nibble_order, hdr.get("input_to_ant"))
    dtype = "ci4" if nbit == 4 else "ci8"
    shape = [-1, nchan, nstand, npol]  # npol 1: sample_layout says how the stands pair up
    labels = ["time", "freq", "station", "pol"]
    t0 = float(sync + Fraction(seq0) / chan_bw)
    out.update({
        ADAPTED_KEY: kind, "name": f"{kind}-{seq0}", "time_tag": seq0,
        "sync_time": float(sync), "fs_hz": fs, "chan0": chan0, "nchan": nchan,
        "freq0_hz": float(freq0), "chan_bw_hz": fs, "sample_layout": layout.to_dict(),
        "array": _array(hdr, array, nstand * npol // 2, assumed),
        "_tensor": {"dtype": dtype, "shape": shape, "labels": labels,
                    "scales": [[t0, 1 / fs], [float(freq0), fs]] + [None] * (len(shape) - 2),
                    "units": ["s", "Hz"] + [None] * (len(shape) - 2)},
    })
    return out, assumed


# ----------------------------------------------------------------------- tensor headers
def tensor_to_contract(hdr: Mapping[str, Any], *, array: ArrayDescription | None = None,
                       single_pol: bool = False) -> tuple[dict[str, Any], list[str]]:
    """A Bifrost voltage tensor header -> (the same with our contract's time, frequency and
    array keys where it lacks them, what was assumed). Other tensors pass unchanged.
    ``single_pol``: accept a pol axis of 1 (:func:`_single_pol`)."""
    tensor = hdr["_tensor"]
    if list(tensor.get("labels", [])) not in TENSOR_LABELS:
        return dict(hdr), []
    out, assumed = dict(hdr), []
    shape = tensor["shape"]
    nchan, nstation, npol = (int(n) for n in shape[1:4])
    tscale, fscale = _scale(tensor, 0, "s"), _scale(tensor, 1, "Hz")
    if "fs_hz" not in out:
        if not tscale or not tscale[1]:
            raise _bad("_tensor.scales[0]", (tensor.get("scales") or [None])[0],
                       "the time axis needs [offset, step] in seconds (or give fs_hz)")
        out["fs_hz"] = 1 / tscale[1]
    if "sync_time" not in out:
        # time_tag (spectra) counts from sync_time: the tensor's offset is time_tag's time.
        offset = tscale[0] if tscale else 0.0
        out["sync_time"] = offset - int(hdr.get("time_tag", 0)) / out["fs_hz"]
        if not offset:
            assumed.append("time axis offset 0: times count from it, not from a real epoch")
    if "freq0_hz" not in out or "chan_bw_hz" not in out:
        if not fscale:
            raise _bad("_tensor.scales[1]", (tensor.get("scales") or [None, None])[1],
                       "the freq axis needs [offset, step] in Hz (or give freq0_hz, "
                       "chan_bw_hz)")
        out.setdefault("freq0_hz", fscale[0])
        out.setdefault("chan_bw_hz", fscale[1])
        if not fscale[0]:
            assumed.append("freq axis offset 0 Hz: channel 0 is at 0 Hz")
    out.setdefault("nchan", nchan)
    out.setdefault("chan0", 0)
    if npol == 2:
        out["array"] = _array(hdr, array, nstation, assumed)
    elif npol == 1 and single_pol and "sample_layout" not in out:
        # (without single_pol the X-engine refuses the pol axis of 1 itself, in one line)
        _single_pol("_tensor.shape", shape, nstation, single_pol)
        encoding = {"ci4": "ci4", "ci8": "ci8", "ci16": "ci16"}.get(tensor.get("dtype"))
        if encoding is not None:
            out["sample_layout"] = SampleLayout.from_axes(
                [("freq", nchan), ("stream", nstation)], encoding=encoding,
                nibble_order=hdr.get("nibble_order", "re_high")).to_dict()
    out[ADAPTED_KEY] = out.get(ADAPTED_KEY, "tensor")
    return out, assumed


# ----------------------------------------------------------------------- the transform
class HeaderAdapter:
    """A ring header transform (Bifrost ``header_transform``) giving the X-engine our
    contract from any of the headers above; headers already in our contract (ours, with
    ``geometry`` or ``sample_layout``) pass unchanged. What it assumes is logged once per
    adapter (``who``: the block's name)."""

    def __init__(self, who: str | None, *, array: ArrayDescription | None = None,
                 time_tag_hz: float = LWA_TIME_TAG_HZ, nibble_order: str = "re_high",
                 single_pol: bool = False) -> None:
        self.who, self.array, self.single_pol = who, array, single_pol
        self.time_tag_hz, self.nibble_order = time_tag_hz, nibble_order
        self._said: set[str] = set()

    def __call__(self, hdr: dict[str, Any]) -> dict[str, Any]:
        if "_tensor" not in hdr:
            out, assumed = flat_to_contract(hdr, array=self.array, time_tag_hz=self.time_tag_hz,
                                            nibble_order=self.nibble_order,
                                            single_pol=self.single_pol)
        elif ADAPTED_KEY in hdr or "geometry" in hdr:
            return hdr
        else:
            out, assumed = tensor_to_contract(hdr, array=self.array, single_pol=self.single_pol)
        for line in assumed:
            if line not in self._said:
                self._said.add(line)
                log.info("%s: sequence %r: %s", self.who, out.get("name"), line)
        return out
