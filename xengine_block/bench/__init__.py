"""Benchmark machinery: what the machine can do (``machine``: int8 peak, read bandwidth, the CPU
and its results file), the exact library peers (``peers``), and the correlator benchmark
(``correlator``) behind ``xengine bench`` and ``benchmarks/bench_correlator.py``.

Apart from the library: only the command line and ``benchmarks/`` import it."""
