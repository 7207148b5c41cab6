"""Capture cost: CPU microseconds per heap into the pipeline's rings, per source, and the
highest loopback UDP rate received with zero loss; one JSON object.

``cpu_us_per_heap`` (goal <= 1.5 at 8640-byte heaps): the capture's own CPU time per heap,
spead2's receiver thread and the consumer together, exactly as ``CaptureBlock`` runs them
(zero copy: spead2 places heaps straight into ring slots; the consumer zero-fills and commits
frames), measured with per-thread CPU clocks from the capture's first frame to its end, a
guaranteed reader draining the rings beside it (its CPU not counted). The packets are built
beforehand, so what is measured is the capture, not a sender. Per source (``sources``):

- ``buffer`` (the headline): the datagrams back to back in memory, read by spead2's buffer
  reader in one pass (``capture.transports.BufferSource``): decode, placement, payload copy into
  the ring, delivery; nothing of a transport;
- ``inproc_queue``: spead2's in-process queue, prefilled: the same plus an eventfd and an epoll
  round per packet (that transport's cost, which the earlier figure of ~4 us included);
- ``pcap``: a pcap file from the page cache (libpcap's reads and the pcap reader);
- ``udp``: loopback UDP at the highest lossless paced rate (spead2's reader takes up to 64
  datagrams per ``recvmmsg`` by default and GRO where the kernel offers it; the kernel's copy
  counts here as the capture's system time): the capture's CPU per heap, the sender's CPU
  separately (``sender_cpu_s``, its spead2 thread and the Python thread driving it).

``input_gbps`` is the payload rate the buffer capture sustained on its two threads, and
``machine_read_gbps`` the machine's streaming read bandwidth on as many cores measured in the
same run (``bench.machine``): ``fraction_of_read_bandwidth`` is how close the ingest is
to the memory's limit (each payload byte is read once and written once into the ring).
``copy_floor_us_per_heap`` is what one core takes just to copy the same packets, in one
streaming pass, into faulted-in memory (libc's memcpy: non-temporal stores at this size, as
spead2's copy into the ring): the part of ``receiver_us_per_heap`` no placement code can save.

``spead2_bare`` is the peer: the same packets through the least a spead2 chunk receiver does
(katgpucbf's shape: the same stream settings, chunk size and non-temporal copy, placement by
arithmetic with no checks, no time policy and no counters, a consumer handing each chunk
straight back to spead2 instead of ring slots). Its CPU per heap is what any capture built on
spead2 costs on this machine; ``ours_over_spead2_bare`` (and ``receiver_over_spead2_bare``)
is what our time policy, counters, start-up handling and zero-copy rings add to it.

``--format meerkat`` measures MeerKAT CBF F-engine heaps (``capture/meerkat.py``; by default
nstream / 2 antennas x 16 channels x 256 spectra, 16 KiB heaps in two 8192-byte packets, sent
by ``sim/meerkat.py``) and our format in the same run, one after the other: ``formats`` holds
both results and ``meerkat_over_xengine`` the ratios of lossless rate (payload Gb/s, Msps)
and CPU per heap and per Msample.

``--bits 4`` sends ci4 packets (4.3 kB): compare ``msps`` (complex samples per second), which
carries twice the samples per byte. CPU time is less disturbed than wall time by other load on
a shared machine; compare figures of one run.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np
import scipy
import spead2
import spead2.recv
from numba import types
from results_file import add_option, emit
from spead2.numba import intp_to_voidptr
from spead2.recv.numba import chunk_place_data

from xengine_block.array import default_array
from xengine_block.bench.machine import machine_identity, machine_read_gbps
from xengine_block.capture.meerkat import (
    CAPTURE_FORMATS,
    DEFAULT_SPECTRA_PER_HEAP,
    MeerkatFormat,
)
from xengine_block.capture.placement import CapturePlan
from xengine_block.capture.receive import CaptureBlock
from xengine_block.capture.spead import (
    FREQUENCY,
    STREAM_ID,
    TIMESTAMP,
    PcapWriter,
    frame_datagrams,
    udp_sender,
)
from xengine_block.capture.transports import BufferSource, InprocSource, PcapSource, UdpSource
from xengine_block.console.argtypes import sample_bits
from xengine_block.geometry import Geometry
from xengine_block.runtime.memory import host_buffer
from xengine_block.runtime.pipeline import Pipeline
from xengine_block.runtime.ring import EndOfDataStop, ReadSequence
from xengine_block.sim.meerkat import MeerkatFEngines

SKY = {"sync_time": 0.0, "fs_hz": 40e3, "freq0_hz": 150e6, "chan_bw_hz": 40e3}
#: The capture's goal at 8640-byte heaps: CPU per heap at most this.
GOAL_US_PER_HEAP = 1.5
#: The first frame number the pre-built packets carry (their timestamps start there).
FIRST_FRAME = 8
#: CaptureBlock keywords of every capture measured (``--frames-per-chunk``).
CAPTURE_KW: dict[str, Any] = {}


def thread_cpu_s(tid: int) -> float:
    """CPU seconds of thread ``tid`` of this process (Linux per-thread CPU clock, ns)."""
    try:
        return time.clock_gettime((~tid << 3) | 6)  # MAKE_THREAD_CPUCLOCK(tid, SCHED)
    except OSError:
        return 0.0


def _tids() -> set[int]:
    return {int(t) for t in os.listdir("/proc/self/task")}


def drain(rings: list) -> threading.Thread:
    """A guaranteed reader of the capture's rings, releasing each gulp at once."""

    def run() -> None:
        try:
            iseqs = [ReadSequence(r, which="earliest", guarantee=True) for r in rings]
        except EndOfDataStop:
            return
        try:
            while True:
                gulp = iseqs[0].header["gulp_nframe"]
                offset = 0
                while True:
                    try:
                        spans = [s.acquire(offset, gulp) for s in iseqs]
                    except EndOfDataStop:
                        break
                    for s in spans:
                        s.release()
                    offset += gulp
                try:
                    for s in iseqs:
                        s.increment()
                except EndOfDataStop:
                    return
        finally:
            for s in iseqs:
                s.close()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def capture_run(wire: Any, make_source: Callable[[], Any], nheap: int,
                start: Callable[[], None] | None = None) -> dict[str, float]:
    """One capture through ``CaptureBlock`` into its rings: CPU of its consumer (this thread)
    and of spead2's threads from the moment it receives, wall time from the first frame."""
    me = threading.get_native_id()
    with Pipeline():
        block = CaptureBlock(make_source(), wire, default_array(wire.nstream // 2), **SKY,
                             idle_timeout=1.0 if start else None, **CAPTURE_KW)
    readers = drain(block.orings)
    marks: dict[str, Any] = {}
    # The threads there are before the stream exists (taken here: the capture may build its
    # stream before the watcher runs, and then spead2's threads would be missed)
    before = _tids()

    def watch() -> None:  # baseline once the stream exists; keep it (its threads) alive
        block.receiving.wait(60)
        while block._capture is None and not marks.get("done"):
            time.sleep(0.0005)
        marks["capture"] = block._capture
        marks["tids"] = _tids() - before - {threading.get_native_id()}
        marks["me0"] = thread_cpu_s(me)
        marks["rx0"] = sum(thread_cpu_s(t) for t in marks["tids"])
        marks["t0"] = time.perf_counter()
        if start is not None:
            start()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    with block.orings[0].begin_writing() as wf, block.orings[1].begin_writing() as wm:
        block.main([wf, wm])
    t1 = time.perf_counter()
    me1 = thread_cpu_s(me)
    marks["done"] = True
    watcher.join(60)
    rx1 = sum(thread_cpu_s(t) for t in marks["tids"])
    readers.join(10)
    counters = block.capture_counters()
    del marks["capture"]
    consumer, receiver = me1 - marks["me0"], rx1 - marks["rx0"]
    return {"cpu_s": consumer + receiver, "consumer_cpu_s": consumer,
            "receiver_cpu_s": receiver, "wall_s": t1 - marks["t0"],
            "heaps": counters["heaps"], "lost": nheap - counters["heaps"]}


def copy_floor_us(blob: bytes, nheap: int, repeats: int = 3) -> float:
    """CPU microseconds per heap of one streaming copy of ``blob`` into faulted-in memory
    (best of ``repeats``): the memory traffic a capture's receiver cannot avoid."""
    src = np.frombuffer(blob, np.uint8)
    dst = host_buffer(src.nbytes)[:src.nbytes]
    best = float("inf")
    for _ in range(repeats):
        t0 = time.thread_time()
        np.copyto(dst, src)
        best = min(best, time.thread_time() - t0)
    return best / nheap * 1e6


def source_cost(wire: Any, make_source: Callable[[], Any], nheap: int, repeats: int) -> dict:
    capture_run(wire, make_source, nheap)  # warm-up: the callback's compiled code, memory
    runs = []
    for _ in range(repeats):
        gc.collect()  # the last run's rings back in the memory pool, faulted in already
        runs.append(capture_run(wire, make_source, nheap))
    for r in runs:
        if r["lost"]:
            raise RuntimeError(f"the capture lost {r['lost']} of {nheap} heaps")
    us = sorted(r["cpu_s"] / nheap * 1e6 for r in runs)
    wall = sorted(r["wall_s"] for r in runs)
    mid = sorted(runs, key=lambda r: r["cpu_s"])[len(runs) // 2]
    return {"heaps": nheap, "cpu_us_per_heap": [round(u, 3) for u in us],
            "median_cpu_us_per_heap": round(us[len(us) // 2], 3),
            "receiver_us_per_heap": round(mid["receiver_cpu_s"] / nheap * 1e6, 3),
            "consumer_us_per_heap": round(mid["consumer_cpu_s"] / nheap * 1e6, 3),
            "consumer_us_per_chunk": round(mid["consumer_cpu_s"] / nheap * 1e6
                                           * CapturePlan(wire, **CAPTURE_KW).chunk_heaps, 1),
            "median_wall_s": round(wall[len(wall) // 2], 4)}


@numba.cfunc(types.void(types.CPointer(chunk_place_data), types.uintp,
                        types.CPointer(types.int64)), nopython=True)
def _bare_place(data_ptr, data_size, user):  # pragma: no cover - runs in spead2's thread
    """Place by arithmetic alone: no checks, no time policy, no counters (the peer's floor).
    ``user``: timestamp step, first frame, heaps per source, channels per heap, heaps per
    frame, frames per chunk, heap bytes."""
    data = numba.carray(data_ptr, 1)
    p = numba.carray(user, 7)
    items = numba.carray(intp_to_voidptr(data[0].items), 3, dtype=np.int64)
    frame = items[0] // p[0] - p[1]
    if frame < 0:
        return
    index = (frame % p[5]) * p[4] + items[1] * p[2] + items[2] // p[3] % p[2]
    data[0].chunk_id = frame // p[5]
    data[0].heap_index = index
    data[0].heap_offset = index * p[6]


def bare_spead2_cost(wire: Any, blob: bytes, nheap: int, repeats: int) -> dict:
    """The same packets through the least a spead2 chunk receiver can do, katgpucbf-style:
    the same stream settings, chunks and copy (non-temporal) as ours, placement by arithmetic
    (``_bare_place``), a consumer handing each chunk straight back. Its CPU per heap is what
    any spead2-based capture costs on this machine; ours over it is what our time policy,
    counters and rings add."""
    plan = CapturePlan(wire, **CAPTURE_KW)
    grid, k = plan.grid, plan.chunk_frames
    params = np.array([grid.timestamp_step, FIRST_FRAME, grid.ngroup, grid.nchan_heap,
                       plan.frame_heaps, k, plan.heap_bytes], np.int64)
    place = scipy.LowLevelCallable(_bare_place.ctypes,
                                   user_data=params.ctypes.data_as(ctypes.c_void_p),
                                   signature="void (void *, size_t, void *)")
    nchunk = plan.spead_chunks + 4
    chunks = [(host_buffer(plan.chunk_bytes)[:plan.chunk_bytes],
               np.zeros(plan.chunk_heaps, np.uint8)) for _ in range(nchunk)]
    runs = []
    for i in range(repeats + 1):  # the first: warm-up
        before = _tids()
        stream = spead2.recv.ChunkRingStream(
            spead2.ThreadPool(1), plan.stream_config(memcpy=spead2.MEMCPY_NONTEMPORAL),
            spead2.recv.ChunkStreamConfig(items=[TIMESTAMP.id, STREAM_ID.id, FREQUENCY.id],
                                          max_chunks=plan.spead_chunks, place=place),
            spead2.recv.ChunkRingbuffer(nchunk), spead2.recv.ChunkRingbuffer(nchunk))
        rx = _tids() - before
        for data, present in chunks:
            stream.add_free_chunk(spead2.recv.Chunk(present=present, data=data))
        me0, rx0 = time.thread_time(), sum(thread_cpu_s(t) for t in rx)
        stream.add_buffer_reader(blob)
        placed = 0
        for chunk in stream.data_ringbuffer:
            placed += int(np.count_nonzero(chunk.present))
            stream.add_free_chunk(chunk)
        consumer = time.thread_time() - me0
        receiver = sum(thread_cpu_s(t) for t in rx) - rx0
        stream.stop()
        if placed != nheap:
            raise RuntimeError(f"the bare spead2 receiver placed {placed} of {nheap} heaps")
        if i:
            runs.append((consumer + receiver, consumer, receiver))
    mid = sorted(runs)[len(runs) // 2]
    return {"cpu_us_per_heap": round(mid[0] / nheap * 1e6, 3),
            "receiver_us_per_heap": round(mid[2] / nheap * 1e6, 3),
            "consumer_us_per_heap": round(mid[1] / nheap * 1e6, 3)}


@dataclass
class Wire:
    """One wire format under test: what the capture takes and how the sender makes heaps."""

    name: str
    capture: Geometry | MeerkatFormat
    heap_bytes: int
    heaps_per_frame: int
    frame_spectra: int
    samples_per_heap: int  # complex samples (channels x spectra) of one stream's heap
    sender: Callable[[int, float], Any]  # (port, rate_gbps) -> .staging, .send_staged, .close
    datagrams: Callable[[int], list[bytes]]  # packets of frame f (same payload, new times)

    @property
    def frame_bytes(self) -> int:
        return self.heaps_per_frame * self.heap_bytes


def xengine_wire(g: Geometry) -> Wire:
    frame = np.random.default_rng(1).integers(-128, 128, (1, *g.frame_shape), dtype=np.int8)
    return Wire("xengine", g, g.payload_bytes, g.npackets_per_frame, g.nspectra_pkt,
                g.nchan_pkt * g.nspectra_pkt,
                lambda port, rate: udp_sender(g, port=port, rate_gbps=rate, batch=4),
                lambda f: [p[3] for p in frame_datagrams(
                    frame, g, (FIRST_FRAME + f) * g.nspectra_pkt,
                    cnt0=1 + f * g.npackets_per_frame)])


def meerkat_wire(fmt: MeerkatFormat) -> Wire:
    kw = {"n_ants": fmt.n_ants, "nchan": fmt.nchan, "spectra_per_heap": fmt.spectra_per_heap,
          "samples_between_spectra": fmt.samples_between_spectra}
    x = np.random.default_rng(1).integers(-128, 128, (fmt.nstream, fmt.nchan,
                                                      fmt.spectra_per_heap, 2), dtype=np.int8)
    engines = MeerkatFEngines(None, **kw)
    return Wire("meerkat", fmt, fmt.heap_bytes, fmt.n_ants, fmt.spectra_per_heap,
                fmt.nchan * fmt.spectra_per_heap * 2,  # one heap: both pols of an antenna
                lambda port, rate: MeerkatFEngines.udp("127.0.0.1", port, rate_gbps=rate,
                                                       batch=4, **kw),
                lambda f: [p for _, _, pk in engines.datagrams(
                    x, (FIRST_FRAME + f) * fmt.spectra_per_heap) for p in pk])


def udp_trial(w: Wire, rate_gbps: float, seconds: float) -> dict:
    """~``seconds`` of frames at ``rate_gbps`` from spead2's paced C++ sender to a capture on
    loopback: what arrives, and the capture's and the sender's CPU per heap."""
    source = UdpSource("127.0.0.1", 0)
    port = source.bind()
    before = _tids()
    sender = w.sender(port, rate_gbps)
    sender_tids = _tids() - before
    sender.staging[...] = np.random.default_rng(0).integers(-128, 128, sender.staging.shape,
                                                            dtype=np.int8)
    nframe = int(seconds * rate_gbps * 1e9 / (w.frame_bytes * 8))
    nframe = max(32, nframe - nframe % 8)
    nheap = nframe * w.heaps_per_frame
    times: dict[str, float] = {}

    def send() -> None:
        cpu0 = time.thread_time() + sum(thread_cpu_s(t) for t in sender_tids)
        times["t0"] = time.perf_counter()
        sender.send_staged(nframe, 0)  # frames (heap times), from spectrum 0
        times["t1"] = time.perf_counter()
        times["cpu"] = (time.thread_time() + sum(thread_cpu_s(t) for t in sender_tids)
                        - cpu0)
        sender.close()

    def start() -> None:
        threading.Thread(target=send, daemon=True).start()

    r = capture_run(w.capture, lambda: source, nheap, start=start)
    elapsed = times["t1"] - times["t0"]
    return {"rate_gbps_requested": rate_gbps, "heaps_sent": nheap, "heaps": r["heaps"],
            "lost": r["lost"], "send_s": round(elapsed, 3),
            "gbps": round(r["heaps"] * w.heap_bytes * 8 / elapsed / 1e9, 3),
            "heaps_per_s": round(r["heaps"] / elapsed),
            "cpu_us_per_heap": round(r["cpu_s"] / max(r["heaps"], 1) * 1e6, 3),
            "sender_cpu_s": round(times["cpu"], 3)}


def measure(w: Wire, args: argparse.Namespace) -> dict[str, Any]:
    """CPU per heap from each source, the memory-bandwidth ratio, the best lossless UDP rate."""
    t_start = time.perf_counter()
    pkts = [p for f in range(args.frames) for p in w.datagrams(f)]
    nheap = args.frames * w.heaps_per_frame
    blob = b"".join(pkts)
    sources: dict[str, dict] = {}
    sources["buffer"] = source_cost(w.capture, lambda: BufferSource(blob), nheap,
                                    args.repeats)

    def inproc() -> InprocSource:
        q = spead2.InprocQueue()
        for p in pkts:
            q.add_packet(p)
        q.stop()
        return InprocSource(q)

    sources["inproc_queue"] = source_cost(w.capture, inproc, nheap, args.repeats)
    pcap = f"/tmp/bench_capture_{os.getpid()}.pcap"
    try:
        with PcapWriter(pcap) as writer:
            for p in pkts:
                writer.send(p)
        with open(pcap, "rb") as f:  # into the page cache
            while f.read(1 << 24):
                pass
        sources["pcap"] = source_cost(w.capture, lambda: PcapSource(pcap), nheap,
                                      args.repeats)
    finally:
        os.unlink(pcap)
    buf = sources["buffer"]
    bare = bare_spead2_cost(w.capture, blob, nheap, args.repeats)
    floor = copy_floor_us(blob, nheap)
    input_gbps = nheap * w.heap_bytes / buf["median_wall_s"] / 1e9
    read_gbps, how = machine_read_gbps(2)
    med = buf["median_cpu_us_per_heap"]
    out: dict[str, Any] = {
        "heap_bytes": w.heap_bytes, "heaps_per_frame": w.heaps_per_frame,
        "chunk_frames": CapturePlan(w.capture, **CAPTURE_KW).chunk_frames,
        "cpu_us_per_heap": med, "cpu_ns_per_sample": round(med * 1e3 / w.samples_per_heap, 4),
        "cpu_us_per_heap_goal": GOAL_US_PER_HEAP, "sources": sources,
        "copy_floor_us_per_heap": round(floor, 3),
        "receiver_over_copy_floor": round(buf["receiver_us_per_heap"] / floor, 2),
        "spead2_bare": bare, "ours_over_spead2_bare": round(med / bare["cpu_us_per_heap"], 2),
        "receiver_over_spead2_bare": round(buf["receiver_us_per_heap"]
                                           / bare["receiver_us_per_heap"], 2),
        "input_gbps": round(input_gbps, 2), "machine_read_gbps": round(read_gbps, 2),
        "machine_read_how": how,
        "fraction_of_read_bandwidth": round(input_gbps / read_gbps, 3)}
    if args.udp:
        trials, best, lossy = [], None, 0
        for rate in args.rates:
            r = udp_trial(w, rate, args.seconds)
            trials.append(r)
            if r["lost"] == 0:
                best = r if best is None or r["gbps"] > best["gbps"] else best
            else:
                lossy += 1
                if lossy >= 2 or time.perf_counter() - t_start > 150:
                    break
        ref = best or min(trials, key=lambda t: t["lost"])
        sources["udp"] = {"cpu_us_per_heap": ref["cpu_us_per_heap"],
                          "sender_cpu_s": ref["sender_cpu_s"]}
        out.update({"gbps": ref["gbps"], "heaps_per_s": ref["heaps_per_s"], "lost": ref["lost"],
                    "msps": round(ref["heaps_per_s"] * w.samples_per_heap / 1e6, 1),
                    "best_lossless_rate_gbps": best["rate_gbps_requested"] if best else None,
                    "trials": trials})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nstream", type=int, default=256)
    ap.add_argument("--nchan", type=int, default=9)
    ap.add_argument("--bits", type=sample_bits, default=8,
                    help="bits per re/im part: 8 (ci8) or 4 (ci4)")
    ap.add_argument("--format", choices=CAPTURE_FORMATS, default="xengine",
                    help="meerkat: MeerKAT F-engine heaps, measured next to ours in one run")
    ap.add_argument("--meerkat-nchan", type=int, default=16,
                    help="meerkat: channels per heap (the substream)")
    ap.add_argument("--spectra-per-heap", type=int, default=DEFAULT_SPECTRA_PER_HEAP)
    ap.add_argument("--frames", type=int, default=120, help="frames per in-memory capture")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=1.0, help="data per UDP trial")
    ap.add_argument("--rates", type=float, nargs="+", default=[2, 4, 6, 8, 10, 12, 16, 24],
                    help="UDP send rates to try, Gb/s, ascending (stops after two lossy ones)")
    ap.add_argument("--no-udp", dest="udp", action="store_false")
    ap.add_argument("--frames-per-chunk", type=int, default=0,
                    help="frames per spead2 chunk (0: CapturePlan's default)")
    add_option(ap)
    args = ap.parse_args()
    CAPTURE_KW["frames_per_chunk"] = args.frames_per_chunk
    t_start = time.perf_counter()
    g = Geometry(nstream=args.nstream, nchan=args.nchan, npacket=8, sample_bits=args.bits)
    ours = measure(xengine_wire(g), args)
    out: dict[str, Any] = {
        "benchmark": "capture", "cpus": os.cpu_count(), "machine": machine_identity(),
        "geometry": {"nstream": g.nstream, "nchan": g.nchan, "payload_bytes": g.payload_bytes,
                     "sample_bits": g.sample_bits},
        **{k: v for k, v in ours.items() if k not in ("heap_bytes", "heaps_per_frame")}}
    if args.format == "meerkat":
        fmt = MeerkatFormat(args.nstream // 2, args.meerkat_nchan, 2 * args.meerkat_nchan,
                            args.spectra_per_heap)
        mk = measure(meerkat_wire(fmt), args)
        out["formats"] = {"xengine": ours, "meerkat": {
            "n_ants": fmt.n_ants, "nchan": fmt.nchan, "spectra_per_heap": fmt.spectra_per_heap,
            "packets_per_heap": fmt.packets_per_heap(), **mk}}
        ratios = {k: round(mk[k] / ours[k], 3) for k in ("cpu_us_per_heap", "cpu_ns_per_sample")}
        if args.udp:
            ratios.update({k: round(mk[k] / ours[k], 3) for k in ("gbps", "msps")})
        out["meerkat_over_xengine"] = ratios
    out["runtime_s"] = round(time.perf_counter() - t_start, 1)
    emit("bench_capture", out, args)


if __name__ == "__main__":
    main()
