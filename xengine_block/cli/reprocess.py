"""``xengine reprocess``: recordings -> UVH5 files again, locally or on a dask cluster."""

from __future__ import annotations

import argparse
import socket

from ..tools import argtypes
from ..tools.reprocess import ReprocessOptions, parse_channels, plan_tasks, reprocess
from ..tools.tasks import summarise
from . import command


def _channels_arg(text: str) -> tuple[int, ...] | None:
    try:
        chans = parse_channels(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if chans and min(chans) < 0:
        raise argparse.ArgumentTypeError(f"channels {text!r}: indices must be >= 0")
    return chans


def _scheduler_arg(text: str) -> str:
    """``[tcp://]host:port`` (or another dask protocol): checked here, reached when run."""
    rest = text.split("://", 1)[1] if "://" in text else text
    host, _, port = rest.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"expected [tcp://]HOST:PORT, got {text!r}")
    return text


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("inputs", nargs="+", type=argtypes.input_file,
                   help="recorded pcap files (with .json sidecars)")
    p.add_argument("-o", "--out", type=argtypes.output_dir, required=True,
                   help="output directory")
    p.add_argument("--npacket", type=argtypes.positive_int,
                   help="packets per X-engine frame P (default: as recorded)")
    p.add_argument("--ninteg", type=argtypes.positive_int, default=1,
                   help="X-engine frames per dump")
    p.add_argument("--channels", type=_channels_arg,
                   help="channels to write: A:B or a,b,c (default: all)")
    p.add_argument("--backend", type=argtypes.backend_name, default="auto")
    p.add_argument("--allow-damaged", action="store_true",
                   help="write damaged recordings (lost or mangled packets, garbage, cut "
                        "files) and count them as done; their line still says what is wrong")
    cluster = p.add_mutually_exclusive_group()
    cluster.add_argument("--workers", type=argtypes.positive_int,
                         help="start a LocalCluster of N worker processes")
    cluster.add_argument("--scheduler", type=_scheduler_arg,
                         help="address of an existing dask scheduler")


@command("reprocess", "correlate recorded pcap files again into UVH5 (local or dask)",
         add_arguments)
def run(a: argparse.Namespace) -> int:
    options = ReprocessOptions(a.npacket, a.ninteg, a.channels, a.backend, a.allow_damaged)
    try:
        plan_tasks(a.inputs, a.out)
    except ValueError as exc:
        raise argtypes.UsageError("inputs", str(exc)) from None
    if a.scheduler and a.scheduler.split("://")[0] in ("tcp", a.scheduler):
        host, _, port = a.scheduler.split("://")[-1].rpartition(":")
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=5).close()
        except OSError as exc:
            raise argtypes.UsageError("--scheduler", f"cannot reach {a.scheduler}: "
                                                     f"{exc.strerror or exc}") from None
    results = reprocess(a.inputs, a.out, options, scheduler=a.scheduler, workers=a.workers)
    return 0 if summarise(results) else 1
