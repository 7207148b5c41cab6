"""The strongest int8 GEMMs a user can install, as exact correlators: peers of the native
backend in the benchmark's run (bench/correlator.py).

A GEMM library has no complex type and no Hermitian triangle, so each peer forms the real Gram
matrix ``G = Y Y^T`` of the stacked rows ``Y = [re; im]`` (2S x N int8 per channel) and maps it
to the packed triangle: ``K = (rr + ii) + i (ir - ri)`` (:func:`gram_to_triangle`). Each peer
takes frames and returns the triangle (the conversions are part of its time) and also times its
GEMM alone. Each result is checked against the exact int64 oracle; a peer that is not exact is
reported so and never counts as the best exact peer (:func:`best_exact_peer`).

Known inexactness (checked in the run, not assumed): onnxruntime's u8 x s8 MatMulInteger on
x86 without VNNI (SSE4.1/AVX2/AVX-512 without VNNI) multiplies with ``vpmaddubsw``, whose int16
sum of two u8 x s8 products saturates (onnxruntime's
include/onnxruntime/core/session/onnxruntime_session_options_config_keys.h,
``kOrtSessionOptionsAvx2PrecisionMode``; that option converts constant weights only, not a
second graph input like ours). With A = Y + 128 in [0, 255] and B = Y the pair sum cannot
saturate while |Y| <= 79 (2 * 207 * 79 = 32706); :func:`peer_onnxruntime` re-checks there when
the full-range result is wrong, so the JSON says whether saturation is the cause. The u8 x u8
variant (B biased too, zero point 128) takes MLAS's non-saturating kernel.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..frames import frames_to_natural
from ..geometry import Geometry
from ..triangle import pack_triangle
from .machine import best_time

#: |y| up to which onnxruntime's u8 x s8 int16 pair sums cannot saturate: 2 (128 + r) r <= 32767.
NO_SATURATION_RANGE = 79

Oracle = Callable[[np.ndarray], np.ndarray]


def gram_rows(frames: np.ndarray, g: Geometry) -> np.ndarray:
    """Y = [re; im] of each channel: int8 [C, 2S, N], rows 0..S-1 real parts, S..2S-1 imaginary."""
    x = frames_to_natural(frames, g)                          # [S, C, N, 2]
    y = np.ascontiguousarray(np.moveaxis(x, (0, 3), (2, 1)))  # [C, 2, S, N]
    return y.reshape(g.nchan, 2 * g.nstream, -1)


def gram_to_triangle(gram: np.ndarray, s: int) -> np.ndarray:
    """[C, 2S, 2S] Gram of [re; im] -> packed triangle: K = (rr + ii) + i (ir - ri)."""
    rr, ri, ir, ii = gram[:, :s, :s], gram[:, :s, s:], gram[:, s:, :s], gram[:, s:, s:]
    return pack_triangle(rr.astype(np.int64) + ii, ir.astype(np.int64) - ri,
                         out_dtype=np.int64)


def _gemm_shape(g: Geometry, nspec: int, types: str) -> str:
    return f"{g.nchan} x [{2 * g.nstream} x {nspec}] x [{nspec} x {2 * g.nstream}] {types}"


def _onnx_session(g: Geometry, nspec: int, nthreads: int, b_unsigned: bool):
    """onnxruntime session of one batched MatMulInteger: A [C, 2S, N] uint8 (zero point 128)
    x B [C, N, 2S] int8, or uint8 with zero point 128 -> [C, 2S, 2S] int32: the Gram of Y."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    s2 = 2 * g.nstream
    b_type = TensorProto.UINT8 if b_unsigned else TensorProto.INT8
    zeros = [helper.make_tensor("a_zero", TensorProto.UINT8, [], [128])]
    if b_unsigned:
        zeros.append(helper.make_tensor("b_zero", TensorProto.UINT8, [], [128]))
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["A", "B"] + [z.name for z in zeros], ["G"])], "gram",
        [helper.make_tensor_value_info("A", TensorProto.UINT8, [g.nchan, s2, nspec]),
         helper.make_tensor_value_info("B", b_type, [g.nchan, nspec, s2])],
        [helper.make_tensor_value_info("G", TensorProto.INT32, [g.nchan, s2, s2])],
        initializer=zeros)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = nthreads
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])


def onnx_inputs(frames: np.ndarray, g: Geometry, b_unsigned: bool = False
                ) -> tuple[np.ndarray, np.ndarray]:
    """(A, B) of the MatMulInteger correlator: A = Y + 128 as uint8 (undone by the zero point),
    B = Y^T (int8), or Y^T + 128 as uint8 for the u8 x u8 variant."""
    y = gram_rows(frames, g)
    a = y.view(np.uint8) ^ np.uint8(0x80)
    return a, np.ascontiguousarray((a if b_unsigned else y).transpose(0, 2, 1))


def _onnx_correlate(sess, frames: np.ndarray, g: Geometry, b_unsigned: bool) -> np.ndarray:
    a, b = onnx_inputs(frames, g, b_unsigned)
    return gram_to_triangle(sess.run(None, {"A": a, "B": b})[0], g.nstream)


def peer_onnxruntime(frames: np.ndarray, g: Geometry, nthreads: int, repeat: int,
                     oracle: Oracle, b_unsigned: bool = False) -> dict:
    """onnxruntime ``MatMulInteger`` (MLAS kernels) as a correlator: u8 x s8 -> s32 (its fast
    path), or u8 x u8 with ``b_unsigned``; frames in, packed triangle out; and its GEMM alone.
    Where the result is not exact, ``exact_without_saturation`` says whether it is exact on
    the same frames clipped to |y| <= 79 (where int16 pair sums cannot saturate)."""
    try:
        import onnxruntime
    except ImportError as exc:
        return {"skipped": f"onnxruntime not installed (pip install -e .[bench]): {exc}"}
    nspec = frames.shape[0] * g.nspectra_pkt
    sess = _onnx_session(g, nspec, nthreads, b_unsigned)
    _onnx_correlate(sess, frames, g, b_unsigned)  # warm-up
    t, out = best_time(lambda: _onnx_correlate(sess, frames, g, b_unsigned), repeat)
    a, b = onnx_inputs(frames, g, b_unsigned)
    t_gemm, _ = best_time(lambda: sess.run(None, {"A": a, "B": b}), repeat)
    gemm_ops = 2 * g.nchan * (2 * g.nstream) ** 2 * nspec
    entry = {"msps": nspec * g.nchan / t / 1e6, "exact": bool(np.array_equal(out, oracle(frames))),
             "packets": frames.shape[0], "nthreads": nthreads,
             "version": onnxruntime.__version__,
             "gemm_alone": {"shape": _gemm_shape(g, nspec, "u8 x u8 -> s32" if b_unsigned
                                                 else "u8 x s8 -> s32"),
                            "seconds": t_gemm, "int8_tops": gemm_ops / t_gemm / 1e12}}
    if not entry["exact"]:
        r = NO_SATURATION_RANGE
        clipped = np.clip(frames, -r, r)
        entry["exact_without_saturation"] = bool(np.array_equal(
            _onnx_correlate(sess, clipped, g, b_unsigned), oracle(clipped)))
        entry["not_exact_because"] = (
            f"wrong at full-range input but exact on the same frames clipped to |y| <= {r}: "
            "MLAS's u8 x s8 kernel saturates int16 pair sums (vpmaddubsw) on CPUs without "
            "VNNI" if entry["exact_without_saturation"] else
            f"wrong even where int16 pair sums cannot saturate (|y| <= {r})")
    return entry


def peer_torch_int_mm(frames: np.ndarray, g: Geometry, nthreads: int, repeat: int,
                      oracle: Oracle, seconds: float = 1.0) -> dict:
    """``torch._int_mm`` (int8 x int8 -> int32, oneDNN/MKL on CPU) as a correlator: per channel
    the Gram of the stacked ``[re; im]`` matrix against its transpose (a view: the column-major
    B that is its fast layout), frames in, packed triangle out; and the GEMMs alone. Runs on
    as many of ``frames``' packets as fit in about ``seconds`` (at least one): on CPUs where
    its kernel is a slow one the run stays short, and a rate per sample is still fair."""
    try:
        import torch
    except ImportError as exc:
        return {"skipped": f"torch not installed (pip install -e .[bench]): {exc}"}
    if not hasattr(torch, "_int_mm"):
        return {"skipped": f"torch {torch.__version__} has no torch._int_mm"}

    def grams(y) -> np.ndarray:
        return np.stack([torch._int_mm(y[c], y[c].T).numpy() for c in range(y.shape[0])])

    def correlate(f: np.ndarray) -> np.ndarray:
        return gram_to_triangle(grams(torch.from_numpy(gram_rows(f, g))), g.nstream)

    old = torch.get_num_threads()
    torch.set_num_threads(nthreads)
    try:
        try:
            t1, _ = best_time(lambda: correlate(frames[:1]), 1)  # warm-up and size the run
        except RuntimeError as exc:  # builds whose _int_mm has no CPU kernel for this shape
            return {"skipped": f"torch {torch.__version__} _int_mm failed here: {exc}"}
        npacket = int(max(1, min(frames.shape[0], seconds // max(t1, 1e-9))))
        sub = frames[:npacket]
        t, out = best_time(lambda: correlate(sub), repeat)
        y = torch.from_numpy(gram_rows(sub, g))
        t_gemm, _ = best_time(lambda: grams(y), repeat)
    finally:
        torch.set_num_threads(old)
    nspec = npacket * g.nspectra_pkt
    gemm_ops = 2 * g.nchan * (2 * g.nstream) ** 2 * nspec
    return {"msps": nspec * g.nchan / t / 1e6, "exact": bool(np.array_equal(out, oracle(sub))),
            "packets": npacket, "nthreads": nthreads, "version": torch.__version__,
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "gemm_alone": {"shape": _gemm_shape(g, nspec, "s8 x s8 -> s32"),
                           "seconds": t_gemm, "int8_tops": gemm_ops / t_gemm / 1e12}}


def library_peers(frames: np.ndarray, g: Geometry, nthreads: int, repeat: int,
                  oracle: Oracle, with_onnx: bool = True, with_torch: bool = True) -> dict:
    """Every library peer by name (a ``skipped`` entry, with the reason, where one is absent)."""
    peers = {}
    if with_onnx:
        peers["onnxruntime MatMulInteger correlator"] = peer_onnxruntime(
            frames, g, nthreads, repeat, oracle)
        peers["onnxruntime MatMulInteger u8u8 correlator"] = peer_onnxruntime(
            frames, g, nthreads, repeat, oracle, b_unsigned=True)
    if with_torch:
        peers["torch._int_mm correlator"] = peer_torch_int_mm(frames, g, nthreads, repeat,
                                                              oracle)
    return peers


def best_exact_peer(peers: dict) -> tuple[str, dict] | None:
    """(name, entry) of the fastest peer whose result was exact; None if none was."""
    exact = [(v["msps"], k) for k, v in peers.items() if v.get("exact") and "msps" in v]
    if not exact:
        return None
    name = max(exact)[1]
    return name, peers[name]
