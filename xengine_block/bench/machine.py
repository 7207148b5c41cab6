"""What the machine can do, measured in the calling run: the int8 peak of each native path and
the streaming read bandwidth (the two sides of a correlator's roofline), and numpy's float32
matmul rate.

Each figure is the best of every measurement in the process, of the wall clock and of CPU time
(insensitive to others' processes taking the cores): a ceiling that the load of a shared machine
does not squeeze, so nothing divided by it is flattered. ``machine_read_gbps`` serves every
benchmark that compares a rate of bytes with the machine (correlator, capture, pipeline,
reprocessing).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np


def best_time(fn: Callable[[], object], repeat: int) -> tuple[float, object]:
    """(best seconds of ``repeat`` calls of ``fn``, the last result)."""
    best, result = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
    return best, result


def interleaved_best(fns: Sequence[Callable[[], object]], repeat: int,
                     between: Callable[[], object] | None = None,
                     alternate: bool = False) -> list[float]:
    """Best seconds of each of ``fns`` over ``repeat`` rounds that call each once in turn:
    what a shared machine's slow spells do to one they do to the others, so their ratios hold
    where separate runs of each do not. ``between``: called after each, untimed (to put
    away what a call left, e.g. its output files). ``alternate``: every other round in reverse
    order, so that no call always follows the same one."""
    best = [float("inf")] * len(fns)
    order = list(enumerate(fns))
    for r in range(repeat):
        for i, fn in order[::-1] if alternate and r % 2 else order:
            t0 = time.perf_counter()
            fn()
            best[i] = min(best[i], time.perf_counter() - t0)
            if between is not None:
                between()
    return best


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
    from .. import native_extension
    from ..backends import BackendUnavailable
    from ..backends.native import select_isa

    try:
        isa = isa or select_isa("auto")[0]
        ext = native_extension.native()
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


#: /proc/cpuinfo flags a benchmark's reader wants to see (which int8 paths the CPU has).
ISA_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "amx_tile", "amx_int8")


def parse_cpuinfo(text: str) -> dict[str, object]:
    """The first processor's model name, family, model and :data:`ISA_FLAGS` of a
    ``/proc/cpuinfo`` text (what ``lscpu`` prints as Model name, CPU family, Model, Flags)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break  # the first processor's block is enough: they are alike here
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    flags = set(fields.get("flags", "").split())
    out: dict[str, object] = {"model_name": fields.get("model name")}
    for key in ("cpu family", "model"):
        value = fields.get(key)
        out[key.replace("cpu ", "")] = int(value) if value and value.isdigit() else None
    out["isa_flags"] = [f for f in ISA_FLAGS if f in flags]
    out["vendor"] = fields.get("vendor_id")
    return out


#: AMD family 25 (0x19) models of Zen 4 (Genoa, Raphael, Phoenix...); the rest of family 25 is
#: Zen 3. Family 26 (0x1a) is Zen 5. (AMD's Processor Programming Reference per family.)
_ZEN4_MODELS_F25 = (range(0x10, 0x20), range(0x60, 0x80), range(0xA0, 0xB0))


def cpu_class(cpu: dict[str, object]) -> str:
    """The class of CPU a benchmark result belongs to (the key of
    ``benchmarks/results/<class>/``), from :func:`parse_cpuinfo`'s fields: the int8 path the
    CPU offers, which is what sets every correlator figure, with the microarchitecture where
    the vendor's family/model numbers give it. ``intel-amx``, ``intel-avx512vnni`` (a Xeon
    whose hypervisor hides AMX), ``amd-zen3``, ``amd-zen4``, ``amd-zen5``; otherwise
    ``<vendor>-<best int8 flag>``."""
    flags = set(cpu.get("isa_flags") or ())
    vendor, family, model = cpu.get("vendor"), cpu.get("family"), cpu.get("model")
    best = next((f for f in ("amx_int8", "avx512_vnni", "avx_vnni", "avx2") if f in flags),
                "generic")
    if vendor == "AuthenticAMD" and family == 26:
        return "amd-zen5"
    if vendor == "AuthenticAMD" and family == 25 and isinstance(model, int):
        return "amd-zen4" if any(model in r for r in _ZEN4_MODELS_F25) else "amd-zen3"
    name = {"GenuineIntel": "intel", "AuthenticAMD": "amd"}.get(str(vendor), "cpu")
    return f"{name}-{best.replace('_int8', '').replace('_', '')}"


def results_path(benchmark: str, root: str | os.PathLike,
                 identity: dict[str, object] | None = None) -> Path:
    """``<root>/<cpu class>/<benchmark>.json``: where a benchmark's JSON for this machine's
    CPU class is kept, one file per benchmark and class, replaced when re-measured. The root
    is the caller's (a checkout's ``benchmarks/results``: ``benchmarks/results_file.py``
    knows it; an installed package does not)."""
    identity = identity if identity is not None else machine_identity()
    return Path(root) / cpu_class(identity) / f"{benchmark}.json"


def write_results(benchmark: str, result: dict, root: str | os.PathLike) -> Path:
    """Write ``result`` (which must carry ``machine``, :func:`machine_identity`) to
    :func:`results_path` under ``root`` with the date of the run added as ``measured_utc``;
    return the path."""
    import datetime
    import json

    if "machine" not in result:
        raise ValueError(f"{benchmark}: a result needs its 'machine' (machine_identity()) "
                         "before it is written")
    path = results_path(benchmark, root, result["machine"])
    path.parent.mkdir(parents=True, exist_ok=True)
    stamped = {"benchmark": benchmark, **result,
               "measured_utc": datetime.datetime.now(datetime.UTC)
               .strftime("%Y-%m-%dT%H:%M:%SZ")}
    path.write_text(json.dumps(stamped, indent=2) + "\n")
    return path


def machine_identity() -> dict[str, object]:
    """Which machine a benchmark ran on, for its JSON: the CPU (model name, family, model, the
    int8 ISA flags; Linux), its cores, the kernel. Machines of one kind differ (Sapphire Rapids
    with AMX, Zen 4 or 5 with AVX-512 VNNI, Zen 3 with AVX2 only), and a figure means little
    without the CPU it came from."""
    import platform

    try:
        cpu = parse_cpuinfo(Path("/proc/cpuinfo").read_text())
    except OSError:
        cpu = {"model_name": platform.processor() or None}
    return {**cpu, "cpus": os.cpu_count(), "kernel": platform.release(),
            "python": platform.python_version()}


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


def best_read_gbps(nthreads: int) -> float | None:
    """The best figure of :func:`machine_read_gbps` on ``nthreads`` so far (None: not measured)."""
    best = _READS.get(nthreads)
    return max(best[:2]) / 1e9 if best else None


def read_bandwidth(nthreads: int | None = None, measure: bool = True) -> dict:
    """The JSON block of the read bandwidth on one core and on ``nthreads`` (default all):
    measured now (``measure``; the best of the run either way), or the run's best so far."""
    n = nthreads or os.cpu_count() or 1
    out = {}
    for key, k in (("one_core", 1), ("all_cores", n)):
        if measure or k not in _READS:
            machine_read_gbps(k)
        wall, cpu, how, nbytes = _READS[k]
        out[key] = {"nthreads": k, "gbps": max(wall, cpu) / 1e9, "gbps_wall": wall / 1e9,
                    "gbps_cpu_time": cpu / 1e9, "loads": how, "buffer_bytes": nbytes}
    return out


def machine_sgemm_gflops(n: int = 2048, repeat: int = 3) -> float:
    a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
    t, _ = best_time(lambda: a @ a, repeat)
    return 2 * n**3 / t / 1e9
