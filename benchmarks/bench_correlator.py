"""Correlator throughput at the published geometry against the machine's roofline (int8 peak and
streaming read bandwidth, measured in the same run) and its peers (onnxruntime MatMulInteger,
torch._int_mm, numpy), with S and thread scaling; prints one JSON object.

    python benchmarks/bench_correlator.py [--backend auto] [--nstream 256] [--npacket 136]
    python benchmarks/bench_correlator.py --bits 4   # also ci4 input, next to ci8, same run
        [--no-scaling] [--no-onnx] [--no-torch]

The library peers need the optional extra: ``pip install -e .[bench]`` (onnxruntime, torch);
an absent one is reported as skipped, with the reason.
"""

import argparse
import json

from xengine_block.bench import correlator as benchmarking
from xengine_block.console.argtypes import sample_bits


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="auto")
    p.add_argument("--nstream", type=int, default=256)
    p.add_argument("--nchan", type=int, default=9)
    p.add_argument("--npacket", type=int, default=136)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--bits", type=sample_bits, default=8,
                   help="4: also measure ci4 input (key 'ci4') next to ci8 in the same run")
    p.add_argument("--no-scaling", action="store_true", help="skip the S x threads sweep")
    p.add_argument("--no-onnx", action="store_true", help="skip the onnxruntime peers")
    p.add_argument("--no-torch", action="store_true", help="skip the torch._int_mm peer")
    a = p.parse_args()
    result = benchmarking.run(a.backend, a.nstream, a.nchan, a.npacket, a.repeat,
                              with_scaling=not a.no_scaling, with_onnx=not a.no_onnx,
                              with_torch=not a.no_torch)
    if a.bits == 4:
        result["ci4"] = benchmarking.run_ci4(a.backend, result, a.repeat)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
