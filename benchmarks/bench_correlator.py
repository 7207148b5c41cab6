"""Correlator throughput (by default S = 256, C = 9, P = 136) against the machine's roofline
(int8 peak and streaming read bandwidth, measured in the same run) and its peers (onnxruntime
MatMulInteger, torch._int_mm, numpy), with S and thread scaling; prints one JSON object
(``--write-results``: also to benchmarks/results/<cpu class>/bench_correlator.json, the results
of this class of CPU, replaced when re-measured).

    python benchmarks/bench_correlator.py [--backend auto] [--nstream 256] [--npacket 136]
    python benchmarks/bench_correlator.py --bits 4   # also ci4 input, next to ci8, same run
        [--no-scaling] [--no-onnx] [--no-torch] [--write-results [--results-root DIR]]
    python benchmarks/bench_correlator.py --compare-build before=/path/to/_native.so
        # also that build against this one, alternating call by call (key 'builds')

The library peers need the optional extra: ``pip install -e .[bench]`` (onnxruntime, torch);
an absent one is reported as skipped, with the reason.
"""

import argparse
from collections.abc import Sequence

from results_file import add_option, emit

from xengine_block.bench import correlator as benchmarking
from xengine_block.console.argtypes import sample_bits
from xengine_block.native_extension import native


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="auto")
    p.add_argument("--nstream", type=int, default=256)
    p.add_argument("--nchan", type=int, default=9)
    p.add_argument("--npacket", type=int, default=136)
    p.add_argument("--repeat", type=int, default=6,
                   help="best of this many timings per measurement (the scaling rows take "
                        "twice as many rounds): on a shared machine, fewer let one slow spell "
                        "decide a figure")
    p.add_argument("--bits", type=sample_bits, default=8,
                   help="4: also measure ci4 input (key 'ci4') next to ci8 in the same run")
    p.add_argument("--no-scaling", action="store_true", help="skip the S x threads sweep")
    p.add_argument("--no-onnx", action="store_true", help="skip the onnxruntime peers")
    p.add_argument("--no-torch", action="store_true", help="skip the torch._int_mm peer")
    p.add_argument("--compare-build", action="append", default=[], metavar="LABEL=PATH",
                   help="another build of xengine_block._native (its .so) to run against this "
                        "one in the same process, S = 64 and 256, 1 thread (repeatable)")
    add_option(p)
    a = p.parse_args(argv)
    builds = {"this": native()} if a.compare_build else {}
    for spec in a.compare_build:  # before the long run: a wrong path fails now
        label, sep, path = spec.partition("=")
        if not sep or not label or label in builds:
            p.error(f"--compare-build wants a new LABEL=PATH, got {spec!r}")
        builds[label] = benchmarking.load_build(path)
    result = benchmarking.run(a.backend, a.nstream, a.nchan, a.npacket, a.repeat,
                              with_scaling=not a.no_scaling, with_onnx=not a.no_onnx,
                              with_torch=not a.no_torch)
    if a.bits == 4:
        result["ci4"] = benchmarking.run_ci4(a.backend, result, a.repeat)
    if builds:
        result["builds"] = benchmarking.compare_builds(builds)
    emit("bench_correlator", result, a, indent=2)


if __name__ == "__main__":
    main()
