"""``xengine backends``: which correlator backends run here, and why; the NPU's predicted rate
(the performance model's, since no NPU has measured it)."""

from __future__ import annotations

import argparse

from . import command


@command("backends", "list correlator backends and whether they can run here", lambda p: None)
def run(a: argparse.Namespace) -> int:
    from ..backends import availability, choose_backend
    for name, (ok, reason) in availability().items():
        print(f"{name:10s} {'yes' if ok else 'no ':3s}  {reason}")
        if name == "npu":
            from ..backends.npu import predicted_rate
            print(f"{'':10s} {'':3s}  {predicted_rate()}")
    print("auto ->", *choose_backend("auto"))
    return 0
