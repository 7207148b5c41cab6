"""The signal display's cost to the correlator: the live chain (capture -> X-engine -> integrate
-> UVH5 writer) on pre-generated packets read from memory, as fast as it goes, with the display
off and on (its block reading the integrator's rings, its server, and ``--clients`` browsers
polling the API as the page does), timed in alternation; prints one JSON object.

    python benchmarks/bench_display.py [--nstream 256] [--dumps 24] [--clients 3]

Each client is a thread doing what the page does once a second, on the second (``--poll-s``):
the status,
then for the latest dump the matrix, the selected baseline, its waterfall of the last 32 dumps,
the autos and the health (six requests over HTTP); the clients run in a process of their own,
as browsers do. ``ratio``: the chain's sustained rate with the display on over off (best of
``--repeat`` rounds of each, after a warm-up run; every round's in ``ratios``); the display
must keep >= 0.95. Rates run from the capture's first packet to the last dump on disk
(``first_to_last_dump_msps`` leaves the first dump out). ``requests``: the clients' requests
answered, by status; ``server_busy_s``, the API's time answering them (wall time in its
threads), and ``clients_cpu_s``, the clients' own CPU. ``median_ratio``: the median of the
rounds' ratios (each round's on over the off run just before it), steadier than the best of
each when the machine is loaded. The chain here runs several times faster than real time, so
every poll finds a new dump: the answers are computed at each poll (once for the three
clients, who ask together). The clients share the machine's cores with the chain (browsers
would not). What it costs: the block's copy and row pass per dump (the UVH5 writer's own),
and the server's answers (numpy and JSON, under the GIL the pipeline's Python threads share).
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing
import tempfile
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import numpy as np
from dump_clock import DumpClock
from results_file import add_option, emit

from xengine_block.array import default_array
from xengine_block.blocks.chain import correlator_chain
from xengine_block.capture.receive import CaptureBlock
from xengine_block.capture.spead import repeated_frame_datagrams
from xengine_block.capture.transports import BufferSource
from xengine_block.display.live import DisplayBlock, LiveDumps
from xengine_block.display.server import DisplayServer
from xengine_block.geometry import Geometry
from xengine_block.runtime.pipeline import Pipeline, frozen_heap

SKY = {"sync_time": 1.7e9, "fs_hz": 40e3, "freq0_hz": 150e6, "chan_bw_hz": 40e3}


def poll(url: str, stop: Any, period: float, counts: Any) -> None:
    """One browser: the page's requests, every ``period`` seconds, until ``stop``."""
    def get(path: str) -> dict | None:
        try:
            with urllib.request.urlopen(url + path, timeout=10) as r:
                counts[r.status] += 1
                body = r.read()
                return json.loads(body) if path.startswith("api/v1/status") else None
        except urllib.error.HTTPError as exc:
            counts[exc.code] += 1
        except OSError:
            counts["error"] += 1
        return None

    while not stop.is_set():
        t0 = time.monotonic()
        status = get("api/v1/status")
        if status and status.get("dumps"):
            a = status["antennas"]
            pair = f"ant1={a[0]}&ant2={a[1]}&pol=xx"
            for q in ("matrix?pol=xx&quantity=coherence", f"baseline?{pair}",
                      f"waterfall?{pair}&last=32", "autos", "health"):
                get(f"api/v1/{q}{'&' if '?' in q else '?'}dump=-1")
        # on the period's boundary of the clock, as the page polls on the second
        stop.wait(max(0.0, period - time.time() % period) if time.monotonic() - t0 < period
                  else 0.0)


def browsers(url: str, clients: int, period: float, stop: Any, counts: Any,
             ready: Any) -> None:
    """``clients`` browsers in a process of their own (as browsers are: parsing the answers
    is theirs, not the service's), until ``stop`` is set."""
    local: collections.Counter = collections.Counter()
    threads = [threading.Thread(target=poll, args=(url, stop, period, local), daemon=True)
               for _ in range(clients)]
    for t in threads:
        t.start()
    ready.set()
    for t in threads:
        t.join()
    counts.update({str(k): v for k, v in local.items()})
    counts["cpu_s"] = time.process_time()  # the browsers' own CPU (not the service's)


def run(g: Geometry, data: list, ndump: int, display: bool, clients: int, poll_s: float,
        backend: str) -> dict:
    """One run of the chain; with ``display``, the display and its clients beside it."""
    ctx = multiprocessing.get_context("spawn")
    stop = ctx.Event()
    counts = ctx.Manager().dict() if display else {}
    clients_proc = None
    server = None
    busy: list[float] = []
    with tempfile.TemporaryDirectory() as tmp, Pipeline() as pipeline:
        capture = CaptureBlock(BufferSource(data), g, default_array(g.nstream // 2), **SKY,
                               start_timestamp=0)
        chain = correlator_chain(capture, directory=tmp, backend=backend, quicklook=False,
                                 geometry=g)
        store = None
        if display:
            store = LiveDumps()
            DisplayBlock(chain.integrate, store=store, name="display")
            server = DisplayServer(store)
            handle = server.api.handle

            def timed(path: str, query: str) -> tuple[int, bytes]:  # the server's busy time
                t = time.perf_counter()
                try:
                    return handle(path, query)
                finally:
                    busy.append(time.perf_counter() - t)
            server.api.handle = timed
            ready = ctx.Event()
            clients_proc = ctx.Process(target=browsers,
                                       args=(server.url, clients, poll_s, stop, counts, ready))
            clients_proc.start()
            ready.wait(60)  # started (imports done) before the chain is
        clock = DumpClock(capture, chain.writer, ndump).begin()
        with frozen_heap():
            pipeline.run()
        clock.finish()
        stamps = ([clock.start] if clock.start is not None else []) + clock.stamps
        stop.set()
        if clients_proc is not None:
            clients_proc.join(30)
        if server is not None:
            server.close()
        written = chain.writer.dumps_written
    per_dump = g.npacket * g.nspectra_pkt * g.nchan
    whole = stamps[-1] - stamps[0] if len(stamps) > 1 else float("inf")
    steady = stamps[-1] - stamps[1] if len(stamps) > 2 else float("inf")
    return {"msps": written * per_dump / whole / 1e6,
            "first_to_last_dump_msps": (written - 1) * per_dump / steady / 1e6,
            "run_s": round(whole, 3),
            "dumps_written": written, "dumps_expected": ndump,
            "display_dumps": store.count()[1] if store else None,
            "display_lost": sum(store.dump(i).lost for i in range(*store.count()))
            if store else None,
            "requests": {k: v for k, v in sorted(dict(counts).items()) if k != "cpu_s"},
            "clients_cpu_s": round(dict(counts).get("cpu_s", 0.0), 3),
            "server_busy_s": round(sum(busy), 3)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_option(p)
    p.add_argument("--nstream", type=int, default=256)
    p.add_argument("--nchan", type=int, default=9)
    p.add_argument("--npacket", type=int, default=136)
    p.add_argument("--dumps", type=int, default=24, help="dumps of one X-engine frame each")
    p.add_argument("--clients", type=int, default=3)
    p.add_argument("--poll-s", type=float, default=1.0, help="each client's polling period")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--backend", default="auto")
    a = p.parse_args()
    g = Geometry(nstream=a.nstream, nchan=a.nchan, npacket=a.npacket)
    nframe = a.dumps * g.npacket
    frame = np.random.default_rng(0).integers(-128, 128, g.frame_shape, dtype=np.int8)
    data = repeated_frame_datagrams(frame, g, nframe)
    rounds: dict[str, list[dict]] = {"off": [], "on": []}
    run(g, data, a.dumps, True, a.clients, a.poll_s, a.backend)  # warm-up: backend, caches
    for _ in range(a.repeat):
        for mode in ("off", "on"):
            rounds[mode].append(run(g, data, a.dumps, mode == "on", a.clients, a.poll_s,
                                    a.backend))
    best = {m: max(rounds[m], key=lambda r: r["msps"]) for m in rounds}
    ratio = best["on"]["msps"] / best["off"]["msps"]
    ratios = [on["msps"] / off["msps"] for on, off in zip(rounds["on"], rounds["off"],
                                                         strict=True)]
    result = {"S": g.nstream, "nchan": g.nchan, "npacket": g.npacket, "dumps": a.dumps,
              "clients": a.clients, "poll_s": a.poll_s, "backend": a.backend,
              "display_off": best["off"], "display_on": best["on"], "ratio": ratio,
              "ratios": ratios, "median_ratio": float(np.median(ratios)),
              "meets_0_95": ratio >= 0.95}
    emit("bench_display", result, a, indent=2)


if __name__ == "__main__":
    main()
