"""Capture throughput over loopback UDP: the highest send rate received with zero loss.

spead2's C++ sender paces the seed geometry's heaps (256 streams x 9 channels, 8.7 kB packets)
to 127.0.0.1 at a series of rates; the capture (spead2 chunk stream + numba placement, and a
copy of every frame as CaptureBlock does into its ring) counts what arrives. Prints one JSON
object: ``gbps`` (payload Gb/s) and ``heaps_per_s`` at the best lossless rate, ``lost`` there
(0 unless no rate was lossless), and every trial. Shares the machine's cores with the sender.

``inproc``: the capture's own cost without the network, the process CPU time per heap (spead2's
receive thread + placement callback + the consumer) for heaps preloaded into an in-process
queue, several repeats (CPU time is less disturbed by other load on a shared machine than
wall time; compare medians of runs made one after the other).

``--bits 4`` sends ci4 packets (4.3 kB): ``msps`` (complex samples per second captured, all
streams and channels) is the number to compare with ci8, which carries half the samples per byte.
"""

from __future__ import annotations

import argparse
import json
import threading
import time

import numpy as np
import spead2

from xengine_block.capture.receive import Capture
from xengine_block.capture.sources import InprocSource, UdpSource
from xengine_block.capture.spead import frame_datagrams, udp_sender
from xengine_block.geometry import Geometry
from xengine_block.tools.argtypes import sample_bits


def trial(g: Geometry, rate_gbps: float, seconds: float) -> dict:
    """Send ~``seconds`` of frames at ``rate_gbps`` (0: unpaced) and count what arrives."""
    source = UdpSource("127.0.0.1", 0)
    source.bind()
    cap = Capture(source, g, idle_timeout=1.0)
    sender = udp_sender(g, port=source.port, rate_gbps=rate_gbps, batch=4)
    sender.staging[...] = np.random.default_rng(0).integers(-128, 128, sender.staging.shape,
                                                            dtype=np.int8)
    frame_bits = g.frame_bytes * 8
    nframe = int(seconds * (rate_gbps or 10.0) * 1e9 / frame_bits)
    nframe = max(g.npacket * 4, nframe - nframe % g.npacket)
    times: dict[str, float] = {}

    def send() -> None:
        time.sleep(0.2)  # the receiver is waiting in its loop
        times["t0"] = time.perf_counter()
        sender.send_staged(nframe, time_tag=g.npacket * g.nspectra_pkt)
        times["t1"] = time.perf_counter()
        sender.close()

    ring = np.empty((8, *g.frame_shape), np.int8)  # stands in for the output ring
    thread = threading.Thread(target=send)
    thread.start()
    nout = 0
    for f in cap:
        ring[nout % len(ring)] = f.frame
        nout += 1
    thread.join()
    c = cap.counters()
    sent = nframe * g.npackets_per_frame
    elapsed = times["t1"] - times["t0"]
    return {"rate_gbps_requested": rate_gbps, "frames_sent": nframe, "heaps_sent": sent,
            "heaps": c["heaps"], "lost": sent - c["heaps"], "send_s": round(elapsed, 3),
            "gbps": round(c["heaps"] * g.payload_bytes * 8 / elapsed / 1e9, 3),
            "heaps_per_s": round(c["heaps"] / elapsed), "counters": c}


def inproc_cpu(g: Geometry, nframe: int, repeats: int) -> dict:
    """CPU microseconds per heap to capture ``nframe`` frames from an in-process queue."""
    frame = np.random.default_rng(1).integers(-128, 128, (1, *g.frame_shape), dtype=np.int8)
    t0 = g.npacket * g.nspectra_pkt
    step = g.npackets_per_frame

    def once() -> float:
        queue = spead2.InprocQueue()
        for f in range(nframe):  # same payload, new timestamps and heap counters
            for p in frame_datagrams(frame, g, t0 + f * g.nspectra_pkt, cnt0=1 + f * step):
                queue.add_packet(p[3])
        queue.stop()
        cap = Capture(InprocSource(queue), g)
        c0 = time.process_time()
        for _ in cap:
            pass
        cpu = time.process_time() - c0
        assert cap.counters()["heaps"] == nframe * step, cap.counters()
        return cpu / (nframe * step) * 1e6

    once()  # compile and warm up
    runs = sorted(once() for _ in range(repeats))
    return {"frames": nframe, "heaps": nframe * step,
            "cpu_us_per_heap": [round(r, 3) for r in runs],
            "median_cpu_us_per_heap": round(runs[len(runs) // 2], 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nstream", type=int, default=256)
    ap.add_argument("--nchan", type=int, default=9)
    ap.add_argument("--bits", type=sample_bits, default=8,
                    help="bits per re/im part: 8 (ci8) or 4 (ci4)")
    ap.add_argument("--seconds", type=float, default=1.5, help="data per trial")
    ap.add_argument("--rates", type=float, nargs="+", default=[1, 2, 4, 6, 8, 10, 12, 16, 24],
                    help="send rates to try, Gb/s, ascending (stops after two lossy ones)")
    ap.add_argument("--inproc-frames", type=int, default=100,
                    help="frames per in-process CPU-cost repeat")
    ap.add_argument("--inproc-repeats", type=int, default=7)
    args = ap.parse_args()
    g = Geometry(nstream=args.nstream, nchan=args.nchan, npacket=8, sample_bits=args.bits)
    trials, best, lossy = [], None, 0
    t_start = time.perf_counter()
    for rate in args.rates:
        r = trial(g, rate, args.seconds)
        trials.append({k: v for k, v in r.items() if k != "counters"})
        if r["lost"] == 0:
            best = r if best is None or r["gbps"] > best["gbps"] else best
        else:
            lossy += 1
            if lossy >= 2 or time.perf_counter() - t_start > 90:
                break
    ref = best or min(trials, key=lambda t: t["lost"])
    print(json.dumps({
        "benchmark": "capture_loopback_udp",
        "geometry": {"nstream": g.nstream, "nchan": g.nchan, "payload_bytes": g.payload_bytes,
                     "sample_bits": g.sample_bits},
        "gbps": ref["gbps"], "heaps_per_s": ref["heaps_per_s"], "lost": ref["lost"],
        "msps": round(ref["heaps_per_s"] * g.nchan_pkt * g.nspectra_pkt / 1e6, 1),
        "best_lossless_rate_gbps": best["rate_gbps_requested"] if best else None,
        "trials": trials,
        "inproc": inproc_cpu(g, args.inproc_frames, args.inproc_repeats),
        "runtime_s": round(time.perf_counter() - t_start, 1),
    }, indent=1))


if __name__ == "__main__":
    main()
