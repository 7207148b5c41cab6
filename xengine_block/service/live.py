"""``xengine correlate``: the live correlator service of one X-engine instance.

Order of work, so every mistake is reported before anything runs: the configuration is
validated whole (:mod:`.config`), the output directory is checked writable, the UDP sockets are
bound and groups joined (:mod:`.sources`), the pipeline is built (backend made), the metrics
endpoint is bound; only then do threads start. On SIGTERM/SIGINT the source stops: frames under
construction are delivered, the pipeline drains, the writer closes its file, the summary is
printed and the process exits 0. A second signal, or a drain longer than ``drain_timeout``,
stops every block at once (completed dumps are already on disk: each is flushed as written).

What it rides through (docs/deploy.md, "Operations"): F-engines that restart (the capture
follows their timestamps back, as it follows a jump forward: a new sequence, a new file,
``restarts``); a dump that cannot be written (full disk, quota, I/O error: the writer block's
``on_write_error="skip"``: counted, and written again into a new file once that works, while
the capture, the correlation and the SPEAD stream go on); SIGHUP, which re-reads the
configuration file and applies the keys that can change live (:meth:`ServiceConfig.reloaded`),
refusing the others in one log line; a configuration that does not load is refused whole.

Output files are named by their first dump's start time (``{prefix}{unix}.uvh5``) and never
overwritten, so a restart continues into new files (``{prefix}{unix}-1.uvh5`` where a file of
that start time exists: a restart on replayed data). One JSON line on stdout says when the
instance receives (``{"event": "ready", ...}``, with the bound ports) and one when it has
finished (``{"event": "summary", ...}``).
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from ..blocks.chain import CHAIN_BLOCKS, Chain, correlator_chain
from ..blocks.writer import WRITER_COUNTERS
from ..capture.meerkat import MeerkatFormat
from ..capture.receive import CaptureBlock
from ..display.live import DisplayBlock, LiveDumps
from ..display.server import DisplayServer
from ..runtime.pipeline import Pipeline
from .config import KEYS_BY_NAME, RELOAD_RESULTS, ConfigError, ServiceConfig
from .endpoints import ServiceSource, SourceError
from .metrics import CorrelatorCollector, MetricsServer, output_bytes

log = logging.getLogger(__name__)


class ServiceError(RuntimeError):
    """The service cannot start (port, interface, directory...): one line saying why."""


def check_writable(directory: Path) -> None:
    """Create ``directory`` if needed and prove a file can be written there."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".xengine-write-test-"):
            pass
    except OSError as exc:
        raise ServiceError(f"output directory {directory} is not writable: "
                           f"{exc.strerror or exc}") from None


class CorrelatorService:
    """One instance: build with a validated config, then :meth:`run` until a signal."""

    def __init__(self, config: ServiceConfig, *, stdout: TextIO | None = None,
                 drain_timeout: float = 10.0) -> None:
        self.config, self.drain_timeout = config, drain_timeout
        self.stdout = stdout or sys.stdout
        v = config.values
        if v["directory"] is not None:
            check_writable(v["directory"])
        self.source = ServiceSource(v["sources"], interface=v["interface"],
                                    buffer_size=v["buffer_bytes"])
        try:
            self.endpoints = self.source.bind()
        except SourceError as exc:
            raise ServiceError(str(exc)) from None
        try:
            self._build()
        except BaseException:
            self.source.close()
            raise

    def _build(self) -> None:
        cfg, v = self.config, self.config.values
        self.pipeline = Pipeline("correlate", monitor_interval=v["like_top_s"] or None)
        with self.pipeline:
            meerkat = isinstance(cfg.wire, MeerkatFormat)
            # MeerKAT: sequences start on a dump boundary, so the first dump is whole.
            align = cfg.dump_spectra // cfg.wire.spectra_per_heap if meerkat else 0
            self.capture = CaptureBlock(self.source, cfg.wire, cfg.array, **cfg.sky,
                                        chan0=v["chan0"], window=v["window"], align=align,
                                        core=v["capture"])
            backend, options = cfg.backend_choice
            spead = None if v["spead"] is None else str(v["spead"])
            self.chain: Chain = correlator_chain(
                self.capture, directory=v["directory"], backend=backend,
                backend_options=options, ninteg=v["ninteg"] or 1,
                integration_spectra=v["integration_spectra"],
                prefix=v["prefix"], dumps_per_file=cfg.dumps_per_file,
                new_name_if_exists=True, quicklook=v["quicklook"],
                geometry=None if meerkat else cfg.geometry, spead=spead,
                spead_options={"samples_between_spectra": cfg.samples_between_spectra,
                               "total_channels": cfg.total_channels,
                               "rate_factor": v["spead_rate_factor"],
                               "interface": v["interface"]},
                cores={**dict.fromkeys(CHAIN_BLOCKS, v["output"]), "xengine": v["xengine"]},
                on_write_error="skip",  # a live service stays up: counted, then a new file
                flagging=cfg.flagging, formats=v["formats"], phase_centre=v["phase_centre"])
            self.display_store: LiveDumps | None = None
            if v["address"] is not None:  # an unguaranteed reader: never holds the chain back
                self.display_store = LiveDumps(v["history"], counters=self.display_counters)
                DisplayBlock(self.chain.integrate, store=self.display_store, core=v["output"],
                             name="display")
        self.reloads = dict.fromkeys(RELOAD_RESULTS, 0)
        self.collector = CorrelatorCollector(self.capture, self.chain, self.pipeline.blocks,
                                             self.reloads)
        self.metrics: MetricsServer | None = None
        if v["metrics_port"] is not None:
            try:
                self.metrics = MetricsServer(self.collector, v["metrics_port"],
                                             v["metrics_address"])
            except OSError as exc:
                raise ServiceError(f"metrics endpoint {v['metrics_address']}:"
                                   f"{v['metrics_port']}: {exc.strerror or exc}") from None
        self.display: DisplayServer | None = None
        if self.display_store is not None:
            try:
                self.display = DisplayServer(self.display_store, *v["address"],
                                             marks=self.display_marks())
            except OSError as exc:
                if self.metrics is not None:
                    self.metrics.close()
                raise ServiceError(f"display {v['address'][0]}:{v['address'][1]}: "
                                   f"{exc.strerror or exc}") from None
            log.warning("signal display at %s", self.display.url)

    def display_marks(self) -> Callable[[], dict[tuple[int, str], str]] | None:
        """The input health marks the display's autocorrelations show
        (``display.model.HealthMarks``): the health block's latest state per input, where
        ``[flagging]`` judges inputs; None (no marks) where it does not."""
        health = self.chain.health
        return None if health is None else health.latest_states

    def display_counters(self) -> dict[str, Any]:
        """The counters the display's health panel plots, sampled as each dump arrives: the
        capture's (as the metrics endpoint exports them), the loss in percent, the X-engine's
        rate against real time, each ring's fill and the writer's counters."""
        cap = self.collector.capture_counters()
        heaps, missing = cap.get("heaps", 0), cap.get("missing", 0)
        fills = {ring.name: ring.fill for b in self.pipeline.blocks for ring in b.orings}
        realtime = self.chain.xengine_msps() * 1e6 / (self.config.fs_hz
                                                      * self.config.geometry.nchan)
        w = self.chain.writer
        return {**cap, "loss_percent": 100.0 * missing / max(heaps + missing, 1),
                "realtime_factor": realtime, "ring_fill": fills,
                "ring_fill_max": max(fills.values(), default=0.0),
                **(w.writer_counters() if w is not None else {})}

    def _say(self, event: str, **fields: Any) -> None:
        print(json.dumps({"event": event, **fields}), file=self.stdout, flush=True)

    def run(self) -> dict[str, Any]:
        """Run until SIGTERM/SIGINT (from the main thread) or :meth:`stop`; the summary."""
        errors: list[BaseException] = []

        def body() -> None:
            try:
                self.pipeline.run()
            except BaseException as exc:  # re-raised below, in the caller's thread
                errors.append(exc)

        self._signals = self._hangups = 0
        self._stop_requested = threading.Event()
        runner = threading.Thread(target=body, name="pipeline", daemon=True)
        old = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                old[sig] = signal.signal(sig, self._on_signal)
            old[signal.SIGHUP] = signal.signal(signal.SIGHUP, self._on_hangup)
        t0 = time.monotonic()
        try:
            runner.start()
            self._wait(runner)
            self.chain.close()  # the visibility stream's stop heap
            if errors:
                raise errors[0]
            # said before the default handlers return, so a late SIGTERM finds it said
            summary = self.summary(time.monotonic() - t0)
            self._say("summary", **summary)
        finally:
            for sig, handler in old.items():
                signal.signal(sig, handler)
            if self.metrics is not None:
                self.metrics.close()
            if self.display is not None:
                self.display.close()
            self.source.close()
        return summary

    def stop(self) -> None:
        """Drain and finish (what SIGTERM does); callable from any thread."""
        self._signals += 1
        self._stop_requested.set()

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.stop()

    def _on_hangup(self, signum: int, frame: Any) -> None:
        self._hangups += 1  # re-read by the main loop (_wait), not in the handler

    def reload(self) -> str:
        """Re-read the configuration file (what SIGHUP does); returns the outcome, one of
        :data:`RELOAD_RESULTS`. Keys that can change live (``Key.live``) apply as that says;
        the others that changed are refused in one log line, their running values staying;
        a file that does not load, for whatever reason, is refused whole, in one log line. The
        service runs on in every case. Nothing of the machine is probed again (the output
        directory, the backends: :func:`~.config.probe_environment`, at start only)."""
        where = self.config.source_file
        try:
            config, applied, refused = self.config.reloaded()
        except ConfigError as exc:
            result = "invalid"
            log.error("SIGHUP: %s: %s; the running configuration stays", where, exc)
        except OSError as exc:
            result = "invalid"
            log.error("SIGHUP: cannot read %s: %s; the running configuration stays", where,
                      exc.strerror or exc)
        except Exception as exc:  # whatever else the re-read raises: the service runs on
            result = "invalid"
            log.error("SIGHUP: %s could not be re-read (%s: %s); the running configuration "
                      "stays", where, type(exc).__name__, exc)
        else:
            result = "refused" if refused else "applied"
            if refused:
                log.error("SIGHUP: %s: %s cannot change while running (restart to apply); "
                          "their running values stay", where, ", ".join(refused))
            self.config = config
            if "sync_time" in applied:
                self.capture.set_sky(sync_time=applied["sync_time"])
            for writer in self.chain.writers:
                writer.prefix, writer.dumps_per_file = config.prefix, config.dumps_per_file
            changes = ", ".join(f"{KEYS_BY_NAME[k].dotted} = {v} ({KEYS_BY_NAME[k].live})"
                                for k, v in applied.items())
            log.warning("SIGHUP: %s re-read: %s", where, changes or "no live key changed")
        self.reloads[result] += 1
        return result

    def _wait(self, runner: threading.Thread) -> None:
        ready_said = False
        handled = hangups = 0
        deadline = None
        while runner.is_alive():
            runner.join(0.05)
            if not ready_said and self.capture.receiving.is_set():
                ready_said = True
                self._say("ready", sources=[str(e) for e in self.endpoints],
                          metrics_port=self.metrics.port if self.metrics else None,
                          display_url=self.display.url if self.display else None,
                          chan0=self.config.chan0, nchan=self.config.geometry.nchan)
            if self._hangups > hangups:  # several at once: the file is read once
                hangups = self._hangups
                self.reload()
            if self._signals > handled:
                handled = self._signals
                if handled == 1:
                    log.warning("stopping: draining the pipeline (signal again to stop now)")
                    self.source.stop()
                    deadline = time.monotonic() + self.drain_timeout
                else:
                    self.pipeline.shutdown()
            if deadline is not None and time.monotonic() > deadline:
                log.warning("drain took over %.0f s: stopping every block", self.drain_timeout)
                self.pipeline.shutdown()
                deadline = None

    def summary(self, elapsed_s: float) -> dict[str, Any]:
        w, spead = self.chain.writer, self.chain.spead
        files = list(w.files) if w is not None else []
        backend = self.chain.xengine.backend
        return {
            "elapsed_s": round(elapsed_s, 3),
            "backend": backend.name if backend else None,
            "chan0": self.config.chan0,
            **(w.writer_counters() if w is not None else dict.fromkeys(WRITER_COUNTERS, 0)),
            "files": [str(f) for f in files],
            "ms_files": ([str(f) for f in self.chain.ms_writer.files]
                         if self.chain.ms_writer is not None else []),
            "bytes_written": output_bytes(files),
            "spead": spead.spead_counters() if spead is not None else None,
            "capture": self.collector.capture_counters(),
            "reloads": dict(self.reloads),
            "blocks": {b.name: {k: round(x, 3) for k, x in b.perf.items()}
                       for b in self.pipeline.blocks},
        }
