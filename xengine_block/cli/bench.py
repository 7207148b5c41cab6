"""``xengine bench``: one backend's throughput against the machine's roofline and library peers,
as JSON."""

from __future__ import annotations

import argparse
import json

from ..console import argtypes
from ..console.argtypes import UsageError
from . import command


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backend", type=argtypes.backend_name, default="auto",
                   help="backend name or 'auto'")
    p.add_argument("--nstream", type=argtypes.positive_int, default=256,
                   help="streams S (antennas x polarisations) of the geometry measured")
    p.add_argument("--nchan", type=argtypes.positive_int, default=9, help="channels")
    p.add_argument("--npacket", type=argtypes.positive_int, default=136,
                   help="packet times P per call (the X-engine's integration)")
    p.add_argument("--repeat", type=argtypes.positive_int, default=2,
                   help="timings of each measurement; the best is kept")


@command("bench", "measure a correlator backend against the roofline and peers (JSON)", _args)
def run(a: argparse.Namespace) -> int:
    from ..backends import BackendUnavailable, choose_backend
    from ..bench import correlator
    g = argtypes.geometry({"nstream": "--nstream", "nchan": "--nchan", "npacket": "--npacket"},
                          nstream=a.nstream, nchan=a.nchan, npacket=a.npacket)
    try:
        choose_backend(a.backend, g)
    except BackendUnavailable as exc:
        raise UsageError("--backend", str(exc)) from None
    result = correlator.run(a.backend, a.nstream, a.nchan, a.npacket, a.repeat,
                              with_scaling=False)  # the sweep: benchmarks/bench_correlator.py
    print(json.dumps(result, indent=2))
    return 0 if result["exact"] else 1
