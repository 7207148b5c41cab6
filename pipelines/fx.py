#!/usr/bin/env python3
"""FX correlator end to end: simulated F-engines -> SPEAD -> capture -> X-engine -> integrate ->
UVH5 + quick-look PNG, in a new output directory.

    python pipelines/fx.py                      # 128 MWA tiles (256 streams), 9 channels
    python pipelines/fx.py --nant 16 --dumps 4 --transport inproc --backend cpu
    python pipelines/fx.py --record packets.pcap   # also keep every packet sent

The F-engines run in a thread of this process and send over UDP loopback (or an in-process
queue, or a pcap file that the capture then replays). Everything after the capture is the same
chain ``xengine reprocess`` uses on recordings.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
import time
from pathlib import Path

from xengine_block.array import ArrayDescription, default_array
from xengine_block.backends import BackendUnavailable, choose_backend
from xengine_block.capture import InprocSource, PcapSource, UdpSource
from xengine_block.chain import RUNTIMES, correlator_chain, runtime
from xengine_block.fengine import FEngineSimulator, PointSource, icrs_at_altaz
from xengine_block.geometry import Geometry
from xengine_block.recording import write_metadata
from xengine_block.spead import inproc_sender, pcap_sender, udp_sender

log = logging.getLogger("fx")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--nant", type=int, default=128, help="antennas (2 streams each)")
    p.add_argument("--array", type=Path, help="array TOML file (default: MWA 128-tile layout)")
    p.add_argument("--nchan", type=int, default=9, help="channels (multiple of 9)")
    p.add_argument("--npacket", type=int, default=136, help="packets per X-engine frame (P)")
    p.add_argument("--ninteg", type=int, default=1, help="X-engine frames per dump")
    p.add_argument("--dumps", type=int, default=3, help="dumps (integrations) to produce")
    p.add_argument("--backend", default="auto", help="correlator backend or 'auto'")
    p.add_argument("--transport", choices=("udp", "inproc", "pcap"), default="udp")
    p.add_argument("--address", default="127.0.0.1", help="UDP address (loopback default)")
    p.add_argument("--port", type=int, default=0, help="UDP port (0: any free port)")
    p.add_argument("--rate-gbps", type=float, default=1.0, help="UDP send rate (0: unpaced)")
    p.add_argument("--record", type=Path, help="also write the packets sent to this pcap")
    p.add_argument("--out", type=Path, help="output directory (default: new fx_out/run-*)")
    p.add_argument("--fs-hz", type=float, default=40e3, help="spectra per second per channel")
    p.add_argument("--freq0-hz", type=float, default=150e6, help="first channel's frequency")
    p.add_argument("--source-alt-az", type=float, nargs=2, default=(60.0, 120.0),
                   metavar=("ALT", "AZ"), help="point source position at the start (deg)")
    p.add_argument("--noise", type=float, default=1.0, help="receiver noise rms per source rms")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--monitor", type=float, default=5.0, help="like_top interval (0: off)")
    p.add_argument("--runtime", choices=RUNTIMES, default="ours",
                   help="pipeline runtime: ours, or real Bifrost (docs/bifrost.md)")
    p.add_argument("-v", "--verbose", action="store_true")
    return p.parse_args(argv)


def new_output_dir(base: Path = Path("fx_out")) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for i in range(1000):
        d = base / (f"run-{stamp}" + (f"-{i}" if i else ""))
        try:
            d.mkdir(parents=True)
            return d
        except FileExistsError:
            continue
    raise RuntimeError(f"could not create a new output directory under {base}")


def send_all(sim: FEngineSimulator, senders: list, nframe: int, chunk: int,
             errors: list[BaseException], ready: threading.Event | None = None) -> None:
    """F-engine thread: simulate and send ``nframe`` packet times, then end the streams.

    ``ready``: wait for it first (the capture receiving), up to a minute.
    """
    g = sim.geometry
    try:
        if ready is not None and not ready.wait(60):
            raise TimeoutError("the capture did not start receiving within 60 s")
        for f0 in range(0, nframe, chunk):
            n = min(chunk, nframe - f0)
            frames = sim.frames(f0 * g.nspectra_pkt, n)
            for s in senders:
                s.send_frames(frames, f0 * g.nspectra_pkt)
    except BaseException as exc:  # reported by the main thread
        errors.append(exc)
    finally:
        for s in senders:
            s.close()


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    logging.basicConfig(level=logging.INFO if a.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    # Bad configuration stops here, before any thread or file exists.
    try:
        array = ArrayDescription.from_toml(a.array) if a.array else default_array(a.nant)
        g = Geometry(nstream=array.nstream, nchan=a.nchan, npacket=a.npacket)
        if a.dumps < 1 or a.ninteg < 1:
            raise ValueError("--dumps and --ninteg must be >= 1")
        choose_backend(a.backend, g)  # an unknown or unusable backend stops here
        rt = runtime(a.runtime)
    except (ValueError, OSError, BackendUnavailable, ImportError) as exc:
        print(f"fx: bad configuration: {exc}", file=sys.stderr)
        return 2
    out = a.out or new_output_dir()
    out.mkdir(parents=True, exist_ok=True)
    nframe = a.dumps * a.ninteg * g.npacket
    sync = float(int(time.time()))
    chan_bw = a.fs_hz  # critically sampled filterbank
    sky = {"sync_time": sync, "fs_hz": a.fs_hz, "freq0_hz": a.freq0_hz, "chan_bw_hz": chan_bw}
    sim = FEngineSimulator(array, g, **sky, sources=[PointSource.from_skycoord(
                               icrs_at_altaz(array, sync, *a.source_alt_az))],
                           noise_sigma=a.noise, gain=8.0, seed=a.seed, direction_interval=8)
    print(f"fx: {array.nant} antennas ({g.nstream} streams) x {g.nchan} channels, "
          f"P={g.npacket}, {a.dumps} dumps of {a.ninteg} X-engine frames = {nframe} packet "
          f"times ({nframe * g.frame_bytes / 1e9:.2f} GB of packets), transport {a.transport}")
    print(f"fx: output in {out}")

    senders = []
    replay = a.transport == "pcap"  # write the pcap first, then replay it through the capture
    if a.record:
        a.record.parent.mkdir(parents=True, exist_ok=True)
        write_metadata(a.record, array, g, **sky)
        senders.append(pcap_sender(g, a.record))
    if a.transport == "udp":
        source = UdpSource(a.address, a.port)
        port = source.bind()  # before the F-engines start sending
        senders.append(udp_sender(g, address=a.address, port=port, rate_gbps=a.rate_gbps))
    elif a.transport == "inproc":
        import spead2
        queue = spead2.InprocQueue()
        source = InprocSource(queue)
        senders.append(inproc_sender(g, queue))
    else:
        pcap = out / "packets.pcap"
        source = PcapSource(str(pcap))
        senders.append(pcap_sender(g, pcap))

    errors: list[BaseException] = []
    t0 = time.monotonic()
    if replay:
        send_all(sim, senders, nframe, 4, errors)
    with rt.Pipeline(monitor_interval=a.monitor or None) as pipeline:
        capture = rt.CaptureBlock(source, g, array, **sky, start_timestamp=0,
                                  idle_timeout=10.0 if a.transport == "udp" else None)
        chain = correlator_chain(capture, directory=out, backend=a.backend, ninteg=a.ninteg,
                                 geometry=g, runtime_name=a.runtime)
        fengine = threading.Thread(target=send_all, name="fengines", daemon=True,
                                   args=(sim, senders, nframe, 4, errors, capture.receiving))
        if not replay:
            fengine.start()
        pipeline.run()
    if fengine.is_alive():
        fengine.join(timeout=30)
    elapsed = time.monotonic() - t0
    if errors:
        raise errors[0]

    counters = capture.capture_counters()
    summary = {
        "elapsed_s": round(elapsed, 2),
        "backend": chain.xengine.backend.name if chain.xengine.backend else None,
        "backend_reason": getattr(chain.xengine.backend, "choice_reason", ""),
        "xengine_msps": round(chain.xengine_msps(), 3),
        "dumps_written": chain.writer.dumps_written,
        "files": [str(f) for f in chain.writer.files],
        "quicklook": [str(f) for f in chain.quicklook.images] if chain.quicklook else [],
        "capture": counters,
        "blocks": {b.name: {k: round(v, 3) for k, v in b.perf.items()}
                   for b in pipeline.blocks},
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps({k: summary[k] for k in ("elapsed_s", "backend", "xengine_msps",
                                              "dumps_written", "files", "quicklook")}, indent=2))
    print("capture:", " ".join(f"{k}={v}" for k, v in counters.items()))
    if chain.writer.dumps_written != a.dumps:
        print(f"fx: expected {a.dumps} dumps, wrote {chain.writer.dumps_written}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
