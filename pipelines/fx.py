#!/usr/bin/env python3
"""FX correlator end to end: simulated F-engines -> SPEAD -> capture -> X-engine -> integrate ->
UVH5 + quick-look PNG, in a new output directory.

    python pipelines/fx.py                      # 128 MWA tiles (256 streams), 9 channels
    python pipelines/fx.py --nant 16 --dumps 4 --transport inproc --backend cpu
    python pipelines/fx.py --record packets.pcap   # also keep every packet sent
    python pipelines/fx.py --xengines 3 --nchan 27 --record band.pcap  # 3 instances, recorded
    python pipelines/fx.py --bits 4             # 4-bit (ci4) F-engines: half the packet bytes
    python pipelines/fx.py --format meerkat --nant 8 --nchan 16   # MeerKAT CBF F-engine heaps

The F-engines run in a thread of this process and send over UDP loopback (or an in-process
queue, or a pcap file that the capture then replays). Everything after the capture is the same
chain ``xengine reprocess`` uses on recordings.

A bad option stops the script with one line naming it (exit 2) before anything is created: every
value is checked, the UDP port bound, and only then are directories made. SIGINT or SIGTERM
(Ctrl-C) ends the run normally: the F-engines stop, the files are closed, the summary says which
signal stopped it, and the exit status is 0. Further signals are absorbed.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from xengine_block.array import ArrayDescription
from xengine_block.backends import BackendUnavailable, choose_backend
from xengine_block.blocks.chain import RUNTIMES, Flagging, correlator_chain, runtime
from xengine_block.capture.meerkat import (
    CAPTURE_FORMATS,
    DEFAULT_SPECTRA_PER_HEAP,
    FormatError,
    MeerkatFormat,
)
from xengine_block.capture.recording import finish_metadata, write_metadata
from xengine_block.capture.spead import inproc_sender, pcap_sender, udp_sender
from xengine_block.capture.transports import InprocSource, PcapSource, Source, UdpSource
from xengine_block.console import argtypes as at
from xengine_block.console.argtypes import UsageError, usage_errors
from xengine_block.geometry import Geometry
from xengine_block.health.rfi import parse_rfi
from xengine_block.runtime.pipeline import PipelineError, frozen_heap
from xengine_block.service.instances import channel_split
from xengine_block.service.scaleout import run_scaleout
from xengine_block.sim.faults import parse_fault, parse_rfi_signal
from xengine_block.sim.fengine import FEngineSimulator, PointSource, icrs_at_altaz
from xengine_block.sim.meerkat import FramesToHeaps, MeerkatFEngines

log = logging.getLogger("fx")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter,
                    argparse.RawDescriptionHelpFormatter):
    """Defaults shown; the description (the summary and the examples) kept as written."""


def _parsed(parse: Any) -> Any:
    """An argparse type from a parser raising ValueError (one line naming the value)."""
    def arg(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    arg.__name__ = parse.__name__
    return arg


_fault_arg = _parsed(parse_fault)
_rfi_signal_arg = _parsed(parse_rfi_signal)
_rfi_arg = _parsed(lambda text: parse_rfi(text) and text)


def build_parser() -> argparse.ArgumentParser:
    p = at.ArgumentParser(prog="fx.py", description="\n\n".join(__doc__.split("\n\n")[:2]),
                          formatter_class=HelpFormatter)
    p.add_argument("--nant", type=at.positive_int, default=128,
                   help="antennas (2 streams each)")
    p.add_argument("--array", type=at.input_file,
                   help="array TOML file (default: MWA 128-tile layout)")
    p.add_argument("--nchan", type=at.positive_int, default=9, help="channels (multiple of 9)")
    p.add_argument("--npacket", type=at.positive_int, default=136,
                   help="packets per X-engine frame (P)")
    at.add_sample_format_args(p)
    p.add_argument("--ninteg", type=at.positive_int, default=1, help="X-engine frames per dump")
    p.add_argument("--integration-spectra", type=at.positive_int,
                   help="instead of --ninteg: spectra per dump, whole heaps (480 spectra; "
                        "meerkat: --spectra-per-heap); meerkat default: the whole heaps "
                        "nearest ninteg * P * 480")
    p.add_argument("--format", choices=CAPTURE_FORMATS, default="xengine",
                   help="F-engine packets: ours, or MeerKAT CBF feng_raw heaps (simulated "
                        "F-engines from the ICD, sim/meerkat.py; docs/capture.md)")
    p.add_argument("--spectra-per-heap", type=at.positive_int,
                   default=DEFAULT_SPECTRA_PER_HEAP, help="meerkat: spectra per F-engine heap")
    p.add_argument("--dumps", type=at.positive_int, default=3,
                   help="dumps (integrations) to produce")
    p.add_argument("--backend", type=at.backend_name, default="auto",
                   help="correlator backend or 'auto'")
    p.add_argument("--transport", choices=("udp", "inproc", "pcap"), default="udp")
    p.add_argument("--address", type=at.ipv4_address, default="127.0.0.1",
                   help="UDP address (loopback default)")
    p.add_argument("--port", type=at.port, default=0, help="UDP port (0: any free port)")
    p.add_argument("--rate-gbps", type=at.nonnegative_number, default=1.0,
                   help="UDP send rate (0: unpaced)")
    p.add_argument("--record", type=at.recording_file,
                   help="also write the packets sent to this pcap (and its .json sidecar); "
                        "with --xengines, every instance's channel group in one full-band "
                        "recording, which 'xengine reprocess' turns into the combined "
                        "visibilities")
    p.add_argument("--out", type=at.output_dir,
                   help="output directory (default: new fx_out/run-*)")
    p.add_argument("--ms", action="store_true",
                   help="also write a Measurement Set (NAME.ms beside NAME.uvh5, as the dumps "
                        "come; with --xengines, of each combined file; needs python-casacore, "
                        "the 'ms' extra), phased to --phase-centre")
    p.add_argument("--phase-centre", type=at.phase_centre, default="zenith",
                   help="the Measurement Set's phase centre: 'zenith' (at the first dump) or "
                        "'RA,DEC' in degrees (ICRS)")
    p.add_argument("--fs-hz", type=at.positive_number, default=40e3,
                   help="spectra per second per channel")
    p.add_argument("--freq0-hz", type=at.positive_number, default=150e6,
                   help="first channel's frequency")
    p.add_argument("--source-alt-az", type=at.number(), nargs=2, default=(60.0, 120.0),
                   metavar=("ALT", "AZ"), help="point source position at the start (deg)")
    p.add_argument("--noise", type=at.nonnegative_number, default=1.0,
                   help="receiver noise rms per source rms")
    p.add_argument("--seed", type=at.seed, default=1)
    p.add_argument("--sync-time", type=at.positive_number,
                   help="F-engine sync time, unix s (default: now)")
    p.add_argument("--xengines", type=at.nonnegative_int, default=0,
                   help="run N 'xengine correlate' processes, one channel group each (UDP), "
                        "and join their files with 'xengine combine' (0: this process)")
    p.add_argument("--monitor", type=at.nonnegative_number, default=5.0,
                   help="like_top interval (0: off)")
    p.add_argument("--fault", type=_fault_arg, action="append", default=[],
                   metavar="KIND:ANT:POL[:START[:STOP]]",
                   help="inject an input fault (dead, stuck, saturated, decorrelated) into "
                        "antenna index ANT, pol x or y, from spectrum START to STOP; repeat "
                        "for more (docs/flagging.md)")
    p.add_argument("--inject-rfi", type=_rfi_signal_arg, action="append", default=[],
                   metavar="narrowband:CHAN:AMP[:START:STOP[:PERIOD]]|broadband:START:STOP:AMP",
                   help="inject RFI every antenna hears, AMP in noise rms: a tone in channel "
                        "CHAN (in spectra START to STOP, on half of every PERIOD), or a "
                        "broadband burst; repeat for more")
    p.add_argument("--flag-inputs", action="store_true",
                   help="judge every input in every dump and flag the baselines of those "
                        "judged bad (docs/flagging.md); the summary lists them")
    p.add_argument("--rfi", type=_rfi_arg, metavar="aoflagger[:STRATEGY.lua]",
                   help="flag RFI with AOFlagger over a sliding window of dumps")
    p.add_argument("--runtime", choices=RUNTIMES, default="ours",
                   help="pipeline runtime: ours, or real Bifrost (docs/bifrost.md)")
    p.add_argument("-v", "--verbose", action="store_true")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def check_config(a: argparse.Namespace) -> tuple[ArrayDescription, Geometry, Any]:
    """Everything that needs several options or a file; UsageError names the option."""
    if a.format == "meerkat":
        array, g = meerkat_config(a)
    else:
        array, g = at.array_geometry(a)
        if a.integration_spectra is not None and a.integration_spectra % g.nspectra_pkt:
            raise UsageError("--integration-spectra", f"{a.integration_spectra} is not a "
                                                      f"whole number of 480-spectrum packets")
    alt, _az = a.source_alt_az
    if not -90.0 <= alt <= 90.0:
        raise UsageError("--source-alt-az", f"ALT must be in [-90, 90] degrees, got {alt:g}")
    if a.ms:
        problem = at.measurement_sets_available()
        if problem:
            raise UsageError("--ms", problem)
    if a.xengines:
        if a.transport != "udp":
            raise UsageError("--xengines", "runs over UDP only (the instances are processes "
                                           "with their own sockets)")
        try:
            channel_split(g.nchan, g.nchan_pkt, a.xengines)
        except ValueError as exc:
            raise UsageError("--xengines", str(exc)) from None
    try:
        choose_backend(a.backend, g)  # an unusable backend stops here
    except BackendUnavailable as exc:
        raise UsageError("--backend", str(exc)) from None
    try:
        rt = runtime(a.runtime)
    except ImportError as exc:
        raise UsageError("--runtime", f"cannot use {a.runtime}: {exc} (docs/bifrost.md)") from None
    if a.out is None:  # the default run-* directory goes under fx_out
        try:
            at.output_dir("fx_out")
        except argparse.ArgumentTypeError as exc:
            raise UsageError("--out", f"default fx_out/run-*: {exc}") from None
    return array, g, rt


def meerkat_config(a: argparse.Namespace) -> tuple[ArrayDescription, Geometry]:
    """--format meerkat: the array, the simulator's geometry (any channel count), and
    ``a.meerkat`` (the heaps) and ``a.integration_spectra`` (whole heaps) set."""
    for bad, why in (("--xengines", a.xengines), ("--record", a.record),
                     ("--bits", a.bits != 8), ("--transport", a.transport == "pcap")):
        if why:
            raise UsageError(bad, "is not available with --format meerkat (8-bit heaps over "
                                  "udp or inproc, one X-engine)")
    array = at.array_of(a)
    g = at.geometry({"nstream": "--nant", "nchan": "--nchan", "npacket": "--npacket"},
                    nstream=array.nstream, nchan=a.nchan, nchan_pkt=1, npacket=a.npacket)
    try:
        a.meerkat = MeerkatFormat(array.nant, a.nchan, 2 * a.nchan, a.spectra_per_heap)
    except FormatError as exc:
        raise UsageError(f"--{exc.field.replace('_', '-')}", str(exc)) from None
    spb = a.spectra_per_heap
    n = a.integration_spectra or max(1, round(a.ninteg * g.npacket * 480 / spb)) * spb
    if n % spb or n > 1 << 30:
        raise UsageError("--integration-spectra", f"{n} is not a whole number of heaps of "
                                                  f"{spb} spectra")
    a.integration_spectra = n
    return array, g


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
             errors: list[BaseException], ready: threading.Event | None = None,
             stop: threading.Event | None = None) -> None:
    """F-engine thread: simulate and send ``nframe`` packet times, then end the streams.

    ``ready``: wait for it first (the capture receiving), up to a minute. ``stop``: end early
    (checked between chunks of ``chunk`` packet times).
    """
    g = sim.geometry
    stop = stop or threading.Event()
    try:
        deadline = time.monotonic() + 60
        while ready is not None and not ready.wait(0.1):
            if stop.is_set():
                return
            if time.monotonic() > deadline:
                raise TimeoutError("the capture did not start receiving within 60 s")
        for f0 in range(0, nframe, chunk):
            if stop.is_set():
                return
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
    parser = build_parser()
    a = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if a.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    # A bad option stops here, before any thread, socket or file exists.
    with usage_errors(parser):
        array, g, rt = check_config(a)
        source: Source | None = None
        if a.transport == "udp" and not a.xengines:  # the instances bind their own ports
            source = UdpSource(a.address, a.port)
            try:
                source.bind()  # before any directory, and before the F-engines send
            except OSError as exc:
                raise UsageError("--port", f"cannot receive on {a.address}:{a.port}: "
                                           f"{exc.strerror or exc}") from None
    # From here on a signal ends the run normally (the pipeline takes them while it runs).
    stop = threading.Event()
    signals: list[str] = []

    def on_signal(signum: int, frame: object) -> None:
        signals.append(signal.Signals(signum).name)
        stop.set()

    old = {}
    if threading.current_thread() is threading.main_thread():  # signals reach only that one
        old = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        return _run(a, array, g, rt, source, stop, signals)
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def _run(a: argparse.Namespace, array: ArrayDescription, g: Geometry, rt: Any,
         source: Source | None, stop: threading.Event, signals: list[str]) -> int:
    """The run after every check passed: ``rt`` the runtime's blocks (chain.runtime),
    ``source`` is the bound UDP source (udp transport),
    ``stop`` is set by a signal, whose names ``signals`` collects."""
    out = a.out or new_output_dir()
    out.mkdir(parents=True, exist_ok=True)
    meerkat = a.format == "meerkat"
    nspectra = a.dumps * (a.integration_spectra or a.ninteg * g.npacket * g.nspectra_pkt)
    nframe = -(-nspectra // g.nspectra_pkt)  # packet times the simulator makes
    sync = a.sync_time if a.sync_time is not None else float(int(time.time()))
    chan_bw = a.fs_hz  # critically sampled filterbank
    sky = {"sync_time": sync, "fs_hz": a.fs_hz, "freq0_hz": a.freq0_hz, "chan_bw_hz": chan_bw}
    sim = FEngineSimulator(array, g, **sky, sources=[PointSource.from_skycoord(
                               icrs_at_altaz(array, sync, *a.source_alt_az))],
                           noise_sigma=a.noise, seed=a.seed, direction_interval=8,
                           faults=a.fault, rfi=a.inject_rfi)
    print(f"fx: {array.nant} antennas ({g.nstream} streams) x {g.nchan} channels, "
          f"{g.sample_bits}-bit samples, {a.format} format, {a.dumps} dumps of "
          f"{nspectra // a.dumps} spectra ({nspectra * g.nstream * g.nchan * 2 / 1e9:.2f} GB "
          f"of samples), transport {a.transport}")
    print(f"fx: output in {out}")

    if a.xengines:
        return run_instances(a, array, g, sim, sky, nframe, out)

    replay = a.transport == "pcap"  # write the pcap first, then replay it through the capture
    senders = start_recording(a, array, g, sky)
    wire: Any = g
    if meerkat:  # simulated MeerKAT F-engines, from our simulator's samples
        wire = a.meerkat
        kw = {"n_ants": array.nant, "nchan": g.nchan, "spectra_per_heap": wire.spectra_per_heap,
              "samples_between_spectra": wire.samples_between_spectra}
        if a.transport == "udp":
            engines = MeerkatFEngines.udp(a.address, source.port, rate_gbps=a.rate_gbps, **kw)
        else:
            import spead2
            queue = spead2.InprocQueue()
            source = InprocSource(queue)
            engines = MeerkatFEngines.inproc(queue, **kw)
        engines.send_descriptors()
        senders.append(FramesToHeaps(engines, g, nspectra))
    elif a.transport == "udp":
        assert source is not None  # bound in main()
        senders.append(udp_sender(g, address=a.address, port=source.port,
                                  rate_gbps=a.rate_gbps))
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
        send_all(sim, senders, nframe, 4, errors, stop=stop)
    with rt.Pipeline(monitor_interval=a.monitor or None) as pipeline:
        # UDP: fx's own single simulated sender on an explicit address; its end-of-stream heap
        # is the only in-order end marker (a stop() after sending could lose datagrams still
        # in the socket buffer), so this single-sender setup honours it. In-process and pcap
        # captures end with their source (queue stopped, end of file) and ignore stop heaps.
        capture = rt.CaptureBlock(source, wire, array, **sky, start_timestamp=0,
                                  idle_timeout=10.0 if a.transport == "udp" else None,
                                  stop_on_end_heap=a.transport == "udp")
        chain = correlator_chain(capture, directory=out, backend=a.backend, ninteg=a.ninteg,
                                 integration_spectra=a.integration_spectra,
                                 geometry=None if meerkat else g, runtime_name=a.runtime,
                                 formats=("uvh5", "ms") if a.ms else ("uvh5",),
                                 phase_centre=a.phase_centre,
                                 flagging=Flagging(a.flag_inputs, a.rfi))
        fengine = threading.Thread(target=send_all, name="fengines", daemon=True,
                                   args=(sim, senders, nframe, 4, errors, capture.receiving,
                                         stop))
        if not replay:
            fengine.start()
        failure = None
        if not stop.is_set():
            try:
                with frozen_heap():  # fx owns its process: its collector is fx's to freeze
                    pipeline.run()
            except PipelineError as exc:  # reported in one line once the F-engines are stopped
                failure = exc
    stop.set()  # the pipeline is done: nothing more to send
    if fengine.is_alive():
        fengine.join(timeout=10)  # prompt: it checks stop between chunks
    finish_recording(a)
    elapsed = time.monotonic() - t0
    if failure is not None:  # the block and what failed (e.g. the file and errno)
        print(f"fx: {failure}", file=sys.stderr)
        return 1
    if pipeline.stop_signal is not None:
        signals.insert(0, signal.Signals(pipeline.stop_signal).name)
    stopped_by = signals[0] if signals else None
    if errors and stopped_by is None:
        print(f"fx: the F-engines failed: {type(errors[0]).__name__}: {errors[0]}",
              file=sys.stderr)
        return 1

    counters = capture.capture_counters()
    summary = {
        "elapsed_s": round(elapsed, 2),
        "backend": chain.xengine.backend.name if chain.xengine.backend else None,
        "backend_reason": getattr(chain.xengine.backend, "choice_reason", ""),
        "xengine_msps": round(chain.xengine_msps(), 3),
        "dumps_written": chain.writer.dumps_written,
        "files": [str(f) for w in chain.writers for f in w.files],
        "quicklook": [str(f) for f in chain.quicklook.images] if chain.quicklook else [],
        "quicklook_failures": chain.quicklook.failures if chain.quicklook else [],
        "capture": counters,
        "stopped_by": stopped_by,
        "blocks": {b.name: {k: round(v, 3) for k, v in b.perf.items()}
                   for b in pipeline.blocks},
        **(chain.health.report() if chain.health is not None else {}),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps({k: summary[k] for k in ("elapsed_s", "backend", "xengine_msps",
                                              "dumps_written", "files", "quicklook")}, indent=2))
    print("capture:", " ".join(f"{k}={v}" for k, v in counters.items()))
    if stopped_by is not None:
        print(f"fx: stopped by {stopped_by} after {chain.writer.dumps_written} of {a.dumps} "
              f"dumps", file=sys.stderr)
        return 0
    if chain.writer.dumps_written != a.dumps:
        print(f"fx: expected {a.dumps} dumps, wrote {chain.writer.dumps_written}",
              file=sys.stderr)
        return 1
    for failure in summary["quicklook_failures"]:  # every dump is written; the PNG is not
        print(f"fx: {failure}", file=sys.stderr)
    return 1 if summary["quicklook_failures"] else 0


def start_recording(a: argparse.Namespace, array: ArrayDescription, g: Geometry,
                    sky: dict[str, float]) -> list:
    """--record: write the sidecar, return the pcap sender of the whole band (none without)."""
    if not a.record:
        return []
    a.record.parent.mkdir(parents=True, exist_ok=True)
    write_metadata(a.record, array, g, **sky)
    return [pcap_sender(g, a.record)]


def finish_recording(a: argparse.Namespace) -> None:
    """--record: note the closed pcap's size in the sidecar (once its sender closed it)."""
    if a.record and a.record.exists():
        finish_metadata(a.record)


def run_instances(a: argparse.Namespace, array: ArrayDescription, g: Geometry,
                  sim: FEngineSimulator, sky: dict[str, float], nframe: int, out: Path) -> int:
    """--xengines N: N correlate processes fed over UDP, their files combined. --record writes
    the same heaps (the band is the union of the instances' channel groups) into one
    full-band recording: it reprocesses like any other, into the combined visibilities."""
    errors: list[BaseException] = []
    t0 = time.monotonic()
    recorders = start_recording(a, array, g, sky)
    try:
        summary = run_scaleout(
            a.xengines, g, out=out, sky=sky, nframe=nframe,
            send=lambda senders: send_all(sim, senders + recorders, nframe, 4, errors),
            array=a.array, nant=a.nant, backend=a.backend, ninteg=a.ninteg,
            rate_gbps=a.rate_gbps, like_top_s=a.monitor)
    finally:
        finish_recording(a)
    if errors:
        raise errors[0]
    if a.ms:  # the instances' bands joined first: each combined file as a Measurement Set
        from xengine_block.outputs.convert import uvh5_to_ms
        from xengine_block.outputs.phasing import PhaseCentre

        summary["combined"] += [str(uvh5_to_ms([Path(f)], Path(f).with_suffix(".ms"),
                                               PhaseCentre.parse(a.phase_centre)))
                                for f in list(summary["combined"])]
    summary["elapsed_s"] = round(time.monotonic() - t0, 2)
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    for s in summary["instances"]:
        print(f"fx: instance chan0={s['chan0']}: {s['dumps_written']} dumps, backend "
              f"{s['backend']}, capture", " ".join(f"{k}={v}" for k, v in s["capture"].items()))
    print(json.dumps({k: summary[k] for k in ("elapsed_s", "combined")}, indent=2))
    short = [s["chan0"] for s in summary["instances"] if s["dumps_written"] != a.dumps]
    if short:
        print(f"fx: instances with chan0 {short} wrote fewer than {a.dumps} dumps",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    try:
        status = main()
    except KeyboardInterrupt:  # Ctrl-C before the run began (imports, checks): nothing to keep
        print("fx: interrupted", file=sys.stderr)
        status = 130
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # one more Ctrl-C while exiting: no traceback
    sys.exit(status)
