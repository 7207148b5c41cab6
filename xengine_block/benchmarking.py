"""Throughput measurement of correlator backends against peers, in one run (DESIGN.md section 9).

Rates are Msps = samples per second of the whole block of C channels (B = C * f_s); TOPS in both
conventions: full matrix 8 S^2 B and triangle 4 S^2 B. Exactness of every result is checked
against complex128 BLAS, which is exact here because every partial sum is an integer far below
2^53 (|sum| <= 136 * 480 * 2^15 < 2^31).

int8 limit: ``machine_amx_int8_tops`` is a register-resident AMX tile loop on every core, measured
in the same run; ``fraction_of_int8_peak`` divides the backend's useful int8 op rate by it, with
useful ops = 8 * S(S+1)/2 * B (the Hermitian triangle, autocorrelations included: 4 real MACs
of 2 ops per complex baseline-sample), i.e. the ops an exact triangle correlator cannot avoid.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import numpy as np

from .backends import get_backend
from .geometry import Geometry
from .layout import frames_to_natural, to_complex
from .triangle import pack_triangle


def tops(msps: float, nstream: int) -> tuple[float, float]:
    """(full-matrix, triangle) TOPS for a rate in Msps."""
    full = 8 * nstream**2 * msps * 1e6 / 1e12
    return full, full / 2


def _best_time(fn: Callable[[], object], repeat: int) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
    return best, result


def _complex_samples(frames: np.ndarray, g: Geometry, dtype) -> np.ndarray:
    """[C, S, nspec] complex array of the frames' samples (int8 is exact in any of them)."""
    return np.moveaxis(to_complex(frames_to_natural(frames, g)), 1, 0).astype(dtype)


def _triangle_of(full: np.ndarray) -> np.ndarray:
    """Packed int64 triangle of full complex matrices (rounded: peers may not be exact)."""
    return pack_triangle(np.rint(full.real), np.rint(full.imag), out_dtype=np.int64)


def exact_oracle(frames: np.ndarray, g: Geometry) -> np.ndarray:
    """Packed triangle via complex128 BLAS (exact: see module docstring), channel by channel
    to bound memory."""
    z = _complex_samples(frames, g, np.complex128)
    return np.stack([_triangle_of(z[c] @ z[c].conj().T) for c in range(g.nchan)])


def peer_einsum(frames: np.ndarray, g: Geometry) -> np.ndarray:
    """What a user would write first: complex64 einsum over all stream pairs."""
    z = _complex_samples(frames, g, np.complex64)
    return _triangle_of(np.einsum("csn,ctn->cst", z, z.conj()))


def peer_matmul(frames: np.ndarray, g: Geometry) -> np.ndarray:
    """Per-channel complex64 ``A @ A.conj().T`` (full matrix, float32 accumulation)."""
    z = _complex_samples(frames, g, np.complex64)
    return _triangle_of(np.stack([z[c] @ z[c].conj().T for c in range(g.nchan)]))


def triangle_int8_tops(msps: float, nstream: int) -> float:
    """Useful int8 TOPS of the Hermitian triangle: 8 * S(S+1)/2 * B (see module docstring)."""
    return 8 * nstream * (nstream + 1) / 2 * msps * 1e6 / 1e12


#: int8 ops of one AMX tdpbssd: 16 x 16 x 64 MACs, 2 ops each.
AMX_TDP_OPS = 16 * 16 * 64 * 2


def machine_amx_int8_tops(nthreads: int | None = None,
                          seconds: float = 0.2) -> tuple[float | None, str]:
    """(TOPS, how) of AMX-INT8 on ``nthreads`` cores at once (default all), or (None, why not).

    A register-resident loop of tdpbssd on tiles loaded once (no memory traffic), from the
    native extension: the ceiling no int8 correlator on this machine can pass.
    """
    from .backends.native import _extension, isa_status

    ok, why = isa_status()["amx"]
    if not ok:
        return None, f"AMX unavailable: {why}"
    ext = _extension()
    n = nthreads or os.cpu_count() or 1
    rate = ext.amx_peak(1, 100_000)  # calibrate the loop length to ~`seconds`
    iters = max(1, int(seconds * rate / (4 * AMX_TDP_OPS)))
    best = max(ext.amx_peak(n, iters) for _ in range(3))
    return best / 1e12, f"{n} threads x register-resident tdpbssd loop, best of 3"


def native_details(frames: np.ndarray, g: Geometry, repeat: int = 2, slow_packets: int = 8,
                   peak_tops: float | None = None) -> dict:
    """Native backend: what limits it (layout vs products) and the rate of each ISA path.

    ``layout_seconds``: frames -> tiles for the whole gulp alone; ``compute_seconds``: the tile
    products alone; each runnable path's rate on the same frames (the slow portable paths on
    ``slow_packets`` packets), each checked exact.
    """
    from .backends.native import ISAS, NativeBackend, isa_status

    nsamp = frames.shape[0] * g.nspectra_pkt * g.nchan
    best = NativeBackend(g)
    try:
        t_full, _ = _best_time(lambda: best.correlate(frames), repeat)
        stages = [best.time_stages(frames) for _ in range(repeat)]
    finally:
        best.close()
    layout = min(s["layout"] for s in stages)
    compute = min(s["compute"] for s in stages)
    details = {
        "isa": best.isa, "isa_reason": best.isa_reason, "nthreads": best.nthreads,
        "seconds": t_full, "layout_seconds": layout, "compute_seconds": compute,
        "layout_fraction": layout / t_full, "layout_gbytes_per_s": frames.nbytes / layout / 1e9,
        "compute_only_msps": nsamp / compute / 1e6, "per_isa": {},
    }
    for isa, (ok, why) in isa_status().items():
        if not ok:
            details["per_isa"][isa] = {"runnable": False, "reason": why}
            continue
        sub = frames if isa in ISAS[:2] else frames[:slow_packets]
        b = NativeBackend(g, isa=isa)
        try:
            t, out = _best_time(lambda b=b, sub=sub: b.correlate(sub), repeat)
        finally:
            b.close()
        msps = sub.shape[0] * g.nspectra_pkt * g.nchan / t / 1e6
        useful = triangle_int8_tops(msps, g.nstream)
        details["per_isa"][isa] = {
            "msps": msps, "int8_tops_triangle_useful": useful,
            "fraction_of_int8_peak": useful / peak_tops if peak_tops else None,
            "exact": bool(np.array_equal(out, exact_oracle(sub, g))), "packets": sub.shape[0]}
    return details


def machine_sgemm_gflops(n: int = 2048, repeat: int = 3) -> float:
    a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
    t, _ = _best_time(lambda: a @ a, repeat)
    return 2 * n**3 / t / 1e9


def run(backend: str = "auto", nstream: int = 256, nchan: int = 9, npacket: int = 136,
        repeat: int = 2, einsum_packets: int = 1, seed: int = 0) -> dict:
    """Measure ``backend`` and its peers on the same random frames; return the JSON dict."""
    g = Geometry(nstream=nstream, nchan=nchan, npacket=npacket)
    frames = np.random.default_rng(seed).integers(
        -128, 128, size=(npacket, *g.frame_shape), dtype=np.int8)
    nsamp = npacket * g.nspectra_pkt * nchan
    oracle = exact_oracle(frames, g)

    b = get_backend(backend, g)
    try:
        b.correlate(frames[:1])  # warm-up (threads, scratch, dispatch)
        t, out = _best_time(lambda: b.correlate(frames), repeat)
    finally:
        b.close()
    msps = nsamp / t / 1e6
    full, tri = tops(msps, nstream)
    result = {
        "backend": b.name, "backend_reason": getattr(b, "choice_reason", ""),
        "S": nstream, "nchan": nchan, "P": npacket, "msps": msps,
        "tops_full": full, "tops_triangle": tri, "exact": bool(np.array_equal(out, oracle)),
        "peers": {},
    }
    # einsum without BLAS is slow: measure it on fewer packets (a rate per sample is fair).
    sub = frames[:einsum_packets]
    t, out = _best_time(lambda: peer_einsum(sub, g), 1)
    result["peers"]["numpy.einsum"] = {
        "msps": einsum_packets * g.nspectra_pkt * nchan / t / 1e6,
        "exact": bool(np.array_equal(out, exact_oracle(sub, g))), "packets": einsum_packets}
    t, out = _best_time(lambda: peer_matmul(frames, g), repeat)
    result["peers"]["complex64 A@A^H"] = {"msps": nsamp / t / 1e6,
                                          "exact": bool(np.array_equal(out, oracle)),
                                          "packets": npacket}
    result["machine_sgemm_gflops"] = machine_sgemm_gflops()
    result["speedup_vs_peers"] = {k: msps / v["msps"] for k, v in result["peers"].items()}
    amx, how = machine_amx_int8_tops()
    useful = triangle_int8_tops(msps, nstream)
    result["int8_tops_triangle_useful"] = useful
    result["machine_amx_int8_tops"] = amx
    result["machine_amx_int8_how"] = how
    result["fraction_of_int8_peak"] = useful / amx if amx else None
    if b.name == "native":
        result["native"] = native_details(frames, g, repeat, peak_tops=amx)
    return result


def run_ci4(backend: str, ci8: dict, repeat: int = 2, seed: int = 0) -> dict:
    """``backend`` on ci4 frames of the geometry of ``ci8`` (a :func:`run` result), measured in
    the same run: rate, exactness, the ratio to ci8 and the fraction of the same int8 peak
    (the ci8 fraction times that ratio: the useful ops per sample are the same)."""
    g = Geometry(nstream=ci8["S"], nchan=ci8["nchan"], npacket=ci8["P"], sample_bits=4)
    rng = np.random.default_rng(seed)
    frames = rng.integers(-128, 128, size=(g.npacket, *g.frame_shape), dtype=np.int8)
    b = get_backend(backend, g)
    try:
        b.correlate(frames[:1])  # warm-up
        t, out = _best_time(lambda: b.correlate(frames), repeat)
    finally:
        b.close()
    msps = g.npacket * g.nspectra_pkt * g.nchan / t / 1e6
    ratio = msps / ci8["msps"]
    fraction = ci8.get("fraction_of_int8_peak")  # same S: useful ops scale with the rate
    return {"backend": b.name, "backend_reason": getattr(b, "choice_reason", ""),
            "payload_bytes": g.payload_bytes, "msps": msps, "seconds": t,
            "exact": bool(np.array_equal(out, exact_oracle(frames, g))),
            "int8_tops_triangle_useful": triangle_int8_tops(msps, g.nstream),
            "fraction_of_int8_peak": fraction * ratio if fraction is not None else None,
            "ratio_to_ci8": ratio}
