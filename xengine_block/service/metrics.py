"""Prometheus metrics of a running correlator, read at scrape time from the counters the
pipeline already keeps (nothing is counted twice).

Names follow Prometheus conventions (``xengine_<thing>_<unit>_total`` for counters):

- ``xengine_capture_<name>_total``: every capture counter of ``capture.COUNTERS`` with its
  description, read generically, so a counter added there appears here.
- ``xengine_block_<counter>_total{block=...}``: every per-block counter of
  ``monitor.BLOCK_COUNTERS`` (``acquire_s`` becomes ``acquire_seconds``...); take
  ``rate(xengine_block_frames_total[1m])`` for frame rates and ``rate(..._seconds_total)`` for
  the acquire/process/reserve shares. ``xengine_block_frame_rate_hertz`` is the rate since the
  previous scrape, for a quick look without PromQL.
- ``xengine_ring_fill_ratio{ring=...}``: how full each ring is for its slowest guaranteed reader.
- ``xengine_<name>_total``: every UVH5 writer counter of ``writer.WRITER_COUNTERS``
  (``dumps_written``, ``dumps_not_written``, ``write_failures``), and
  ``xengine_output_write_failing`` (1 while dumps cannot be written);
  ``xengine_output_bytes_written_total``, ``xengine_output_files_total``.
- ``xengine_config_reloads_total{result}`` (SIGHUP, ``config.RELOAD_RESULTS``) and
  ``xengine_sync_time_seconds``, the sync time of the sequences begun from now on.
- ``xengine_backend_info{backend, reason}`` = 1; ``xengine_start_time_seconds``.
- With ``[flagging]`` on (docs/flagging.md), per input ``{antenna, number, pol}`` of the
  latest dump: ``xengine_input_state`` (the state's code, :data:`~xengine_block.health.inputs.
  STATE_CODE`: 0 ok, 1 dead, ...), ``xengine_input_power``, ``xengine_input_saturated_ratio``,
  ``xengine_input_bandpass_deviation_ratio``; and ``xengine_rfi_flagged_ratio``, the fraction
  of the latest dump flagged as RFI (of the baselines of no bad input).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from ..blocks.writer import WRITER_COUNTERS
from ..capture.placement import COUNTERS as CAPTURE_COUNTERS
from ..health.inputs import STATE_CODE
from ..runtime.monitor import BLOCK_COUNTERS
from .config import RELOAD_RESULTS

NAMESPACE = "xengine"


def metric_name(counter: str) -> str:
    """A counter's name with its unit spelled out (``acquire_s`` -> ``acquire_seconds``)."""
    return counter[:-2] + "_seconds" if counter.endswith("_s") else counter


class CorrelatorCollector(Collector):
    """Reads a running service's capture, blocks, rings and writer on each scrape."""

    def __init__(self, capture: Any, chain: Any, blocks: list[Any],
                 reloads: dict[str, int]) -> None:
        self.capture, self.chain, self.blocks = capture, chain, blocks
        self.reloads = reloads  # SIGHUP outcome (config.RELOAD_RESULTS) -> count, the service's
        self.start_time = time.time()
        self._lock = threading.Lock()
        self._last: dict[str, tuple[float, float]] = {}  # block -> (time, frames)

    def capture_counters(self) -> dict[str, int]:
        return self.capture.capture_counters()

    def collect(self) -> Iterator[Metric]:
        counters = self.capture_counters()
        for name, help_ in CAPTURE_COUNTERS.items():
            m = CounterMetricFamily(f"{NAMESPACE}_capture_{name}", help_)
            m.add_metric([], counters.get(name, 0))
            yield m

        samples = [(b.name, *b.counters.sample()) for b in self.blocks]
        for c in BLOCK_COUNTERS:
            m = CounterMetricFamily(f"{NAMESPACE}_block_{metric_name(c.name)}", c.description,
                                    labels=["block"])
            for name, _, values in samples:
                m.add_metric([name], values[c.name])
            yield m
        rate = GaugeMetricFamily(f"{NAMESPACE}_block_frame_rate_hertz",
                                 "frames per second since the previous scrape", labels=["block"])
        with self._lock:
            for name, t, values in samples:
                t0, f0 = self._last.get(name, (t, values["frames"]))
                rate.add_metric([name], (values["frames"] - f0) / (t - t0) if t > t0 else 0.0)
                self._last[name] = (t, values["frames"])
        yield rate

        fill = GaugeMetricFamily(f"{NAMESPACE}_ring_fill_ratio", "fraction of the ring its "
                                 "slowest guaranteed reader has yet to release", labels=["ring"])
        for b in self.blocks:
            for ring in b.orings:
                fill.add_metric([ring.name], ring.fill)
        yield fill

        writer, spead = self.chain.writer, self.chain.spead
        written = writer.writer_counters() if writer is not None else {}
        for name, help_ in WRITER_COUNTERS.items():
            m = CounterMetricFamily(f"{NAMESPACE}_{name}", help_)
            m.add_metric([], written.get(name, 0))
            yield m
        m = GaugeMetricFamily(f"{NAMESPACE}_output_write_failing", "1 while UVH5 dumps cannot "
                              "be written (counted in dumps_not_written), else 0")
        m.add_metric([], float(writer is not None and writer.write_error is not None))
        yield m
        if spead is not None:
            m = CounterMetricFamily(f"{NAMESPACE}_spead_dumps", "dumps of the SPEAD visibility "
                                    "stream, by outcome (sent, skipped: no antenna whole, with "
                                    "missing baselines marked)", labels=["outcome"])
            c = spead.spead_counters()
            for k in ("sent", "skipped", "with_missing"):
                m.add_metric([k], c[f"dumps_{k}"])
            yield m
            m = CounterMetricFamily(f"{NAMESPACE}_spead_clipped_visibilities",
                                    "visibilities saturated to int32 in the SPEAD stream")
            m.add_metric([], c["clipped"])
            yield m
        files = list(writer.files) if writer is not None else []
        m = CounterMetricFamily(f"{NAMESPACE}_output_files", "UVH5 files opened")
        m.add_metric([], len(files))
        yield m
        m = CounterMetricFamily(f"{NAMESPACE}_output_bytes_written",
                                "bytes in the UVH5 files written so far")
        m.add_metric([], output_bytes(files))
        yield m

        m = CounterMetricFamily(f"{NAMESPACE}_config_reloads", "SIGHUPs by outcome: "
                                + "; ".join(f"{k}: {v}" for k, v in RELOAD_RESULTS.items()),
                                labels=["result"])
        for result, n in self.reloads.items():
            m.add_metric([result], n)
        yield m
        sky = getattr(self.capture, "sky", None)
        if sky is not None:
            m = GaugeMetricFamily(f"{NAMESPACE}_sync_time_seconds", "F-engine sync time (unix) "
                                  "of the sequences begun from now on (band.sync_time)")
            m.add_metric([], sky["sync_time"])
            yield m

        yield from self.health_metrics()

        backend = self.chain.xengine.backend
        m = GaugeMetricFamily(f"{NAMESPACE}_backend_info", "the correlator backend in use (1)",
                              labels=["backend", "reason"])
        if backend is not None:
            m.add_metric([backend.name, getattr(backend, "choice_reason", "")], 1)
        yield m
        m = GaugeMetricFamily(f"{NAMESPACE}_start_time_seconds", "unix time the service started")
        m.add_metric([], self.start_time)
        yield m


    def health_metrics(self) -> Iterator[Metric]:
        """Per-input gauges of the health block's latest dump (none without one)."""
        health = getattr(self.chain, "health", None)
        if health is None or health.monitor is None:
            return
        gauges = health.monitor.gauges()
        labels = ["antenna", "number", "pol"]
        codes = ", ".join(f"{code} {state}" for state, code in STATE_CODE.items())
        for name, key, help_ in (
                ("input_state", "state", f"the input's state in the latest dump: {codes}"),
                ("input_power", "power", "autocorrelation per spectrum, mean over channels "
                                         "(levels squared)"),
                ("input_saturated_ratio", "saturated_fraction",
                 "fraction of sample parts at the quantiser's extremes"),
                ("input_bandpass_deviation_ratio", "bandpass_deviation",
                 "median relative deviation of the bandpass from the array's median")):
            m = GaugeMetricFamily(f"{NAMESPACE}_{name}", help_, labels=labels)
            for g in gauges:
                value = STATE_CODE[g[key]] if key == "state" else g[key]
                m.add_metric([g["antenna"], str(g["number"]), g["pol"]], value)
            yield m
        if health.rfi is not None:
            m = GaugeMetricFamily(f"{NAMESPACE}_rfi_flagged_ratio", "fraction of the latest "
                                  "dump flagged as RFI (baselines of no bad input)")
            m.add_metric([], health.rfi_fraction)
            yield m


def output_bytes(files: list[Any]) -> int:
    """Bytes in ``files`` now (a file being written counts what is on disk)."""
    total = 0
    for f in files:
        try:
            total += f.stat().st_size
        except OSError:  # renamed or removed by an operator: not ours to count
            pass
    return total


class MetricsServer:
    """The HTTP endpoint (``/metrics``) on its own registry, in a daemon thread."""

    def __init__(self, collector: Collector, port: int, address: str = "127.0.0.1") -> None:
        from prometheus_client import start_http_server

        self.registry = CollectorRegistry()
        self.registry.register(collector)
        self._server, self._thread = start_http_server(port, address, registry=self.registry)
        self.port = self._server.server_port

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
