"""Correlator throughput at the seed geometry; prints one JSON object.

    python benchmarks/bench_correlator.py [--backend auto] [--nstream 256] [--npacket 136]
"""

import argparse
import json

from xengine_block import benchmarking


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="auto")
    p.add_argument("--nstream", type=int, default=256)
    p.add_argument("--nchan", type=int, default=9)
    p.add_argument("--npacket", type=int, default=136)
    p.add_argument("--repeat", type=int, default=2)
    a = p.parse_args()
    print(json.dumps(benchmarking.run(a.backend, a.nstream, a.nchan, a.npacket, a.repeat),
                     indent=2))


if __name__ == "__main__":
    main()
