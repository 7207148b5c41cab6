"""Our runtime against real Bifrost on the same chain, and our blocks on Bifrost against plain
Bifrost blocks doing the same work; prints one JSON object.

Chain: an in-memory source (copies capture frames + presence mask into its rings, gulps of P)
-> X-engine -> integrate (``ninteg`` frames) -> a sink that reads every dump. Three peers, each
run once untimed, then ``--repeat`` times interleaved (median wall time of ``Pipeline.run()``,
start-up included):

- ``ours``: our runtime and blocks (``xengine_block.runtime.pipeline``, ``xengine_block.blocks``);
- ``bifrost``: our blocks on real Bifrost (``xengine_block.bifrost``);
- ``bifrost_plain``: plain Bifrost blocks written for this benchmark that call the same backend,
  ``valid_counts`` and ``Integrator`` directly, without our logic mixins and adapter (no lost-
  input bookkeeping, header checks, counters, dtype mapping helpers).

``overhead_vs_plain`` = bifrost / bifrost_plain - 1 on the best (minimum) wall time: what our
blocks cost on top of the work itself in Bifrost (the target is <= 0.10);
``process_overhead_vs_plain`` the same on the blocks' summed processing seconds (Bifrost's perf
proclog times), less sensitive to other load on the machine. Rates are capture frames per second;
``msps`` is correlated samples per second of the whole chain (frames x 480 spectra x C).
Machines are shared: compare the ratios of one run.

``layouts`` (also alone: ``--layouts-only``): the X-engine block (on real Bifrost where it
imports, else ours) on Bifrost's ``[time][freq][station][pol]`` tensor (1 spectrum per frame,
gulps and integrations of P packets of spectra) against the same backend on our frame layout,
S = 256 ci8 and S = 64 ci4, interleaved. ``ratio_*`` = frame time / tensor time, on wall
seconds, the block's process seconds and the backend's CPU seconds (native: its threads',
insensitive to time slicing); the goal is >= 0.9. Backend, ISA and load averages are in the
JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import statistics
import time
from typing import Any

import numpy as np
from results_file import add_option, emit

from xengine_block.array import default_array
from xengine_block.backends import get_backend
from xengine_block.bench.machine import machine_identity
from xengine_block.frames import natural_to_frames, pack_ci4
from xengine_block.geometry import Geometry
from xengine_block.integration import Integrator, valid_counts


def header(g: Geometry) -> list[dict[str, Any]]:
    hdr = {"name": "bench", "time_tag": 0, "sync_time": 1.8e9, "fs_hz": 40e3, "chan0": 0,
           "freq0_hz": 150e6, "chan_bw_hz": 40e3, "nchan": g.nchan, "nstream": g.nstream,
           "geometry": g.to_dict(), "array": default_array(g.nstream // 2).to_dict()}
    return [dict(hdr, _tensor={"dtype": "i8", "shape": [-1, *g.frame_shape]}),
            dict(hdr, name="bench.mask", _tensor={"dtype": "u8", "shape": [-1, g.nstream]})]


def source_class(base: type, arr: Any) -> type:
    """A source on ``base`` (ours or Bifrost's SourceBlock) copying ``nframe`` frames out of a
    small pool (the one copy a capture makes)."""

    class Source(base):
        def __init__(self, g: Geometry, pool: np.ndarray, nframe: int) -> None:
            super().__init__(["bench"], gulp_nframe=g.npacket)
            self.orings = [self.create_ring(space="system"), self.create_ring(space="system")]
            self.g, self.pool, self.nframe = g, pool, nframe
            self.mask = np.ones((g.npacket, g.nstream), np.uint8)

        def create_reader(self, name: str) -> Any:
            return contextlib.nullcontext(iter(range(0, self.nframe, self.g.npacket)))

        def on_sequence(self, reader: Any, name: str) -> list[dict[str, Any]]:
            return header(self.g)

        def on_data(self, reader: Any, ospans: list) -> list[int]:
            i = next(reader, None)
            if i is None:
                return [0, 0]
            n = min(self.g.npacket, self.nframe - i)
            k = (i // self.g.npacket) % (len(self.pool) // self.g.npacket) * self.g.npacket
            arr(ospans[0])[:n] = self.pool[k:k + n]
            arr(ospans[1])[:n] = self.mask[:n]
            return [n, n]

    return Source


def null_sink_class(base: type, arr: Any) -> type:
    class NullSink(base):
        def on_sequence(self, iseq: Any) -> None:
            self.total = 0

        def on_data(self, ispan: Any) -> None:
            self.total += int(arr(ispan)[..., 0].sum())

    return NullSink


def plain_blocks(bfp: Any, arr: Any) -> tuple[type, type]:
    """The same work as our X-engine and integrator, as plain Bifrost blocks."""

    class PlainXEngine(bfp.MultiTransformBlock):
        def __init__(self, src: Any, backend: Any) -> None:
            super().__init__([src.orings[0], src.orings[1]])
            self.backend, self.g = backend, backend.geometry

        def on_sequence(self, iseqs: list) -> list[dict[str, Any]]:
            g, hdr = self.g, dict(iseqs[0].header)
            self.gulp_nframe = g.npacket
            hdr["nspectra"] = g.npacket * g.nspectra_pkt
            return [dict(hdr, name="vis", _tensor={"dtype": "ci32",
                                                   "shape": [-1, g.nchan, g.nbaseline]}),
                    dict(hdr, name="valid", _tensor={"dtype": "i64",
                                                     "shape": [-1, 1, g.nbaseline]})]

        def define_output_nframes(self, n: list[int]) -> list[int]:
            return [1, 1]

        def on_data(self, ispans: list, ospans: list) -> list[int]:
            self.backend.correlate(arr(ispans[0]), out=arr(ospans[0])[0])
            arr(ospans[1])[0] = valid_counts(arr(ispans[1]), self.g)
            return [1, 1]

    class PlainIntegrate(bfp.MultiTransformBlock):
        def __init__(self, x: Any, ninteg: int) -> None:
            super().__init__([x.orings[0], x.orings[1]], gulp_nframe=1)
            self.ninteg = ninteg

        def on_sequence(self, iseqs: list) -> list[dict[str, Any]]:
            hdr = dict(iseqs[0].header)
            self.frame_spectra = int(hdr["nspectra"])
            self.integ = Integrator(self.ninteg, self.frame_spectra)
            shape_v = hdr["_tensor"]["shape"]
            shape_c = iseqs[1].header["_tensor"]["shape"]
            return [dict(hdr, name="ivis", _tensor={"dtype": "ci64", "shape": shape_v}),
                    dict(hdr, name="ivalid", _tensor={"dtype": "i64", "shape": shape_c})]

        def define_output_nframes(self, n: list[int]) -> list[int]:
            return [2, 2]

        def on_data(self, ispans: list, ospans: list) -> list[int]:
            vis, valid, ov, oc = (arr(s) for s in (*ispans, *ospans))
            n = 0
            for i in range(ispans[0].nframe):
                tt = (ispans[0].frame_offset + i) * self.frame_spectra
                for dump in self.integ.add(tt, vis[i], valid[i]):
                    ov[n], oc[n] = dump.vis, dump.valid
                    n += 1
            return [n, n]

    return PlainXEngine, PlainIntegrate


def runtime_parts(name: str) -> tuple[Any, type, type, type, Any]:
    """(blocks namespace, SourceBlock, SinkBlock, Pipeline, span -> our array) of runtime
    ``name``: "ours" or "bifrost"."""
    if name == "ours":
        from xengine_block import blocks
        from xengine_block.runtime import pipeline
        return (blocks, pipeline.SourceBlock, pipeline.SinkBlock, pipeline.Pipeline,
                lambda s: s.data)
    import xengine_block.bifrost as xb

    def arr(span: Any) -> np.ndarray:
        return xb.as_ours(span.data, str(span.dtype))
    return xb, xb.bf.pipeline.SourceBlock, xb.bf.pipeline.SinkBlock, xb.Pipeline, arr


def release(p: Any, bifrost: bool) -> None:
    """Free a finished pipeline's rings (Bifrost never frees a ring itself: its Ring.__del__
    skips it, GiB at S=256)."""
    if bifrost:
        for block in p.blocks:
            for ring in block.orings:
                ring._destroy()
    p.blocks.clear()
    gc.collect()


def run_once(peer: str, g: Geometry, pool: np.ndarray, nframe: int, ninteg: int,
             backend_name: str) -> tuple[float, float]:
    """(wall seconds of run(), seconds all blocks spent processing)."""
    rt, base_src, base_sink, pipe, arr = runtime_parts("ours" if peer == "ours" else "bifrost")
    backend = get_backend(backend_name, g)
    with pipe() as p:
        src = source_class(base_src, arr)(g, pool, nframe)
        if peer == "bifrost_plain":
            plain_x, plain_i = plain_blocks(rt.bf.pipeline, arr)
            integ = plain_i(plain_x(src, backend), ninteg)
        else:
            x = rt.XEngineBlock(src, backend=backend_name, geometry=g)
            integ = rt.IntegrateBlock(x, ninteg=ninteg)
        null_sink_class(base_sink, arr)(integ.orings[0])
        t0 = time.perf_counter()
        p.run()
        wall = time.perf_counter() - t0
    busy = sum(b.counters.snapshot()["process_s"] for b in p.blocks)
    release(p, peer != "ours")
    del p, src, integ
    return wall, busy


# ------------------------------------------------------------------------ input layouts
def layout_inputs(g: Geometry, rng: np.random.Generator) -> dict[str, tuple[dict, np.ndarray,
                                                                         int]]:
    """The same samples (two P-packet gulps' worth, cycled) in our frame layout and in
    Bifrost's ``[time][freq][station][pol]`` tensor (1 spectrum per frame): name -> (header,
    pool of frames, frames per gulp)."""
    lo, hi = (-8, 8) if g.ci4 else (-128, 128)
    nspec = 2 * g.npacket * g.nspectra_pkt
    x = rng.integers(lo, hi, (g.nstream, g.nchan, nspec, 2), dtype=np.int8)
    base = {"name": "bench", "time_tag": 0, "sync_time": 1.8e9, "fs_hz": 40e3, "chan0": 0,
            "freq0_hz": 150e6, "chan_bw_hz": 40e3, "nchan": g.nchan,
            "array": default_array(g.nstream // 2).to_dict()}
    ns = g.nstream // 2
    if g.ci4:
        b = pack_ci4(x, g.nibble_order)  # [S, C, T] bytes
        tensor = np.ascontiguousarray(b.reshape(ns, 2, g.nchan, nspec).transpose(3, 2, 0, 1))
        dtype = "ci4"
    else:
        tensor = np.ascontiguousarray(x.reshape(ns, 2, g.nchan, nspec, 2).transpose(3, 2, 0, 1, 4))
        dtype = "ci8"
    frames = natural_to_frames(x, g)
    return {
        "frame": (dict(base, geometry=g.to_dict(),
                       _tensor={"dtype": g.frame_dtype, "shape": [-1, *g.frame_shape]}),
                  frames, g.npacket),
        "bifrost_tensor": (dict(base, geometry={"npacket": g.npacket},
                                _tensor={"dtype": dtype, "shape": [-1, g.nchan, ns, 2],
                                         "labels": ["time", "freq", "station", "pol"]}),
                           tensor, g.npacket * g.nspectra_pkt)}


def run_layout_once(rt_name: str, g: Geometry, inp: tuple[dict, np.ndarray, int],
                    ngulp: int, backend: str) -> tuple[float, float, float]:
    """(wall s of run(), X-engine process s, X-engine CPU s of its backend calls) for ngulp
    gulps of ``inp`` through source -> X-engine (integration of P packets of spectra) -> sink."""
    rt, base_src, base_sink, pipe, arr = runtime_parts(rt_name)
    hdr, pool, gulp = inp

    class Source(base_src):
        def __init__(self) -> None:
            super().__init__(["bench"], gulp_nframe=gulp)

        def create_reader(self, name: str) -> Any:
            return contextlib.nullcontext(iter(range(ngulp)))

        def on_sequence(self, reader: Any, name: str) -> list[dict[str, Any]]:
            return [dict(hdr)]

        def on_data(self, reader: Any, ospans: list) -> list[int]:
            i = next(reader, None)
            if i is None:
                return [0]
            k = i % (len(pool) // gulp) * gulp
            arr(ospans[0])[:gulp] = pool[k:k + gulp]
            return [gulp]

    class TimedXEngine(rt.XEngineBlock):
        """Sums the backend's CPU seconds (native: its threads'; one call per gulp here)."""

        cpu = 0.0

        def on_data(self, ispans: list, ospans: list) -> list[int]:
            n = super().on_data(ispans, ospans)
            self.cpu += getattr(self.backend, "last_cpu_seconds", 0.0)
            return n

    with pipe() as p:
        x = TimedXEngine(Source(), backend=backend, gulp_nframe=gulp,
                         integration_spectra=g.npacket * g.nspectra_pkt)
        null_sink_class(base_sink, arr)(x.orings[0])
        t0 = time.perf_counter()
        p.run()
        wall = time.perf_counter() - t0
    busy = x.counters.snapshot()["process_s"]
    info = (x.backend.name, getattr(x.backend, "isa", None))
    x.backend.close()
    release(p, rt_name != "ours")
    run_layout_once.last_backend = info  # type: ignore[attr-defined]
    return wall, busy, x.cpu


def layout_ratios(a: argparse.Namespace, rng: np.random.Generator) -> dict[str, Any]:
    """The X-engine on Bifrost's tensor layout against the same backend on our frame layout,
    interleaved runs; ratio = frame time / tensor time (1 = as fast; goal >= 0.9)."""
    try:
        import xengine_block.bifrost  # noqa: F401
        rt_name = a.layout_runtime or "bifrost"
    except ImportError:
        rt_name = a.layout_runtime or "ours"
    configs = [("S=256 ci8", Geometry(nstream=256, nchan=9, npacket=32), 3),
               ("S=64 ci4", Geometry(nstream=64, nchan=9, npacket=136, sample_bits=4), 3)]
    if a.quick:
        configs = [("S=32 ci8", Geometry(nstream=32, nchan=9, npacket=4), 2),
                   ("S=32 ci4", Geometry(nstream=32, nchan=9, npacket=4, sample_bits=4), 2)]
    out: dict[str, Any] = {"runtime": rt_name, "machine": machine_identity()}
    for label, g, ngulp in configs:
        inputs = layout_inputs(g, rng)
        for inp in inputs.values():  # warm-up: imports, numba, first allocations
            run_layout_once(rt_name, g, inp, 1, a.backend)
        res: dict[str, dict[str, list[float]]] = {
            n: {"wall_s": [], "process_s": [], "backend_cpu_s": []} for n in inputs}
        for _ in range(a.repeat):
            for name, inp in inputs.items():
                wall, busy, cpu = run_layout_once(rt_name, g, inp, ngulp, a.backend)
                for key, v in zip(("wall_s", "process_s", "backend_cpu_s"), (wall, busy, cpu),
                                  strict=True):
                    res[name][key].append(round(v, 4))
        backend, isa = run_layout_once.last_backend  # type: ignore[attr-defined]
        entry: dict[str, Any] = {"nstream": g.nstream, "nchan": g.nchan,
                                 "sample_bits": g.sample_bits,
                                 "spectra": ngulp * g.npacket * g.nspectra_pkt,
                                 "backend": backend, "isa": isa, "runs": res}
        for key in ("wall_s", "process_s", "backend_cpu_s"):
            f, t = min(res["frame"][key]), min(res["bifrost_tensor"][key])
            entry[f"ratio_{key}"] = round(f / t, 3) if t > 0 else None
        out[label] = entry
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="native", help="correlator backend (default native)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke test)")
    ap.add_argument("--layouts-only", action="store_true",
                    help="only the input-layout comparison (Bifrost tensor vs our frames)")
    ap.add_argument("--layout-runtime", choices=("ours", "bifrost"), default=None,
                    help="runtime of the layout comparison (default bifrost where it imports)")
    add_option(ap)
    a = ap.parse_args()
    configs = [("S=32", Geometry(nstream=32, nchan=9, npacket=136), 24, 2),
               # small gulps: the blocks' per-gulp Python cost weighs most here
               ("S=32 P=8", Geometry(nstream=32, nchan=9, npacket=8), 300, 2),
               ("S=256", Geometry(nstream=256, nchan=9, npacket=136), 4, 2)]
    if a.quick:
        configs = [("S=32", Geometry(nstream=32, nchan=9, npacket=8), 4, 2)]
    rng = np.random.default_rng(0)
    peers = ("ours", "bifrost", "bifrost_plain")
    result: dict[str, Any] = {"benchmark": "runtime", "backend": a.backend,
                              "repeat": a.repeat, "configs": {}}
    result["layouts"] = layout_ratios(a, rng)
    if a.layouts_only:
        configs = []
    for label, g, nout, ninteg in configs:
        pool = rng.integers(-128, 128, (2 * g.npacket, *g.frame_shape), dtype=np.int8)
        nframe = nout * g.npacket
        times: dict[str, list[float]] = {p: [] for p in peers}
        busy: dict[str, list[float]] = {p: [] for p in peers}
        for peer in peers:  # warm-up (first calls load and initialise code), not timed
            run_once(peer, g, pool, 2 * g.npacket, ninteg, a.backend)
        for _ in range(a.repeat):
            for peer in peers:
                wall, process = run_once(peer, g, pool, nframe, ninteg, a.backend)
                times[peer].append(wall)
                busy[peer].append(process)
        best = {p: min(t) for p, t in times.items()}
        med = {p: statistics.median(t) for p, t in times.items()}
        result["configs"][label] = {
            "nstream": g.nstream, "npacket": g.npacket, "nframe": nframe, "ninteg": ninteg,
            "seconds": {p: [round(x, 4) for x in t] for p, t in times.items()},
            "process_s": {p: [round(x, 4) for x in t] for p, t in busy.items()},
            "frames_per_s_best": {p: round(nframe / best[p], 1) for p in peers},
            "frames_per_s_median": {p: round(nframe / med[p], 1) for p in peers},
            "msps_best": {p: round(nframe * g.nspectra_pkt * g.nchan / best[p] / 1e6, 3)
                          for p in peers},
            "bifrost_over_ours": round(best["bifrost"] / best["ours"], 3),
            "overhead_vs_plain": round(best["bifrost"] / best["bifrost_plain"] - 1, 3),
            "process_overhead_vs_plain": round(min(busy["bifrost"])
                                               / min(busy["bifrost_plain"]) - 1, 3),
        }
    emit("bench_runtime", result, a, indent=None)


if __name__ == "__main__":
    main()
