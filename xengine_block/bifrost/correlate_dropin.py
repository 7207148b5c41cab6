"""``correlate``: Bifrost's ``bifrost.blocks.correlate`` on a CPU or an NPU, and the TCC order.

A drop-in: a pipeline written for Bifrost's correlate runs by changing its import to
``from xengine_block.bifrost import correlate``. Semantics are those of Bifrost 0.10's
``python/bifrost/blocks/correlate.py``, read and checked one by one:

- input ``_tensor`` labelled ``['time', 'freq', 'station', 'pol']`` (also ``stand``, and the
  LWA capture rings' flat headers, which :mod:`.headers` reads), complex integer samples;
- output: one frame per ``nframe_per_integration`` input frames, integrated from the start of
  the sequence; header a copy of the input's with ``_tensor`` dtype ``cf32`` (or ``ci32``),
  ``shape`` / ``labels`` / ``scales`` / ``units`` ``[time, freq, station, pol, station, pol]``
  with ``_i`` / ``_j`` on the last four labels, ``scales[0][1] *= nframe_per_integration``,
  ``matrix_fill_mode: 'lower'``, ``gulp_nframe`` 1 (Bifrost's pipeline writes 1: the block's
  output frames per gulp);
- the gulp rule: ``nframe_per_integration`` must be a multiple of the block's gulp
  (``gulp_nframe`` given, else ``min(input gulp_nframe, nframe_per_integration)``), else the
  same ValueError Bifrost raises;
- values ``V[i, j] = sum conj(x_i) x_j``, ``i = npol * station_i + pol_i`` the slow axis, the
  lower triangle ``i >= j`` written, the upper triangle left as the ring memory held it (as
  Bifrost's kernel, whose test zeroes it before comparing).

Unlike Bifrost's (float accumulation on a GPU) the sums are exact integers, rounded once to
float32 for ``cf32``; ``dtype='ci32'`` gives them as integers (within the int32 bound: an
integration of more spectra is refused). ``order='tcc'`` gives the TCC wrapper's order instead
(``[freq, nbaseline * npol**2]``, ``x_i conj(x_j)``, stations ``i <= j`` row-major, with the LWA
keys its downstream blocks read: :func:`tcc_header`), integrated on absolute spectrum counts as
the LWA correlators are.

The correlation is our X-engine (:class:`~xengine_block.bifrost.blocks.XEngineBlock`, any
backend); a second block writes its packed triangle in Bifrost's (or the TCC's) order.
"""

from __future__ import annotations

import copy
import logging
from fractions import Fraction
from typing import Any

import numpy as np

from ..array import ArrayDescription
from ..blocks.base import BlockLogic
from ..geometry import max_spectra_int32
from ..visibility_orders import (
    BIFROST_FILL_MODE,
    TCC_ORDER,
    triangle_to_bifrost_matrix,
    triangle_to_tcc,
)
from .blocks import XEngineBlock
from .headers import ADAPTED_KEY, TENSOR_LABELS, HeaderAdapter, HeaderError
from .runtime import BifrostBlock, bfp

log = logging.getLogger(__name__)

#: Output dtypes and orders.
DTYPES = ("cf32", "ci32")
ORDERS = ("matrix", "tcc")
#: Header key carrying what the output header needs of the input's (the X-engine between
#: them rewrites ``_tensor``, ``time_tag`` and ``gulp_nframe``).
SOURCE_KEY = "correlate_input"
#: Bifrost's ``TransformBlock`` positional arguments after the input (``MultiTransformBlock``
#: then ``Block``), which ``correlate(iring, n, *args)`` passes on.
BLOCK_ARGS = ("guarantee", "name", "type_")
#: Integer dtypes the X-engine correlates exactly, and their bits per part.
INPUT_BITS = {"ci4": 4, "ci8": 8, "ci16": 8}


def _gulp_error(gulp: int, n: int) -> ValueError:
    # Bifrost's message, word for word (correlate.py, on_sequence).
    return ValueError(f"gulp_nframe ({gulp:d}) does not divide nframe_per_integration ({n:d})")


class CorrelateHeaders(HeaderAdapter):
    """The X-engine's input headers for :func:`correlate`: Bifrost's checks on the input, what
    the output header needs of it kept under :data:`SOURCE_KEY`, and (``order='matrix'``)
    spectra counted from the sequence's start, so integrations start there as Bifrost's do
    (times stay absolute: ``sync_time`` moves by as much)."""

    def __init__(self, who: str, nframe: int, *, dtype: str, order: str,
                 gulp_nframe: int | None, **kwargs: Any) -> None:
        super().__init__(who, single_pol=True, **kwargs)
        self.nframe, self.dtype, self.order, self.gulp_nframe = nframe, dtype, order, gulp_nframe

    def __call__(self, hdr: dict[str, Any]) -> dict[str, Any]:
        if "_tensor" in hdr:  # a Bifrost tensor (flat capture headers are checked by the adapter)
            tensor = hdr["_tensor"]
            if list(tensor.get("labels", [])) not in TENSOR_LABELS:
                raise HeaderError(f"header _tensor.labels = {tensor.get('labels')!r}: "
                                  f"correlate reads ['time', 'freq', 'station', 'pol']")
            if tensor.get("dtype") not in INPUT_BITS:
                raise HeaderError(f"header _tensor.dtype = {tensor.get('dtype')!r}: {self.dtype} "
                                  f"output is correlated exactly from integer samples (ci4, ci8, "
                                  f"ci16) only; quantize first (bifrost.blocks.quantize)")
        out = super().__call__(hdr)
        # What Bifrost's output header copies of the input's: a tensor's own name, time_tag and
        # gulp; a capture header's as adapted (its time_tag is the pipeline's clock, not ours).
        raw = hdr if "_tensor" in hdr else out
        source = {k: raw.get(k) for k in ("name", "time_tag", "gulp_nframe", "_tensor")}
        source = copy.deepcopy(source)
        source["sync_time"] = out["sync_time"]
        dtype = out["_tensor"]["dtype"]
        if self.dtype == "ci32" and self.nframe > max_spectra_int32(INPUT_BITS[dtype]):
            raise HeaderError(f"header _tensor.dtype = {dtype!r}: {self.nframe} spectra per "
                              f"integration can overflow ci32 output (at most "
                              f"{max_spectra_int32(INPUT_BITS[dtype])}); use dtype='cf32'")
        gulp = self.gulp_nframe or min(source["gulp_nframe"] or self.nframe, self.nframe)
        if self.nframe % gulp:
            raise _gulp_error(gulp, self.nframe)
        if self.order == "matrix" and out["time_tag"]:
            shift = Fraction(int(out["time_tag"])) / Fraction(out["fs_hz"])
            out["sync_time"] = float(Fraction(out["sync_time"]) + shift)
            out["time_tag"] = 0
            out[ADAPTED_KEY] = out.get(ADAPTED_KEY, "tensor")  # the sequence's time_tag too
        out[SOURCE_KEY] = source
        return out


# ------------------------------------------------------------------------ output headers
def matrix_header(xhdr: dict[str, Any], nframe: int, dtype: str) -> dict[str, Any]:
    """Bifrost correlate's output header from our X-engine's (which carries the input's)."""
    source = xhdr[SOURCE_KEY]
    ohdr = {k: v for k, v in xhdr.items() if k not in (SOURCE_KEY, "baseline_order", "_tensor")}
    itensor = source["_tensor"]
    otensor = copy.deepcopy(itensor)
    otensor["dtype"] = dtype
    for key in ("shape", "labels", "scales", "units"):
        values = itensor.get(key) or [None] * len(itensor["shape"])
        time_val, freq_val, stand_val, pol_val = values
        otensor[key] = [time_val, freq_val, stand_val, pol_val, stand_val, pol_val]
    for i in range(2):
        otensor["labels"][2 + i] += "_i"
        otensor["labels"][4 + i] += "_j"
    otensor["scales"][0][1] *= nframe
    ohdr["_tensor"] = otensor
    ohdr["matrix_fill_mode"] = BIFROST_FILL_MODE
    for key in ("name", "time_tag", "sync_time"):  # the input's, as Bifrost's copy of it
        if source[key] is not None:  # (sync_time: time_tag counts spectra from it again)
            ohdr[key] = source[key]
    ohdr["nspectra"] = xhdr["nspectra"]
    return ohdr


def tcc_header(xhdr: dict[str, Any], nstation: int, npol: int, dtype: str) -> dict[str, Any]:
    """The TCC order's header: ours, plus the keys the LWA correlators' downstream blocks read
    (ng_digital_processor ``scripts/ndp_drx.py`` ``CorrelatorOp`` / ``PacketizeOp``): ``nchan``,
    ``nstand``, ``npol``, ``nbit`` 32, ``complex``, ``navg`` (10 ms sub-slots integrated, where
    whole) and, for an ADP/NDP capture, ``start_tag``, the first integration's start in its
    ticks (what NDP's packetizer reads; ``time_tag`` stays our spectrum count, so the sequence
    means the same to our blocks); ``seq0`` / ``acc_len`` (spectra) as lwa352's correlator
    writes them."""
    ohdr = {k: v for k, v in xhdr.items() if k not in (SOURCE_KEY, "baseline_order", "_tensor")}
    nspec, nchan = int(xhdr["nspectra"]), int(xhdr["nchan"])
    nbl = nstation * (nstation + 1) // 2
    start = int(xhdr["time_tag"])  # spectrum index of the first integration
    ohdr.update(nchan=nchan, nstand=nstation, npol=npol, nbl=nbl, nbit=32, complex=True,
                seq0=start, acc_len=nspec, visibility_order=TCC_ORDER)
    per_subslot = int(float(xhdr["chan_bw_hz"]) / 100)  # NDP: navg * int(CHAN_BW / 100)
    if per_subslot and nspec % per_subslot == 0:
        ohdr["navg"] = nspec // per_subslot
    if "ticks_per_spectrum" in xhdr:  # ADP/NDP ticks: utc_start's tick + spectra * ticks
        t0 = int(xhdr["capture_time_tag"]) - int(xhdr["seq0"]) * int(xhdr["ticks_per_spectrum"])
        ohdr["start_tag"] = t0 + start * int(xhdr["ticks_per_spectrum"])
    ohdr.setdefault("gain", 0)
    ohdr["_tensor"] = {"dtype": dtype, "shape": [-1, nchan, nbl * npol * npol],
                       "labels": ["time", "freq", "baseline_pol"],
                       "scales": [xhdr["_tensor"]["scales"][0], None, None],
                       "units": ["s", None, None]}
    return ohdr


# ------------------------------------------------------------------------- the block
class CorrelateOutputLogic(BlockLogic):
    """Our X-engine's packed triangle (one frame per integration) in Bifrost correlate's
    matrix or the TCC order; the second block of :func:`correlate`."""

    def __init__(self, vis: Any, nframe_per_integration: int, *, dtype: str, order: str,
                 **kwargs: Any) -> None:
        # One integration per gulp: Bifrost's pipeline then writes gulp_nframe 1 into the
        # output header, as for its own correlate.
        super().__init__([vis], gulp_nframe=1, **kwargs)
        self.nframe, self.dtype, self.order = nframe_per_integration, dtype, order

    def define_output_nframes(self, input_nframes: list[int]) -> list[int]:
        return list(input_nframes)

    def on_sequence(self, iseqs: list) -> list[dict[str, Any]]:
        xhdr = iseqs[0].header
        nstream = int(xhdr["geometry"]["nstream"])
        shape = xhdr[SOURCE_KEY]["_tensor"]["shape"]
        self.nstation = int(shape[2])
        self.npol = int(shape[3]) if len(shape) == 4 else nstream // self.nstation
        if self.order == "tcc":
            return [tcc_header(xhdr, self.nstation, self.npol, self.dtype)]
        return [matrix_header(xhdr, self.nframe, self.dtype)]

    def on_data(self, ispans: list, ospans: list) -> list[int]:
        tri = self.array(ispans[0])  # [n, C, nbaseline, 2] int32
        out = self.array(ospans[0])
        n = ispans[0].nframe
        if self.order == "tcc":
            vis = triangle_to_tcc(tri[:n], self.nstation, self.npol)
            if self.dtype == "cf32":
                out[:n] = vis[..., 0] + 1j * vis[..., 1]
            else:
                out[:n] = vis
            return [n]
        s = self.nstation * self.npol
        mat = out[:n].reshape((n, tri.shape[1], s, s) + (() if self.dtype == "cf32" else (2,)))
        triangle_to_bifrost_matrix(tri[:n], mat)
        return [n]

    def on_skip(self, lost: list[slice], ospans: list) -> list[int]:
        return [0]  # an integration lost upstream is not output (Bifrost's correlate has none)


class CorrelateOutputBlock(BifrostBlock, CorrelateOutputLogic, bfp.MultiTransformBlock):
    __doc__ = CorrelateOutputLogic.__doc__


def correlate(iring: Any, nframe_per_integration: int, *args: Any, dtype: str = "cf32",
              backend: str = "auto", order: str = "matrix", gulp_nframe: int | None = None,
              array: ArrayDescription | None = None, **kwargs: Any) -> CorrelateOutputBlock:
    """Cross-multiply stations and accumulate in time: Bifrost's ``correlate`` on CPU / NPU.

    Parameters
    ----------
    iring : the input block or ring: a Bifrost voltage tensor ``['time', 'freq', 'station',
        'pol']`` (ci4, ci8, ci16), or an LWA capture ring (flat header: docs/bifrost.md).
    nframe_per_integration : input frames (spectra) per output frame.
    dtype : ``'cf32'`` (Bifrost's) or ``'ci32'`` (the exact integers).
    backend : our backend (``'auto'``, ``'native'``, ``'cpu'``, ``'npu'``...).
    order : ``'matrix'`` (Bifrost's lower-filled matrix) or ``'tcc'`` (the TCC wrapper's
        packed upper triangle with LWA header keys, integrations aligned to absolute spectrum
        counts).
    gulp_nframe : input frames per gulp (Bifrost's rule: it must divide
        ``nframe_per_integration``).
    array : the array description where the header has none (logged if assumed).
    *args, **kwargs : for the blocks (Bifrost's ``TransformBlock`` arguments, e.g. ``core``).

    Returns the output block (its ``orings[0]`` is the visibilities; ``xengine`` is the
    X-engine block before it).
    """
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    if isinstance(nframe_per_integration, bool) or not isinstance(
            nframe_per_integration, (int, np.integer)) or nframe_per_integration < 1:
        raise ValueError(f"nframe_per_integration must be a positive integer, got "
                         f"{nframe_per_integration!r}")
    n = int(nframe_per_integration)
    if len(args) > len(BLOCK_ARGS):
        raise TypeError(f"correlate() takes at most {2 + len(BLOCK_ARGS)} positional arguments")
    kwargs.update(zip(BLOCK_ARGS, args, strict=False))  # TransformBlock's, by name
    name = kwargs.pop("name", None)
    kwargs.pop("type_", None)
    headers = CorrelateHeaders(None, n, dtype=dtype, order=order, gulp_nframe=gulp_nframe,
                               array=array)
    x = XEngineBlock(iring, backend=backend, integration_spectra=n, gulp_nframe=gulp_nframe,
                     name=None if name is None else f"{name}_xengine", headers=headers,
                     **kwargs)
    out = CorrelateOutputBlock(x.orings[0], n, dtype=dtype, order=order, name=name,
                               core=kwargs.get("core"))
    out.xengine = x
    return out
