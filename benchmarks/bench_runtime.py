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
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import statistics
import time
from typing import Any

import numpy as np

from xengine_block.array import default_array
from xengine_block.backends import get_backend
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


def run_once(peer: str, g: Geometry, pool: np.ndarray, nframe: int, ninteg: int,
             backend_name: str) -> tuple[float, float]:
    """(wall seconds of run(), seconds all blocks spent processing)."""
    if peer == "ours":
        from xengine_block import blocks
        from xengine_block.runtime import pipeline
        rt, base_src, base_sink = blocks, pipeline.SourceBlock, pipeline.SinkBlock
        pipe, arr = pipeline.Pipeline, (lambda s: s.data)
    else:
        import xengine_block.bifrost as xb
        rt, base_src, base_sink = xb, xb.bf.pipeline.SourceBlock, xb.bf.pipeline.SinkBlock
        pipe = xb.Pipeline

        def arr(span: Any) -> np.ndarray:
            return xb.as_ours(span.data, str(span.dtype))
    backend = get_backend(backend_name, g)
    with pipe() as p:
        src = source_class(base_src, arr)(g, pool, nframe)
        if peer == "bifrost_plain":
            plain_x, plain_i = plain_blocks(xb.bf.pipeline, arr)
            integ = plain_i(plain_x(src, backend), ninteg)
        else:
            x = rt.XEngineBlock(src, backend=backend_name, geometry=g)
            integ = rt.IntegrateBlock(x, ninteg=ninteg)
        null_sink_class(base_sink, arr)(integ.orings[0])
        t0 = time.perf_counter()
        p.run()
        wall = time.perf_counter() - t0
    busy = sum(b.counters.snapshot()["process_s"] for b in p.blocks)
    if peer != "ours":  # Bifrost never frees a ring (Ring.__del__ skips it): GiB at S=256
        for block in p.blocks:
            for ring in block.orings:
                ring._destroy()
    p.blocks.clear()
    del p, src, integ
    gc.collect()
    return wall, busy


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="native", help="correlator backend (default native)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke test)")
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
    print(json.dumps(result))


if __name__ == "__main__":
    main()
