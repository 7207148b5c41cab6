"""Throughput measurement of correlator backends against peers, in one run
(docs/design.md, "Measuring").

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

import functools
import importlib.util
import os
from collections.abc import Mapping, Sequence
from types import ModuleType

import numpy as np

from ..backends import get_backend
from ..frames import frames_to_natural, to_complex
from ..geometry import Geometry
from ..triangle import full_int8_tops, pack_triangle, triangle_int8_tops
from .machine import (
    best_read_gbps,
    best_time,
    interleaved_best,
    machine_identity,
    machine_int8_tops,
    machine_read_gbps,
    machine_sgemm_gflops,
    read_bandwidth,
    wall_peak_tops,
)
from .peers import best_exact_peer, library_peers

__all__ = ["compare_builds", "load_build", "machine_int8_tops", "machine_read_gbps",
           "machine_sgemm_gflops", "read_bandwidth", "run", "run_ci4", "scaling"]


def tops(msps: float, nstream: int) -> tuple[float, float]:
    """(full-matrix, triangle) TOPS for a rate in Msps."""
    full = full_int8_tops(msps, nstream)
    return full, full / 2


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


def ops_per_input_byte(nstream: int, sample_bits: int = 8) -> float:
    """Useful int8 ops per input byte: 8 * S(S+1)/2 ops per sample time (the module's useful
    triangle convention) over the S * 2 * bits/8 bytes of one sample time of every stream:
    2(S+1) for ci8 (514 at S = 256), 4(S+1) for ci4. Input bytes only: the triangle written
    once per channel and call is under 1 % of them at the published design's P."""
    return 8 * nstream * (nstream + 1) / 2 / (nstream * 2 * sample_bits / 8)


def set_roofline(entry: dict, nthreads: int, opb: float) -> None:
    """Add the roofline of ``entry`` (which has ``int8_tops_triangle_useful`` and
    ``machine_int8_tops``): the lower of the int8 peak and the read bandwidth of ``nthreads``
    cores (the run's best; measured now if not yet) times ``opb`` useful ops per input byte,
    and the useful rate's fraction of it."""
    gbps = best_read_gbps(nthreads) or machine_read_gbps(nthreads)[0]
    memory_tops = gbps * opb / 1e3
    peak = entry.get("machine_int8_tops")
    entry.update({"machine_read_gbps": gbps, "ops_per_input_byte": opb,
                  "memory_limit_tops": memory_tops})
    if not peak:  # no int8 peak loop for this path (portable C): no roofline to divide by
        entry["fraction_of_roofline"] = None
        return
    roof = min(peak, memory_tops)
    entry.update({"roofline_tops": roof,
                  "roofline_bound": "memory" if memory_tops < peak else "int8 compute",
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
        t_full, _ = best_time(lambda: (best.correlate(frames),
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
    for isa, (ok, why, _) in isa_status().items():
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
            t, out = best_time(lambda b=b, sub=sub: b.correlate(sub), repeat)
        finally:
            b.close()
        msps = sub.shape[0] * g.nspectra_pkt * g.nchan / t / 1e6
        useful = triangle_int8_tops(msps, g.nstream)
        details["per_isa"][isa] = {
            "msps": msps, "int8_tops_triangle_useful": useful,
            "machine_int8_tops": peak_tops,
            "fraction_of_int8_peak": useful / peak_tops if peak_tops else None,
            "exact": bool(np.array_equal(out, exact_oracle(sub, g))), "packets": sub.shape[0]}
        set_roofline(details["per_isa"][isa], b.nthreads, ops_per_input_byte(g.nstream))
    return details


def _scaling_call(point: dict) -> None:
    """One timed call of a scaling point: its output and the CPU seconds its threads used."""
    point["out"] = point["b"].correlate(point["frames"])
    point["cpu"].append(point["b"].last_cpu_seconds)


def scaling(isa: str | None = None, nstreams: tuple[int, ...] = (64, 128, 256, 512, 1024),
            threads: tuple[int, ...] = (1, 2), nchan: int = 9, repeat: int = 2,
            seed: int = 0) -> list[dict]:
    """Rate, fraction of the int8 peak and of the roofline of the native backend over S and
    thread count (path ``isa``, default the one ``auto`` picks: AMX where it runs).

    P shrinks as 1/S^2 from 34 at S = 256 so each point does similar work, but not below 16
    (7,680 spectra: the once-per-channel write-out of S^2 accumulators stays a few per cent);
    ``cost_vs_s2`` is the CPU time per sample relative to S = 256 at the same thread count,
    divided by S(S+1) / (256 x 257): 1.0 where cost grows as S^2; ``msps_cores_free`` the rate
    with every thread on a core of its own (from CPU time), which grows with the threads
    where the wall-clock ``msps`` cannot (others' processes on the cores). The points are
    timed in ``2 * repeat`` rounds, each calling every point once (in reverse every other
    round), and each keeps its best: a shared machine's slow spell then falls on all points
    alike instead of on the few that ran during it, so the rows compare. Exactness is checked
    on channel 0 against complex128 BLAS.
    """
    from ..backends.native import NativeBackend

    points = []
    for nthreads in threads:
        for s in nstreams:
            npacket = max(16, min(136, round(34 * (256 / s) ** 2)))
            g = Geometry(nstream=s, nchan=nchan, npacket=npacket)
            frames = np.random.default_rng(seed).integers(
                -128, 128, size=(npacket, *g.frame_shape), dtype=np.int8)
            points.append({"g": g, "frames": frames, "nthreads": nthreads, "cpu": [],
                           "b": NativeBackend(g, isa=isa or "auto",
                                                          nthreads=nthreads)})
    try:
        for p in points:
            p["b"].correlate(p["frames"][:1])  # warm-up (threads, scratch, dispatch)
        walls = interleaved_best([functools.partial(_scaling_call, p) for p in points],
                                 2 * repeat, alternate=True)
    finally:
        for p in points:
            p["b"].close()
    rows = []
    for p, wall in zip(points, walls, strict=True):
        g, nthreads, s = p["g"], p["nthreads"], p["g"].nstream
        peak, path, _ = machine_int8_tops(p["b"].isa, nthreads)
        nsamp = g.npacket * g.nspectra_pkt * nchan
        msps = nsamp / wall / 1e6
        useful = triangle_int8_tops(msps, s)
        cpu_useful = triangle_int8_tops(nsamp / min(p["cpu"]) / 1e6, s)  # per CPU second
        z = _complex_samples(p["frames"], g, np.complex128)[0]
        rows.append({"S": s, "nthreads": nthreads, "P": g.npacket, "isa": path,
                     "msps": msps, "int8_tops_triangle_useful": useful,
                     "machine_int8_tops": peak,
                     "fraction_of_int8_peak": useful / peak if peak else None,
                     "fraction_of_int8_peak_cpu_time": (
                         cpu_useful * nthreads / peak if peak else None),
                     # the rate with each thread on a core of its own (CPU time)
                     "msps_cores_free": nsamp / min(p["cpu"]) * nthreads / 1e6,
                     "exact_channel0": bool(np.array_equal(
                         p["out"][0], _triangle_of(z @ z.conj().T)))})
        set_roofline(rows[-1], nthreads, ops_per_input_byte(s))
    for row in rows:  # from CPU time: wall clock on a shared machine measures the others
        base = [r for r in rows if r["nthreads"] == row["nthreads"] and r["S"] == 256]
        if base:
            rel_cost = base[0]["msps_cores_free"] / row["msps_cores_free"]
            row["cost_vs_s2"] = rel_cost / (row["S"] * (row["S"] + 1) / (256 * 257))
    return rows


def load_build(path: str | os.PathLike) -> ModuleType:
    """A build of the native extension (its compiled module file, e.g. one kept from before a
    change) loaded beside the package's own: the same module name from another file."""
    spec = importlib.util.spec_from_file_location("xengine_block._native", os.fspath(path))
    if spec is None or spec.loader is None:
        raise ImportError(f"{path} is not a compiled extension module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def compare_builds(builds: Mapping[str, ModuleType], nstreams: Sequence[int] = (64, 256),
                   nthreads: int = 1, nchan: int = 9, rounds: int = 10, isa: str | None = None,
                   seed: int = 0) -> list[dict]:
    """Native extension builds (label -> module, the first the reference) on the same frames,
    call by call in turn in one process (in reverse order every other round: the one called
    first after another mode was measured slower), so that the slow spells of a shared
    machine fall on each alike: per S and build the best CPU seconds over ``rounds`` of the
    full call, of the layout pass alone and of the products alone (the extension's modes), the
    useful ops per CPU second of each over the int8 peak per CPU second, and the ratio of the
    reference's CPU seconds to each build's (> 1: faster). The builds must agree bit for bit
    (ValueError)."""
    from ..backends.native import select_isa

    isa = isa or select_isa("auto")[0]
    peak_per_cpu = machine_int8_tops(isa, nthreads)[0] * 1e12 / nthreads
    rows = []
    for s in nstreams:
        npacket = max(16, min(136, round(34 * (256 / s) ** 2)))
        g = Geometry(nstream=s, nchan=nchan, npacket=npacket)
        frames = np.random.default_rng(seed).integers(
            -128, 128, size=(npacket, *g.frame_shape), dtype=np.int8)
        outs = {label: np.zeros(g.output_shape, np.int32) for label in builds}
        call = {label: functools.partial(ext.correlate, frames, outs[label], s, nchan, g.ncoarse,
                                         isa, nthreads, 0) for label, ext in builds.items()}
        for label in builds:
            call[label]("full")
        first = next(iter(outs.values()))
        if not all(np.array_equal(first, o) for o in outs.values()):
            raise ValueError(f"the builds {list(builds)} disagree at S = {s}")
        best = {(label, mode): float("inf") for label in builds for mode in _MODES}
        labels = list(builds)
        for r in range(rounds):
            for mode in _MODES:  # every other round in reverse: no build always goes first
                for label in labels if r % 2 == 0 else labels[::-1]:
                    best[label, mode] = min(best[label, mode], call[label](mode))
        ops = triangle_int8_tops(npacket * g.nspectra_pkt * nchan / 1e6, s) * 1e12
        ref = next(iter(builds))
        for label in builds:
            row = {"S": s, "P": npacket, "nthreads": nthreads, "isa": isa, "build": label}
            for mode in _MODES:
                row[f"{mode}_cpu_seconds"] = best[label, mode]
                row[f"{mode}_ratio_to_{ref}"] = best[ref, mode] / best[label, mode]
                if mode != "layout":
                    row[f"{mode}_fraction_of_int8_peak_cpu_time"] = (
                        ops / best[label, mode] / peak_per_cpu)
            row["layout_fraction"] = best[label, "layout"] / best[label, "full"]
            rows.append(row)
    return rows


#: The extension's modes compared by :func:`compare_builds`.
_MODES = ("full", "layout", "compute")


def _peers(frames: np.ndarray, oracle: np.ndarray, g: Geometry, nthreads: int, repeat: int,
           einsum_packets: int, peer_packets: int, with_onnx: bool, with_torch: bool) -> dict:
    """Every peer on (a prefix of) ``frames``, by name."""
    npacket = frames.shape[0]
    # Peers on fewer packets where they are slow (a rate per sample is fair; the GEMM shape
    # stays large): the libraries on up to 34 (torch: what fits in a second), complex64 BLAS
    # on up to 16, einsum on 1.
    peers: dict = {}
    one = frames[:einsum_packets]
    t, out = best_time(lambda: peer_einsum(one, g), 1)
    peers["numpy.einsum"] = {
        "msps": einsum_packets * g.nspectra_pkt * g.nchan / t / 1e6,
        "exact": bool(np.array_equal(out, exact_oracle(one, g))), "packets": einsum_packets}
    small = frames[:min(npacket, 16)]
    t, out = best_time(lambda: peer_matmul(small, g), min(repeat, 2))
    peers["complex64 A@A^H"] = {
        "msps": len(small) * g.nspectra_pkt * g.nchan / t / 1e6,
        "exact": bool(np.array_equal(out, exact_oracle(small, g))), "packets": len(small)}
    sub = frames[:min(npacket, peer_packets)]
    peers.update(library_peers(
        sub, g, nthreads, min(repeat, 2),
        lambda f: oracle if f is frames else exact_oracle(f, g),
        with_onnx=with_onnx, with_torch=with_torch))
    return peers


def run(backend: str = "auto", nstream: int = 256, nchan: int = 9, npacket: int = 136,
        repeat: int = 3, einsum_packets: int = 1, seed: int = 0, with_scaling: bool = True,
        with_onnx: bool = True, with_torch: bool = True, peer_packets: int = 34) -> dict:
    """Measure ``backend`` and its peers on the same random frames; return the JSON dict.

    The int8 peak and the read bandwidth are measured right before and after the backend (best
    of both: on a shared machine the least disturbed measurement is the closest to the
    ceiling); the load average is recorded at both ends. The library peers (onnxruntime,
    torch) run after the native details and the scaling rows: their thread pools keep spinning
    for a while after each call, which would take cores from those. The backend is timed again
    after the peers and ``msps`` is the best of both sets, so that on a shared machine its
    ratio to a peer does not hinge on which of the two ran at a quiet moment.
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
    read_bandwidth(nthreads)
    try:
        b.correlate(frames[:1])  # warm-up (threads, scratch, dispatch)
        t, out = best_time(lambda: b.correlate(frames), repeat)
        exact = bool(np.array_equal(out, oracle))
        native = native_details(frames, g, repeat) if b.name == "native" else None
        rows = (scaling(b.isa, nchan=nchan, repeat=repeat, seed=seed)
                if native and with_scaling else None)
        peers = _peers(frames, oracle, g, nthreads, repeat, einsum_packets, peer_packets,
                       with_onnx, with_torch)
        # Again after the peers: on a shared machine the load moves, and the ratio to a peer
        # should not hinge on which of the two ran at a quiet moment (best of both sets).
        t_again, out = best_time(lambda: b.correlate(frames), repeat)
        exact = exact and bool(np.array_equal(out, oracle))
    finally:
        b.close()
    peak, peak_isa, how = machine_int8_tops(isa, nthreads)
    msps = nsamp / min(t, t_again) / 1e6
    full, tri = tops(msps, nstream)
    useful = triangle_int8_tops(msps, nstream)
    result = {
        "backend": b.name, "backend_reason": getattr(b, "choice_reason", ""),
        "S": nstream, "nchan": nchan, "P": npacket, "nthreads": nthreads, "msps": msps,
        "seconds_before_and_after_peers": [t, t_again],
        "tops_full": full, "tops_triangle": tri, "exact": exact,
        "int8_tops_triangle_useful": useful, "machine_int8_tops": peak,
        "machine_int8_isa": peak_isa, "machine_int8_how": how,
        "fraction_of_int8_peak": useful / peak if peak else None,
        "machine_read_bandwidth": read_bandwidth(nthreads),
        "peers": peers,
    }
    if native:
        result["native"] = native
    if rows:
        result["scaling"] = rows
    for entry in peers.values():
        if "msps" in entry:
            entry["int8_tops_triangle_useful"] = triangle_int8_tops(entry["msps"], nstream)
    result["machine_sgemm_gflops"] = machine_sgemm_gflops()
    result["speedup_vs_peers"] = {k: msps / v["msps"] for k, v in peers.items() if "msps" in v}
    best = best_exact_peer(peers)
    result["ours_over_best_exact_peer"] = (
        {"peer": best[0], "ratio": msps / best[1]["msps"], "goal": 1.5,
         "meets_goal": msps / best[1]["msps"] >= 1.5} if best else
        {"peer": None, "reason": "no peer was exact (or none ran)"})
    result["load_average_1min"] = {"start": load_start[0], "end": os.getloadavg()[0]}
    result["machine"] = machine_identity()
    _use_best_limits(result)
    return result


def run_ci4(backend: str, ci8: dict, repeat: int = 2, seed: int = 0) -> dict:
    """``backend`` on ci4 frames of the geometry of ``ci8`` (a :func:`run` result), measured in
    the same run: rate, exactness, the ratio to ci8, the fraction of the same int8 peak (the
    ci8 fraction times that ratio: the useful ops per sample are the same) and of the ci4
    roofline (twice the useful ops per input byte of ci8)."""
    g = Geometry(nstream=ci8["S"], nchan=ci8["nchan"], npacket=ci8["P"], sample_bits=4)
    rng = np.random.default_rng(seed)
    frames = rng.integers(-128, 128, size=(g.npacket, *g.frame_shape), dtype=np.int8)
    b = get_backend(backend, g)
    try:
        b.correlate(frames[:1])  # warm-up
        t, out = best_time(lambda: b.correlate(frames), repeat)
    finally:
        b.close()
    msps = g.npacket * g.nspectra_pkt * g.nchan / t / 1e6
    ratio = msps / ci8["msps"]
    fraction = ci8.get("fraction_of_int8_peak")  # same S: useful ops scale with the rate
    entry = {"backend": b.name, "backend_reason": getattr(b, "choice_reason", ""),
             "payload_bytes": g.payload_bytes, "msps": msps, "seconds": t,
             "exact": bool(np.array_equal(out, exact_oracle(frames, g))),
             "int8_tops_triangle_useful": triangle_int8_tops(msps, g.nstream),
             "machine_int8_tops": ci8.get("machine_int8_tops"),
             "fraction_of_int8_peak": fraction * ratio if fraction is not None else None,
             "ratio_to_ci8": ratio}
    set_roofline(entry, ci8["nthreads"], ops_per_input_byte(g.nstream, g.sample_bits))
    return entry


def _use_best_limits(result: dict) -> None:
    """Divide every fraction by the highest peak and read bandwidth measured in the whole run
    for its (isa, threads), so no fraction is flattered by a limit measured while another
    process held the core; record the best wall-clock peak beside it; add the roofline of the
    run's path, of each ISA and of each scaling row."""
    def fix(entry: dict, isa: str | None, nthreads: int, nstream: int) -> None:
        if not isa or entry.get("machine_int8_tops") is None:
            return
        entry["machine_int8_tops_wall_same_run"] = wall_peak_tops(isa, nthreads)
        old_peak = entry["machine_int8_tops"]
        entry["machine_int8_tops"] = machine_int8_tops(isa, nthreads, repeat=1)[0]
        entry["fraction_of_int8_peak"] = (entry["int8_tops_triangle_useful"]
                                          / entry["machine_int8_tops"])
        if entry.get("fraction_of_int8_peak_cpu_time"):
            entry["fraction_of_int8_peak_cpu_time"] *= old_peak / entry["machine_int8_tops"]
        set_roofline(entry, nthreads, ops_per_input_byte(nstream))

    fix(result, result.get("machine_int8_isa"), result["nthreads"], result["S"])
    native = result.get("native", {})
    for isa, entry in native.get("per_isa", {}).items():
        fix(entry, isa, native["nthreads"], result["S"])
    for row in result.get("scaling", []):
        fix(row, row["isa"], row["nthreads"], row["S"])
    if native.get("cpu_seconds"):
        per_cpu = result["machine_int8_tops"] / result["nthreads"]
        native["fraction_of_int8_peak_cpu_time"] = (
            native["int8_ops"] / native["cpu_seconds"] / (per_cpu * 1e12))
        result["fraction_of_int8_peak_cpu_time"] = native["fraction_of_int8_peak_cpu_time"]
    result["machine_read_bandwidth"] = read_bandwidth(result["nthreads"], measure=False)
