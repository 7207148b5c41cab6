"""``xengine reprocess``: recordings (our pcap files, GUPPI RAW, PSRDADA, VDIF, MWAX) -> UVH5
files again, locally or on a dask cluster."""

from __future__ import annotations

import argparse
import json
import socket

from ..array import ArrayError
from ..console import argtypes
from ..health.rfi import parse_rfi
from ..readers import ALL_FORMATS
from ..reprocess.jobs import ReprocessOptions, parse_channels, plan_tasks, reprocess
from ..reprocess.tasks import summarise, summary_json
from . import command


def _channels_arg(text: str) -> tuple[int, ...] | None:
    try:
        chans = parse_channels(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if chans and min(chans) < 0:
        raise argparse.ArgumentTypeError(f"channels {text!r}: indices must be >= 0")
    return chans


def _rfi_arg(text: str) -> str:
    try:
        parse_rfi(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _scheduler_arg(text: str) -> str:
    """``[tcp://]host:port`` (or another dask protocol): checked here, reached when run."""
    rest = text.split("://", 1)[1] if "://" in text else text
    host, _, port = rest.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"expected [tcp://]HOST:PORT, got {text!r}")
    return text


def _array_arg(text: str) -> str:
    """An array TOML, a telinfo YAML/TOML or an MWA metafits that parses (its antennas checked
    against each recording when it is reprocessed)."""
    from ..readers.arrays import load_array

    path = argtypes.input_file(text)
    try:
        load_array(path)
    except ArrayError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return str(path)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("inputs", nargs="+", type=argtypes.input_file,
                   help="recordings: pcap files (with .json sidecars), GUPPI RAW files or "
                        ".NNNN.raw sequences, PSRDADA files, VDIF files, MWAX .sub files, LWA "
                        "TBF/TBX files, OVRO-LWA voltage buffer dumps")
    p.add_argument("-o", "--out", type=argtypes.output_dir, required=True,
                   help="output directory")
    p.add_argument("--format", choices=("auto", *ALL_FORMATS), default="auto",
                   help="the inputs' format (default: recognised from each file's first bytes)")
    p.add_argument("--array", type=_array_arg,
                   help="antenna positions: an array TOML, a telescope-info YAML/TOML "
                        "(BLRI/COSMIC telinfo) or an MWA metafits (OBSID_metafits.fits: "
                        "TileName names, tile ids, flags); antennas matched to the recording "
                        "by name, or by number (MWA tile id, LWA stand) (needed for "
                        "multi-antenna recordings but LWA-SV's and LWA-NA's, whose stands LSL "
                        "knows)")
    length = p.add_mutually_exclusive_group()
    length.add_argument("--integration-spectra", type=argtypes.positive_int,
                        help="spectra per integration: any whole number (pcap: a multiple of "
                             "480); default one second's, at most the recording's")
    length.add_argument("--integration-s", type=argtypes.positive_number,
                        help="seconds per integration, rounded to whole spectra (pcap: to "
                             "whole packets of 480)")
    p.add_argument("--npacket", type=argtypes.positive_int,
                   help="pcap: packets per X-engine frame P (default: as recorded)")
    p.add_argument("--ninteg", type=argtypes.positive_int, default=1,
                   help="pcap: X-engine frames per dump")
    p.add_argument("--channels", type=_channels_arg,
                   help="channels to write: A:B or a,b,c (default: all)")
    p.add_argument("--backend", type=argtypes.backend_name, default="auto",
                   help="correlator backend, or 'auto' for the fastest exact one here "
                        "(xengine backends lists them)")
    p.add_argument("--sample-rate", type=argtypes.positive_number, metavar="HZ",
                   help="spectra per second, for recordings whose headers lack it (VDIF)")
    p.add_argument("--freq0", type=argtypes.positive_number, metavar="HZ",
                   help="first channel's centre frequency, where the headers lack it (VDIF)")
    p.add_argument("--chan-bw", type=argtypes.number(), metavar="HZ",
                   help="channel width (negative: channels run high to low), where the "
                        "headers lack it (VDIF)")
    p.add_argument("--split-s", type=argtypes.positive_number, metavar="SECONDS",
                   help="cut each file into tasks of about SECONDS of whole integrations, one "
                        "UVH5 each (NAME.tNNNN.uvh5), so that one long file is spread over "
                        "several workers (GUPPI RAW, PSRDADA, VDIF, MWAX; default one task "
                        "per file)")
    p.add_argument("--replay", action="store_true",
                   help="pcap: replay every recording through the capture, also a clean one "
                        "(default: a clean recording, every frame whole and in order, is "
                        "correlated in place from the file, with the same result)")
    p.add_argument("--allow-damaged", action="store_true",
                   help="write damaged recordings (lost or mangled packets or blocks, garbage, "
                        "cut files, lying headers) and count them as done; their line still "
                        "says what is wrong")
    p.add_argument("--flag-inputs", action="store_true",
                   help="judge every input (antenna x pol) in every dump from its power, "
                        "bandpass, saturated samples and correlation, and flag every baseline "
                        "of an input judged bad (dead, stuck, saturated, low_power, high_power, "
                        "decorrelated) in that dump; nsamples kept (docs/flagging.md)")
    p.add_argument("--rfi", type=_rfi_arg, metavar="aoflagger[:STRATEGY.lua]",
                   help="flag RFI with AOFlagger over each file's time span: the telescope's "
                        "strategy where AOFlagger has one, else its generic one, or the Lua "
                        "file given (docs/flagging.md)")
    p.add_argument("--output-format", type=_formats_arg, default=("uvh5",),
                   metavar="uvh5|ms|uvh5,ms",
                   help="files per task: UVH5, Measurement Sets (NAME.ms, needs "
                        "python-casacore) or both")
    p.add_argument("--phase-centre", type=argtypes.phase_centre, default="zenith",
                   help="the Measurement Sets' phase centre: 'zenith' (at the first dump) or "
                        "'RA,DEC' in degrees (ICRS)")
    cluster = p.add_mutually_exclusive_group()
    cluster.add_argument("--workers", type=argtypes.positive_int,
                         help="start a LocalCluster of N worker processes")
    cluster.add_argument("--scheduler", type=_scheduler_arg,
                         help="address of an existing dask scheduler")


def _formats_arg(text: str) -> tuple[str, ...]:
    """``uvh5``, ``ms`` or ``uvh5,ms``: the files each task writes."""
    formats = tuple(dict.fromkeys(f.strip() for f in text.split(",")))
    if not formats or any(f not in ("uvh5", "ms") for f in formats):
        raise argparse.ArgumentTypeError(f"{text!r}: uvh5, ms or uvh5,ms")
    return formats


@command("reprocess", "correlate recordings (pcap, GUPPI RAW, PSRDADA, VDIF, MWAX) again "
         "into UVH5 (local or dask)", add_arguments)
def run(a: argparse.Namespace) -> int:
    if a.chan_bw == 0:
        raise argtypes.UsageError("--chan-bw", "must not be 0")
    options = ReprocessOptions(a.npacket, a.ninteg, a.channels, a.backend, a.allow_damaged,
                               format=a.format, array=a.array,
                               integration_spectra=a.integration_spectra,
                               integration_s=a.integration_s, sample_rate_hz=a.sample_rate,
                               freq0_hz=a.freq0, chan_bw_hz=a.chan_bw, split_s=a.split_s,
                               in_place=not a.replay, freeze_gc=True,
                               flag_inputs=a.flag_inputs, rfi=a.rfi,
                               output_formats=a.output_format, phase_centre=a.phase_centre)
    if "ms" in a.output_format:
        problem = argtypes.measurement_sets_available()
        if problem:
            raise argtypes.UsageError("--output-format", problem)
    try:
        plan_tasks(a.inputs, a.out, a.format, options)
    except ValueError as exc:
        raise argtypes.UsageError("inputs", str(exc)) from None
    if a.scheduler and a.scheduler.split("://")[0] in ("tcp", a.scheduler):
        host, _, port = a.scheduler.split("://")[-1].rpartition(":")
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=5).close()
        except OSError as exc:
            raise argtypes.UsageError("--scheduler", f"cannot reach {a.scheduler}: "
                                                     f"{exc.strerror or exc}") from None
    if a.rfi is not None:  # AOFlagger missing: said now, before any file is read
        from ..health.rfi import AOFlaggerRfi, RfiUnavailable

        try:
            AOFlaggerRfi(strategy=parse_rfi(a.rfi)[1])
        except RfiUnavailable as exc:
            raise argtypes.UsageError("--rfi", str(exc)) from None
    results = reprocess(a.inputs, a.out, options, scheduler=a.scheduler, workers=a.workers)
    a.out.mkdir(parents=True, exist_ok=True)  # (no task may have made it: nothing to do)
    (a.out / "summary.json").write_text(json.dumps(summary_json(results), indent=2) + "\n")
    return 0 if summarise(results) else 1
