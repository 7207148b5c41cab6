"""Simulated inputs: the F-engine simulator (sky, noise, quantisation) that feeds fx.py, the
tests and the benchmarks."""
