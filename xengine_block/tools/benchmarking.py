"""Throughput measurement of correlator backends against peers, in one run (DESIGN.md section 9).

Rates are Msps = samples per second of the whole block of C channels (B = C * f_s); TOPS in both
conventions: full matrix 8 S^2 B and triangle 4 S^2 B. Exactness of every result is checked
against complex128 BLAS, which is exact here because every partial sum is an integer far below
2^53 (|sum| <= 136 * 480 * 2^15 < 2^31).

int8 limit: ``machine_int8_tops`` is a register-resident loop of the instruction the native path
multiplies with (AMX ``tdpbssd``, AVX-512 VNNI ``vpdpbusd``, AVX2 ``vpmaddwd``; ``machine_int8_isa``
names it) on the backend's threads, measured in the same run; ``fraction_of_int8_peak`` divides
the backend's useful int8 op rate by it, with
useful ops = 8 * S(S+1)/2 * B (the Hermitian triangle, autocorrelations included: 4 real MACs
of 2 ops per complex baseline-sample), i.e. the ops an exact triangle correlator cannot avoid.

Memory limit: ``machine_read_gbps`` is the streaming read bandwidth of a buffer much larger than
the last-level cache (``xengine_block._readbw``: the widest loads the CPU has; numpy where the
extension is absent), on one core and on the backend's threads, measured in the same run. A
correlator reads each input byte once at least, so at ``ops_per_input_byte`` useful ops per
byte (:func:`ops_per_input_byte`: 2(S+1) for ci8, 514 at S = 256) its roofline is
``min(machine_int8_tops, machine_read_gbps * ops_per_input_byte)``; ``fraction_of_roofline``
divides the useful op rate by it.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ..backends import get_backend
from ..geometry import Geometry
from ..layout import frames_to_natural, to_complex
from ..triangle import pack_triangle


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


#: (isa, threads) -> (best ops/s of the wall clock, instruction, best ops per CPU second) over
#: the whole run.
_PEAKS: dict[tuple[str, int], tuple[float, str, float]] = {}


def machine_int8_tops(isa: str | None = None, nthreads: int | None = None, seconds: float = 0.1,
                      repeat: int = 3) -> tuple[float | None, str | None, str]:
    """(TOPS, isa, how): the int8 peak of native path ``isa`` (default: the one ``auto`` picks)
    on ``nthreads`` cores (default all), or (None, None, why not).

    A register-resident loop of the instruction that path multiplies with (AMX ``tdpbssd``,
    AVX-512 VNNI ``vpdpbusd``, AVX2 ``vpmaddwd``) from the native extension, on ``nthreads``
    threads at once: the ceiling no int8 correlator on that path can pass. The peak is its ops
    per CPU second (best of this and every earlier call in the process) times ``nthreads``:
    what the cores do when nobody else runs on them. On a quiet machine that equals the
    wall-clock rate; on a shared one the wall-clock peak is squeezed like everything else and
    would flatter any fraction (the wall figure is kept in :func:`wall_peak_tops`).
    """
    from ..backends import BackendUnavailable
    from ..backends.native import _extension, select_isa

    try:
        isa = isa or select_isa("auto")[0]
        ext = _extension()
    except (BackendUnavailable, ImportError) as exc:
        return None, None, f"no native SIMD path: {exc}"
    n = nthreads or os.cpu_count() or 1
    calib = 20_000  # iterations timed once to size the loop to ~`seconds`
    t0 = time.perf_counter()
    ext.int8_peak(isa, 1, calib)
    iters = max(1, int(seconds * calib / max(time.perf_counter() - t0, 1e-6)))
    runs = [ext.int8_peak(isa, n, iters) for _ in range(repeat)]
    old = _PEAKS.get((isa, n), (0.0, "", 0.0))
    best = (max(old[0], *(r[0] for r in runs)), runs[0][1], max(old[2], *(r[2] for r in runs)))
    _PEAKS[(isa, n)] = best
    return (best[2] * n / 1e12, isa,
            f"{n} x the ops per CPU second of a register-resident {best[1]} loop on {n} "
            f"threads at once (best of the run)")


def wall_peak_tops(isa: str, nthreads: int) -> float | None:
    """Best wall-clock TOPS of path ``isa``'s peak loop on ``nthreads`` threads so far."""
    best = _PEAKS.get((isa, nthreads))
    return best[0] / 1e12 if best else None


def llc_bytes() -> int | None:
    """Size of the largest CPU cache (Linux sysfs; None where it cannot be read)."""
    sizes = []
    for size in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = size.read_text().strip().upper()
        units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
        try:
            sizes.append(int(text.rstrip("KMG")) * units.get(text[-1:], 1))
        except ValueError:
            continue
    return max(sizes) if sizes else None


def _read_buffer_bytes() -> int:
    """8 x the last-level cache (so every pass streams from DRAM), 256 MiB to 2 GiB."""
    return min(2 << 30, max(256 << 20, 8 * (llc_bytes() or 0)))


def _numpy_read_bandwidth(nthreads: int, nbytes: int, passes: int) -> tuple[float, float, str]:
    """(bytes/s wall, bytes per CPU second, how) of ``np.add.reduce`` over float64 buffers, one
    per thread (numpy releases the GIL in reductions): the fallback of ``_readbw``."""
    n = max(1, nbytes // 8 // nthreads)
    start = threading.Barrier(nthreads)
    times = [(0.0, 0.0)] * nthreads

    def work(i: int) -> None:
        a = np.ones(n)  # touched by this thread; ones: no denormals, no zero pages
        np.add.reduce(a)
        start.wait()
        w0, c0 = time.perf_counter(), time.thread_time()
        for _ in range(passes):
            np.add.reduce(a)
        times[i] = (time.perf_counter() - w0, time.thread_time() - c0)

    workers = [threading.Thread(target=work, args=(i,)) for i in range(nthreads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    total = 8.0 * n * nthreads * passes
    cpu = sum(c for _, c in times) / nthreads
    return (total / max(w for w, _ in times), total / max(cpu, 1e-9),
            "numpy add.reduce over float64 (the _readbw extension is not built)")


#: nthreads -> (best bytes/s of the wall clock, best bytes per CPU second, how, buffer bytes)
_READS: dict[int, tuple[float, float, str, int]] = {}


def machine_read_gbps(nthreads: int | None = None, seconds: float = 0.3,
                      repeat: int = 3) -> tuple[float, str]:
    """(GB/s, how): the streaming read bandwidth of ``nthreads`` cores (default all) at once.

    Each thread streams its own slice of a buffer 8 x the last-level cache (256 MiB to 2 GiB)
    with the widest loads the CPU has (``xengine_block._readbw``: AVX-512, AVX2 or SSE2; numpy's
    ``add.reduce`` where the extension is absent). The figure is the best of this and every
    earlier call in the process of both the wall-clock rate and the rate per CPU second of the
    threads (insensitive to others' processes taking the cores): a ceiling, never squeezed by
    the load of a shared machine, so nothing divided by it is flattered. Used by every
    benchmark that compares a rate of bytes to the machine (correlator, capture, pipeline,
    reprocessing).
    """
    n = nthreads or os.cpu_count() or 1
    nbytes = _read_buffer_bytes()
    try:
        from .. import _readbw

        def measure(passes: int) -> tuple[float, float, str]:
            return _readbw.read_bandwidth(n, nbytes, passes)[:3]
    except ImportError:
        def measure(passes: int) -> tuple[float, float, str]:
            return _numpy_read_bandwidth(n, nbytes, passes)
    wall, cpu, how = measure(1)  # also sizes the timed runs to ~`seconds`
    passes = max(1, round(seconds * wall / nbytes))
    for _ in range(repeat):
        w, c, how = measure(passes)
        wall, cpu = max(wall, w), max(cpu, c)
    old = _READS.get(n, (0.0, 0.0, how, nbytes))
    best = (max(old[0], wall), max(old[1], cpu), how, nbytes)
    _READS[n] = best
    llc = llc_bytes()
    return (max(best[0], best[1]) / 1e9,
            f"{how}: {n} thread(s) at once, each streaming its slice of a {nbytes >> 20} MiB "
            f"buffer ({f'{nbytes / llc:.0f} x the {llc >> 20} MiB' if llc else 'size of the'} "
            f"last-level cache); best of the run, wall clock {best[0] / 1e9:.1f} GB/s, per CPU "
            f"second {best[1] / 1e9:.1f} GB/s")


def read_bandwidth(nthreads: int | None = None) -> dict:
    """The JSON block of the read bandwidth: one core and ``nthreads`` (default all) cores."""
    n = nthreads or os.cpu_count() or 1
    out = {}
    for key, k in (("one_core", 1), ("all_cores", n)):
        gbps, how = machine_read_gbps(k)
        wall, cpu = _READS[k][:2]
        out[key] = {"nthreads": k, "gbps": gbps, "gbps_wall": wall / 1e9,
                    "gbps_cpu_time": cpu / 1e9, "how": how}
    return out


def ops_per_input_byte(nstream: int, sample_bits: int = 8) -> float:
    """Useful int8 ops per input byte: 8 * S(S+1)/2 ops per sample time (the module's useful
    triangle convention) over the S * 2 * bits/8 bytes of one sample time of every stream:
    2(S+1) for ci8 (514 at S = 256), 4(S+1) for ci4. Input bytes only: the triangle written
    once per channel and call is under 1 % of them at the seed's P."""
    return 8 * nstream * (nstream + 1) / 2 / (nstream * 2 * sample_bits / 8)


def set_roofline(entry: dict, nthreads: int, opb: float) -> None:
    """Add the roofline of ``entry`` (which has ``int8_tops_triangle_useful`` and
    ``machine_int8_tops``): the lower of the int8 peak and the read bandwidth of ``nthreads``
    cores (the run's best; measured now if not yet) times ``opb`` useful ops per input byte,
    and the useful rate's fraction of it."""
    best = _READS.get(nthreads)
    gbps = max(best[:2]) / 1e9 if best else machine_read_gbps(nthreads)[0]
    memory_tops = gbps * opb / 1e3
    peak = entry.get("machine_int8_tops")
    roof = min(peak, memory_tops) if peak else memory_tops
    entry.update({"machine_read_gbps": gbps, "ops_per_input_byte": opb,
                  "memory_limit_tops": memory_tops, "roofline_tops": roof,
                  "roofline_bound": "memory" if roof == memory_tops else "int8 compute",
                  "fraction_of_roofline": entry["int8_tops_triangle_useful"] / roof})


def native_details(frames: np.ndarray, g: Geometry, repeat: int = 2,
                   slow_packets: int = 8) -> dict:
    """Native backend: what limits it (layout vs products) and the rate of each ISA path.

    ``layout_seconds``: frames -> tiles for the whole gulp alone; ``compute_seconds``: the tile
    products alone; each runnable path's rate on the same frames (the slow portable paths on
    ``slow_packets`` packets), each checked exact and divided by its own instruction's peak.
    """
    from ..backends.native import EMULATED_ISAS, ISAS, NativeBackend, isa_status

    nsamp = frames.shape[0] * g.nspectra_pkt * g.nchan
    best = NativeBackend(g)
    cpu = []
    try:
        t_full, _ = _best_time(lambda: (best.correlate(frames),
                                        cpu.append(best.last_cpu_seconds))[0], repeat)
        stages = [best.time_stages(frames) for _ in range(repeat)]
    finally:
        best.close()
    useful_ops = triangle_int8_tops(nsamp / 1e6, g.nstream) * 1e12  # ops of the whole gulp
    peak = machine_int8_tops(best.isa, best.nthreads)[0]
    per_cpu = peak / best.nthreads if peak else None
    layout = min(s["layout"] for s in stages)
    compute = min(s["compute"] for s in stages)
    details = {
        "isa": best.isa, "isa_reason": best.isa_reason, "nthreads": best.nthreads,
        "seconds": t_full, "layout_seconds": layout, "compute_seconds": compute,
        "layout_fraction": layout / t_full, "layout_gbytes_per_s": frames.nbytes / layout / 1e9,
        "compute_only_msps": nsamp / compute / 1e6,
        "cpu_seconds": min(cpu), "int8_ops": useful_ops,
        # Useful ops per CPU second the threads got, over the peak loop's: the code's
        # efficiency with time slicing by other processes taken out (shared machines).
        "fraction_of_int8_peak_cpu_time": (useful_ops / min(cpu) / (per_cpu * 1e12)
                                           if per_cpu else None),
        "per_isa": {},
    }
    for isa, (ok, why) in isa_status().items():
        if not ok:
            details["per_isa"][isa] = {"runnable": False, "reason": why}
            continue
        if isa in EMULATED_ISAS:  # verifies a kernel's source; its rate measures the emulator
            details["per_isa"][isa] = {"runnable": True, "reason": why, "benchmarked": False}
            continue
        sub = frames if isa in ISAS[:2] else frames[:slow_packets]
        b = NativeBackend(g, isa=isa)
        peak_tops = machine_int8_tops(isa, b.nthreads)[0] if isa != "scalar" else None
        try:
            t, out = _best_time(lambda b=b, sub=sub: b.correlate(sub), repeat)
        finally:
            b.close()
        msps = sub.shape[0] * g.nspectra_pkt * g.nchan / t / 1e6
        useful = triangle_int8_tops(msps, g.nstream)
        details["per_isa"][isa] = {
            "msps": msps, "int8_tops_triangle_useful": useful,
            "machine_int8_tops": peak_tops,
            "fraction_of_int8_peak": useful / peak_tops if peak_tops else None,
            "exact": bool(np.array_equal(out, exact_oracle(sub, g))), "packets": sub.shape[0]}
    return details


def machine_sgemm_gflops(n: int = 2048, repeat: int = 3) -> float:
    a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
    t, _ = _best_time(lambda: a @ a, repeat)
    return 2 * n**3 / t / 1e9


def _onnx_matmul_integer_session(g: Geometry, nspec: int, nthreads: int):
    """onnxruntime session of one batched MatMulInteger: A [C, 2S, N] uint8 (zero point 128)
    x B [C, N, 2S] int8 -> [C, 2S, 2S] int32, the Gram matrix of [re; im] rows (exact)."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    s2 = 2 * g.nstream
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["A", "B", "a_zero"], ["G"])], "gram",
        [helper.make_tensor_value_info("A", TensorProto.UINT8, [g.nchan, s2, nspec]),
         helper.make_tensor_value_info("B", TensorProto.INT8, [g.nchan, nspec, s2])],
        [helper.make_tensor_value_info("G", TensorProto.INT32, [g.nchan, s2, s2])],
        initializer=[helper.make_tensor("a_zero", TensorProto.UINT8, [], [128])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = nthreads
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])


def _gram_inputs(frames: np.ndarray, g: Geometry) -> tuple[np.ndarray, np.ndarray]:
    """(A, B) of the MatMulInteger correlator: Y = [re; im] per channel, A = Y + 128 as uint8
    (undone by the zero point), B = Y^T."""
    x = frames_to_natural(frames, g)                       # [S, C, N, 2]
    y = np.ascontiguousarray(np.moveaxis(x, (0, 3), (2, 1)))  # [C, 2, S, N]
    y = y.reshape(g.nchan, 2 * g.nstream, -1)
    return y.view(np.uint8) ^ np.uint8(0x80), np.ascontiguousarray(y.transpose(0, 2, 1))


def _gram_to_triangle(gram: np.ndarray, s: int) -> np.ndarray:
    """[C, 2S, 2S] Gram of [re; im] -> packed triangle: K = (rr + ii) + i (ir - ri)."""
    rr, ri, ir, ii = gram[:, :s, :s], gram[:, :s, s:], gram[:, s:, :s], gram[:, s:, s:]
    return pack_triangle(rr.astype(np.int64) + ii, ir.astype(np.int64) - ri,
                         out_dtype=np.int64)


def peer_onnxruntime(frames: np.ndarray, g: Geometry, nthreads: int, repeat: int,
                     oracle: np.ndarray) -> dict:
    """The strongest int8 GEMM a user can install here, as a correlator: onnxruntime
    ``MatMulInteger`` (MLAS kernels, u8 x s8 -> s32) on the [re; im] rows, frames in and the
    packed triangle out; and the GEMM of the same shape alone. The full 2S x 2S Gram: a GEMM
    library has no Hermitian triangle."""
    try:
        import onnxruntime
    except ImportError as exc:
        return {"skipped": f"onnxruntime not installed (pip install -e .[bench]): {exc}"}
    nspec = frames.shape[0] * g.nspectra_pkt
    sess = _onnx_matmul_integer_session(g, nspec, nthreads)

    def correlator() -> np.ndarray:
        a, b = _gram_inputs(frames, g)
        return _gram_to_triangle(sess.run(None, {"A": a, "B": b})[0], g.nstream)

    correlator()  # warm-up
    t, out = _best_time(correlator, repeat)
    a, b = _gram_inputs(frames, g)
    t_gemm, _ = _best_time(lambda: sess.run(None, {"A": a, "B": b}), repeat)
    msps = nspec * g.nchan / t / 1e6
    gemm_ops = 2 * g.nchan * (2 * g.nstream) ** 2 * nspec
    return {"msps": msps, "exact": bool(np.array_equal(out, oracle)),
            "packets": frames.shape[0], "nthreads": nthreads,
            "version": onnxruntime.__version__,
            "int8_tops_triangle_useful": triangle_int8_tops(msps, g.nstream),
            "gemm_alone": {"shape": f"{g.nchan} x [{2 * g.nstream} x {nspec}] x "
                                    f"[{nspec} x {2 * g.nstream}] u8 x s8 -> s32",
                           "seconds": t_gemm, "int8_tops": gemm_ops / t_gemm / 1e12}}


def scaling(isa: str | None = None, nstreams: tuple[int, ...] = (64, 128, 256, 512, 1024),
            threads: tuple[int, ...] = (1, 2), nchan: int = 9, repeat: int = 2,
            seed: int = 0) -> list[dict]:
    """Rate and fraction of the int8 peak of the native backend over S and thread count.

    P shrinks as 1/S^2 from 34 at S = 256 so each point does similar work, but not below 16
    (7,680 spectra: the once-per-channel write-out of S^2 accumulators stays a few per cent);
    ``cost_vs_s2`` is the CPU time per sample relative to S = 256 at the same thread count,
    divided by S(S+1) / (256 x 257): 1.0 where cost grows as S^2; ``msps_cores_free`` the rate
    with every thread on a core of its own (from CPU time), which grows with the threads
    where the wall-clock ``msps`` cannot (others' processes on the cores). Exactness is checked on
    channel 0 against complex128 BLAS.
    """
    from ..backends.native import NativeBackend

    rows = []
    for nthreads in threads:
        for s in nstreams:
            npacket = max(16, min(136, round(34 * (256 / s) ** 2)))
            g = Geometry(nstream=s, nchan=nchan, npacket=npacket)
            frames = np.random.default_rng(seed).integers(
                -128, 128, size=(npacket, *g.frame_shape), dtype=np.int8)
            b = NativeBackend(g, isa=isa or "auto", nthreads=nthreads)
            cpu = []
            try:
                b.correlate(frames[:1])
                t, out = _best_time(lambda b=b, f=frames, c=cpu: (
                    b.correlate(f), c.append(b.last_cpu_seconds))[0], repeat)
            finally:
                b.close()
            peak, path, _ = machine_int8_tops(b.isa, nthreads)
            nsamp = npacket * g.nspectra_pkt * nchan
            msps = nsamp / t / 1e6
            useful = triangle_int8_tops(msps, s)
            cpu_useful = triangle_int8_tops(nsamp / min(cpu) / 1e6, s)  # per CPU second
            z = _complex_samples(frames, g, np.complex128)[0]
            rows.append({"S": s, "nthreads": nthreads, "P": npacket, "isa": path,
                         "msps": msps, "int8_tops_triangle_useful": useful,
                         "machine_int8_tops": peak,
                         "fraction_of_int8_peak": useful / peak if peak else None,
                         "fraction_of_int8_peak_cpu_time": (
                             cpu_useful * nthreads / peak if peak else None),
                         # the rate with each thread on a core of its own (CPU time)
                         "msps_cores_free": nsamp / min(cpu) * nthreads / 1e6,
                         "exact_channel0": bool(np.array_equal(
                             out[0], _triangle_of(z @ z.conj().T)))})
    for row in rows:  # from CPU time: wall clock on a shared machine measures the others
        base = [r for r in rows if r["nthreads"] == row["nthreads"] and r["S"] == 256]
        if base:
            rel_cost = base[0]["msps_cores_free"] / row["msps_cores_free"]
            row["cost_vs_s2"] = rel_cost / (row["S"] * (row["S"] + 1) / (256 * 257))
    return rows


def run(backend: str = "auto", nstream: int = 256, nchan: int = 9, npacket: int = 136,
        repeat: int = 3, einsum_packets: int = 1, seed: int = 0, with_scaling: bool = True,
        with_onnx: bool = True, peer_packets: int = 34) -> dict:
    """Measure ``backend`` and its peers on the same random frames; return the JSON dict.

    The int8 peak is measured right before and after the backend (best of both: on a shared
    machine the least disturbed measurement is the closest to the ceiling); the load average
    is recorded at both ends.
    """
    g = Geometry(nstream=nstream, nchan=nchan, npacket=npacket)
    frames = np.random.default_rng(seed).integers(
        -128, 128, size=(npacket, *g.frame_shape), dtype=np.int8)
    nsamp = npacket * g.nspectra_pkt * nchan
    oracle = exact_oracle(frames, g)
    load_start = os.getloadavg()

    b = get_backend(backend, g)
    nthreads = getattr(b, "nthreads", os.cpu_count() or 1)
    isa = getattr(b, "isa", None)
    machine_int8_tops(isa, nthreads)
    try:
        b.correlate(frames[:1])  # warm-up (threads, scratch, dispatch)
        t, out = _best_time(lambda: b.correlate(frames), repeat)
    finally:
        b.close()
    peak, peak_isa, how = machine_int8_tops(isa, nthreads)
    msps = nsamp / t / 1e6
    full, tri = tops(msps, nstream)
    useful = triangle_int8_tops(msps, nstream)
    result = {
        "backend": b.name, "backend_reason": getattr(b, "choice_reason", ""),
        "S": nstream, "nchan": nchan, "P": npacket, "nthreads": nthreads, "msps": msps,
        "tops_full": full, "tops_triangle": tri, "exact": bool(np.array_equal(out, oracle)),
        "int8_tops_triangle_useful": useful, "machine_int8_tops": peak,
        "machine_int8_isa": peak_isa, "machine_int8_how": how,
        "fraction_of_int8_peak": useful / peak if peak else None,
        "peers": {},
    }
    # Peers on fewer packets where they are slow (a rate per sample is fair; the GEMM shape
    # stays large): onnxruntime on up to 34, complex64 BLAS on up to 16, einsum on 1.
    sub = frames[:min(npacket, peer_packets)]
    sub_oracle = oracle if len(sub) == npacket else exact_oracle(sub, g)
    if with_onnx:
        result["peers"]["onnxruntime MatMulInteger correlator"] = peer_onnxruntime(
            sub, g, nthreads, min(repeat, 2), sub_oracle)
    one = frames[:einsum_packets]
    t, out = _best_time(lambda: peer_einsum(one, g), 1)
    result["peers"]["numpy.einsum"] = {
        "msps": einsum_packets * g.nspectra_pkt * nchan / t / 1e6,
        "exact": bool(np.array_equal(out, exact_oracle(one, g))), "packets": einsum_packets}
    small = frames[:min(npacket, 16)]
    t, out = _best_time(lambda: peer_matmul(small, g), min(repeat, 2))
    result["peers"]["complex64 A@A^H"] = {
        "msps": len(small) * g.nspectra_pkt * nchan / t / 1e6,
        "exact": bool(np.array_equal(out, exact_oracle(small, g))), "packets": len(small)}
    result["machine_sgemm_gflops"] = machine_sgemm_gflops()
    result["speedup_vs_peers"] = {k: msps / v["msps"] for k, v in result["peers"].items()
                                  if "msps" in v}
    if b.name == "native":
        result["native"] = native_details(frames, g, repeat)
        if with_scaling:
            result["scaling"] = scaling(b.isa, nchan=nchan, repeat=repeat, seed=seed)
    result["load_average_1min"] = {"start": load_start[0], "end": os.getloadavg()[0]}
    _use_best_peaks(result)
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


def _use_best_peaks(result: dict) -> None:
    """Divide every fraction by the highest peak measured in the whole run for its (isa,
    threads), so no fraction is flattered by a peak measured while another process held the
    core; record the best wall-clock peak beside it."""
    def fix(entry: dict, isa: str | None, nthreads: int) -> None:
        if not isa or entry.get("machine_int8_tops") is None:
            return
        entry["machine_int8_tops_wall_same_run"] = wall_peak_tops(isa, nthreads)
        old_peak = entry["machine_int8_tops"]
        entry["machine_int8_tops"] = machine_int8_tops(isa, nthreads, repeat=1)[0]
        entry["fraction_of_int8_peak"] = (entry["int8_tops_triangle_useful"]
                                          / entry["machine_int8_tops"])
        if entry.get("fraction_of_int8_peak_cpu_time"):
            entry["fraction_of_int8_peak_cpu_time"] *= old_peak / entry["machine_int8_tops"]

    fix(result, result.get("machine_int8_isa"), result["nthreads"])
    native = result.get("native", {})
    for isa, entry in native.get("per_isa", {}).items():
        fix(entry, isa, native["nthreads"])
    for row in result.get("scaling", []):
        fix(row, row["isa"], row["nthreads"])
    if native.get("cpu_seconds"):
        per_cpu = result["machine_int8_tops"] / result["nthreads"]
        native["fraction_of_int8_peak_cpu_time"] = (
            native["int8_ops"] / native["cpu_seconds"] / (per_cpu * 1e12))
        result["fraction_of_int8_peak_cpu_time"] = native["fraction_of_int8_peak_cpu_time"]
