"""``xengine view``: the signal display (docs/display.md) over UVH5 files, until Ctrl-C."""

from __future__ import annotations

import argparse
import sys
import time

from ..console import argtypes
from ..service.config import host_port
from . import command


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", type=argtypes.input_file, nargs="+", metavar="FILE",
                   help="UVH5 files (any that pyuvdata reads; one band, dumps in any order)")
    p.add_argument("--address", type=host_port, default=("127.0.0.1", 0),
                   metavar="ADDRESS:PORT",
                   help="where to serve the page (default 127.0.0.1:0: loopback, a free port)")


@command("view", "signal display over UVH5 files, in the browser", _args)
def run(a: argparse.Namespace) -> int:
    from ..display.files import FileDumps, ViewError
    from ..display.server import DisplayServer

    try:
        store = FileDumps(a.files)
    except ViewError as exc:
        print(f"xengine view: {exc}", file=sys.stderr)
        return 2
    try:
        server = DisplayServer(store, *a.address)
    except OSError as exc:
        print(f"xengine view: cannot serve on {a.address[0]}:{a.address[1]}: "
              f"{exc.strerror or exc}", file=sys.stderr)
        return 1
    print(f"xengine view: {len(store.entries)} dumps of {len(store.paths)} file(s) at "
          f"{server.url}", flush=True)
    try:
        while True:
            time.sleep(3600)
    finally:
        server.close()
