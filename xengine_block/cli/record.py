"""``xengine record``: live SPEAD F-engine traffic into pcap files with their sidecars."""

from __future__ import annotations

import argparse

from ..capture.spead import DEFAULT_ADDRESS, DEFAULT_PORT
from ..console import argtypes
from ..console.argtypes import UsageError
from ..console.progress import Progress
from . import command


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--out", type=argtypes.output_dir, required=True,
                   help="directory for the pcap files")
    p.add_argument("--address", type=argtypes.ipv4_address, default=DEFAULT_ADDRESS,
                   help="local address to receive on (a multicast group joins it)")
    p.add_argument("--port", type=argtypes.port, default=DEFAULT_PORT, help="UDP port")
    p.add_argument("--max-mb", type=argtypes.positive_number, default=1024,
                   help="file size before rotating")
    p.add_argument("--duration", type=argtypes.positive_number,
                   help="seconds to record (default: until Ctrl-C)")
    p.add_argument("--idle-timeout", type=argtypes.positive_number,
                   help="stop after this long without packets")
    p.add_argument("--array", type=argtypes.input_file,
                   help="array TOML (default: MWA 128 tiles)")
    p.add_argument("--nant", type=argtypes.positive_int,
                   help="first N antennas of the default array")
    p.add_argument("--nchan", type=argtypes.positive_int, default=9,
                   help="channels the F-engines send")
    p.add_argument("--npacket", type=argtypes.positive_int, default=136,
                   help="packet times P per X-engine frame, recorded for reprocessing")
    argtypes.add_sample_format_args(p)
    p.add_argument("--chan0", type=argtypes.nonnegative_int, default=0,
                   help="the band's first channel number these F-engines send")
    p.add_argument("--sync-time", type=argtypes.nonnegative_number, required=True,
                   help="unix time of spectrum 0")
    p.add_argument("--fs-hz", type=argtypes.positive_number, required=True,
                   help="spectra per second per channel")
    p.add_argument("--freq0-hz", type=argtypes.positive_number, required=True,
                   help="centre frequency of the band's channel 0")
    p.add_argument("--chan-bw-hz", type=argtypes.positive_number, required=True,
                   help="channel width")


@command("record", "record live SPEAD F-engine traffic into pcap files with sidecars", _args)
def run(a: argparse.Namespace) -> int:
    array, g = argtypes.array_geometry(a)
    sky = {"sync_time": a.sync_time, "fs_hz": a.fs_hz, "freq0_hz": a.freq0_hz,
           "chan_bw_hz": a.chan_bw_hz}
    from ..capture.record import Recorder

    try:  # binds before it creates the directory
        rec = Recorder(a.out, array, g, sky=sky, chan0=a.chan0, address=a.address, port=a.port,
                       max_bytes=int(a.max_mb * 1e6))
    except OSError as exc:
        raise UsageError("--port", f"cannot receive on {a.address}:{a.port}: "
                                   f"{exc.strerror or exc}") from None
    print(f"recording {a.address}:{rec.port} into {a.out} (Ctrl-C stops)")
    with Progress("record", unit="MB") as progress:
        try:
            rec.run(duration=a.duration, idle_timeout=a.idle_timeout, progress=progress)
        except KeyboardInterrupt:
            pass
    print(f"{rec.packets} packets in {len(rec.files)} files")
    return 0
