"""The modelled schedule of a few kernel calls, as a Chrome / Perfetto trace.

The performance model (:mod:`.perfmodel`) gives rates; this module draws the picture the
published post shows from a hardware trace: per tile and DMA channel, when data comes in, when
the kernel runs and when accumulators go out. It replays the first ``ncalls`` kernel calls of
one NPU call from an empty array, with the plan's own routes and buffer depths:

- a shim input channel fills the memory-tile buffers it feeds (one packet of one channel; a
  fan-out feeds two at once) once they have sent every call out of the fill two before
  (ping-pong);
- a memory-tile MM2S sends call k to every compute tile it broadcasts to once all its writers
  have filled that buffer and every destination has freed its buffer k % 2 (kernel k - 2 done);
- a core runs kernel k once A and B of call k have arrived and kernel k - 1 is done;
- after the last call the accumulators leave (core MM2S, then the memory tile joins the rows and
  sends them to the shim) and the core zeroes them, as at the end of every integration
  (``calls_per_integration`` calls; the trace draws it after the calls it shows).

Durations are the model's: kernel cycles, bytes at the DMA width, shim reads at the channel's
rate or its share of the shared input rate. Events on one track never overlap (each track is
one resource doing one thing at a time). Times are microseconds at the device clock.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from ..design.dataflow import MM2S, S2MM, DmaChain, NpuPlan, Port, Tile
from .perfmodel import Prediction, figure, writers_of


@dataclass(frozen=True)
class Span:
    """One busy interval of one track (a tile's core or one of its DMA channels), in cycles."""

    tile: Tile
    track: str
    name: str
    category: str
    start: float
    duration: float

    @property
    def end(self) -> float:
        return self.start + self.duration


class _Schedule:
    def __init__(self, pred: Prediction) -> None:
        self.plan: NpuPlan = pred.plan
        tr, dev = pred.main.traffic, pred.device
        self.dma = dev.dma_bytes_per_cycle
        self.sources = {d: f.source for f in self.plan.flows for d in f.dests}
        self.spans: list[Span] = []
        self.free: dict[tuple[Tile, str], float] = defaultdict(float)  # track -> free from
        # shim cycles per byte: its own rate, or its share of the shared input rate
        total = tr.input_bytes
        self.shim_cpb = {}
        for p in tr.shim_inputs:
            rate = dev.shim_bytes_per_s
            if dev.input_bytes_per_s is not None:
                rate = min(rate, dev.input_bytes_per_s * tr.port_bytes[p] / total)
            self.shim_cpb[p] = dev.clock_hz / rate

    def busy(self, tile: Tile, track: str, name: str, category: str, ready: float,
             duration: float) -> Span:
        """Book ``track`` from ``max(ready, when it is free)`` for ``duration`` cycles."""
        span = Span(tile, track, name, category, max(ready, self.free[(tile, track)]), duration)
        self.free[(tile, track)] = span.end
        self.spans.append(span)
        return span

    def mirror(self, port: Port, span: Span, name: str) -> None:
        """The receiving end of a stream transfer: the same interval on ``port``'s track."""
        track = f"{port.direction}{port.channel}"
        self.spans.append(Span(port.tile, track, name, span.category, span.start,
                               span.duration))
        self.free[(port.tile, track)] = span.end


def _track(port: Port) -> str:
    return f"{port.direction}{port.channel}"


def schedule(pred: Prediction, ncalls: int) -> list[Span]:
    """Busy intervals of every core and DMA channel over the first ``ncalls`` kernel calls,
    then one accumulator drain (see the module docstring)."""
    if ncalls < 1:
        raise ValueError(f"ncalls must be >= 1, got {ncalls}")
    s = _Schedule(pred)
    plan, tr = s.plan, pred.main.traffic
    chains = {c.port: c for c in plan.chains}
    mem_sends = [c for c in plan.chains if c.port.tile.kind == "mem" and c.port.direction == MM2S
                 and c.port in tr.inputs]
    writers = {c.port: writers_of(plan, c) for c in mem_sends}
    fed: dict[Port, list[tuple[Port, Port]]] = defaultdict(list)  # shim -> (writer, mem send)
    for src, ws in writers.items():
        for w in ws:
            fed[s.sources[w.port]].append((w.port, src))
    dests = {f.source: f.dests for f in plan.flows}
    call_bytes = {c.port: tr.per_call(c.port) for c in mem_sends}
    kernel_end: dict[tuple[Tile, int], float] = {}
    fill_end: dict[tuple[Port, int], float] = {}
    sent_end: dict[tuple[Port, int], float] = {}  # mem MM2S port, call -> end
    arrived: dict[tuple[Port, int], float] = {}  # compute S2MM port, call -> end
    per_fill = tr.mem_fill_calls
    for k in range(ncalls):
        f = k // per_fill
        if k % per_fill == 0:  # each shim stream fills buffer f % 2 of every writer it feeds
            for shim, targets in fed.items():
                free_at = max(sent_end.get((src, (f - 1) * per_fill - 1), 0.0)
                              for _, src in targets)
                span = s.busy(shim.tile, _track(shim), f"fill {f}", "dma_in", free_at,
                              tr.port_bytes[shim] / tr.fills * s.shim_cpb[shim])
                for w, _ in targets:
                    s.mirror(w, span, f"fill {f}")
                    fill_end[(w, f)] = span.end
        for chain in mem_sends:
            src = chain.port
            ready = max(fill_end[(w.port, f)] for w in writers[src])
            for d in dests[src]:
                ready = max(ready, kernel_end.get((d.tile, k - 2), 0.0))
            span = s.busy(src.tile, _track(src), f"call {k}", "dma_in", ready,
                          call_bytes[src] / s.dma)
            sent_end[(src, k)] = span.end
            for d in dests[src]:
                s.mirror(d, span, f"call {k}")
                arrived[(d, k)] = span.end
        for core in plan.cores:
            ins = [p for p in (Port(core.tile, S2MM, 0), Port(core.tile, S2MM, 1))
                   if p in chains]
            ready = max(arrived[(p, k)] for p in ins)
            span = s.busy(core.tile, "core", f"kernel {k}", "kernel", ready, pred.main.core)
            kernel_end[(core.tile, k)] = span.end
    _drain(s, chains, dests, pred)
    return s.spans


def _drain(s: _Schedule, chains: dict[Port, DmaChain], dests: dict[Port, tuple[Port, ...]],
           pred: Prediction) -> None:
    """Accumulators out after the last call: core MM2S -> memory tile (join) -> shim; the core
    zeroes them once they have left."""
    tr = pred.main.traffic
    per_int = tr.kernel_calls // tr.integrations
    joined: dict[Port, float] = defaultdict(float)
    for core in s.plan.cores:
        out = next(p for p in chains if p.tile == core.tile and p.direction == MM2S)
        span = s.busy(core.tile, _track(out), f"accumulators out (every {per_int} calls)",
                      "dma_out", s.free[(core.tile, "core")], tr.acc_bytes / s.dma)
        for d in dests[out]:
            s.mirror(d, span, "accumulators in")
            mem_out = next(c.port for c in s.plan.chains_of(d.tile)
                           if c.port.direction == MM2S and c.port not in tr.inputs)
            joined[mem_out] = max(joined[mem_out], span.end)
        s.busy(core.tile, "core", "zero accumulators", "kernel", span.end,
               tr.acc_bytes / figure("core_store_bytes_per_cycle"))
    for mem_out, ready in joined.items():
        span = s.busy(mem_out.tile, _track(mem_out), "accumulators out", "dma_out", ready,
                      tr.port_bytes[mem_out] / tr.integrations / s.dma)
        for d in dests[mem_out]:
            s.mirror(d, span, "accumulators to host")


def chrome_trace(pred: Prediction, ncalls: int = 8) -> dict:
    """``{"traceEvents": [...]}``: one process per tile, one thread per track (its core and
    each DMA channel it uses), "X" events in microseconds; opens in Perfetto / chrome://tracing.
    """
    spans = schedule(pred, ncalls)
    us = 1e6 / pred.device.clock_hz
    kind_order = {"shim": 0, "mem": 1, "compute": 2}
    tiles = sorted({sp.tile for sp in spans}, key=lambda t: (kind_order[t.kind], t.col, t.row))
    pid = {t: i + 1 for i, t in enumerate(tiles)}
    tracks = sorted({(sp.tile, sp.track) for sp in spans},
                    key=lambda tt: (tt[1] != "core", tt[1]))
    tid = {tt: i + 1 for i, tt in enumerate(tracks)}
    events: list[dict] = []
    for t in tiles:
        events.append({"ph": "M", "name": "process_name", "pid": pid[t], "tid": 0,
                       "args": {"name": str(t)}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": pid[t], "tid": 0,
                       "args": {"sort_index": pid[t]}})
    for tile, track in tracks:
        events.append({"ph": "M", "name": "thread_name", "pid": pid[tile],
                       "tid": tid[(tile, track)], "args": {"name": track}})
    for sp in sorted(spans, key=lambda sp: sp.start):
        events.append({"ph": "X", "name": sp.name, "cat": sp.category, "pid": pid[sp.tile],
                       "tid": tid[(sp.tile, sp.track)], "ts": sp.start * us,
                       "dur": sp.duration * us,
                       "args": {"start_cycle": round(sp.start, 1),
                                "cycles": round(sp.duration, 1)}})
    summary = pred.to_dict()
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"model": "xengine_block.npu.model.perfmodel (modelled, not measured)",
                          "calls": ncalls, "design": summary["design"],
                          "device": summary["device"], "msps": summary["msps"],
                          "bottleneck": summary["bottleneck"]}}
