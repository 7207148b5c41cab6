"""Running ``xengine correlate`` instances as processes (``pipelines/fx.py --xengines N``, tests):
configs written from dicts, the ready line, the metrics endpoint, SIGTERM and the summary."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (str, Path)):
        return json.dumps(str(v))
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return repr(v)


def toml_text(config: dict[str, Any]) -> str:
    """A config file from ``{top-level key: value, section: {key: value}}``."""
    lines = [f"{k} = {toml_value(v)}" for k, v in config.items() if not isinstance(v, dict)]
    for section, table in config.items():
        if isinstance(table, dict):
            lines += ["", f"[{section}]"] + [f"{k} = {toml_value(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"


def channel_split(nchan: int, nchan_pkt: int, n: int) -> list[tuple[int, int]]:
    """``(chan0, nchan)`` of ``n`` instances sharing ``nchan`` channels in whole packets, as
    evenly as possible (the first ones take the remainder)."""
    groups, rem = divmod(nchan // nchan_pkt, n)
    if nchan % nchan_pkt or groups == 0:
        raise ValueError(f"{nchan} channels ({nchan // nchan_pkt} packets of {nchan_pkt}) "
                         f"cannot be split among {n} instances")
    out, c0 = [], 0
    for i in range(n):
        c = (groups + (i < rem)) * nchan_pkt
        out.append((c0, c))
        c0 += c
    return out


def scrape(port: int, host: str = "127.0.0.1") -> dict[str, float]:
    """Every sample of a metrics endpoint: ``name{label=value,...}`` -> value."""
    from prometheus_client.parser import text_string_to_metric_families

    body = urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5).read()
    out = {}
    for fam in text_string_to_metric_families(body.decode()):
        for s in fam.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            out[s.name + (f"{{{labels}}}" if labels else "")] = s.value
    return out


class CorrelateProcess:
    """A ``xengine correlate CONFIG`` subprocess whose stdout JSON events are collected."""

    def __init__(self, config: Path, *flags: str, stderr_to: Any = None) -> None:
        config = Path(config).resolve()  # the process runs in its directory: not relative
        # This interpreter and its environment, unchanged: the instance imports the package
        # this process imports, installed or from a checkout on PYTHONPATH.
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "xengine_block.cli", "correlate", str(config), *flags],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=config.parent)
        self.events: list[dict[str, Any]] = []
        self.stderr: list[str] = []
        self._stderr_to = stderr_to
        self._ready = threading.Event()
        self._threads = [threading.Thread(target=self._read_stdout, daemon=True),
                         threading.Thread(target=self._read_stderr, daemon=True)]
        for t in self._threads:
            t.start()

    def _read_stdout(self) -> None:
        for line in self.proc.stdout:
            try:
                self.events.append(json.loads(line))
            except ValueError:
                continue
            if self.events[-1].get("event") == "ready":
                self._ready.set()

    def _read_stderr(self) -> None:
        for line in self.proc.stderr:
            self.stderr.append(line)
            if self._stderr_to is not None:
                self._stderr_to.write(line)

    def wait_ready(self, timeout: float = 120) -> dict[str, Any]:
        """The ready event (bound ports); RuntimeError with the stderr if it never comes."""
        deadline = time.monotonic() + timeout
        while not self._ready.wait(0.1):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                raise RuntimeError(f"correlate instance not ready: {''.join(self.stderr)}")
        return next(e for e in self.events if e["event"] == "ready")

    @property
    def port(self) -> int:
        return int(self.wait_ready()["sources"][0].rpartition(":")[2])

    def scrape(self) -> dict[str, float]:
        """Every sample of the metrics endpoint (:func:`scrape`)."""
        return scrape(self.wait_ready()["metrics_port"])

    def wait_packets(self, expected: int, timeout: float = 60, quiet_s: float = 5
                     ) -> dict[str, float]:
        """Scrape until ``expected`` packets were decoded, or none came for ``quiet_s``."""
        deadline = time.monotonic() + timeout
        last, since = -1.0, time.monotonic()
        while True:
            m = self.scrape()
            n = m["xengine_capture_packets_total"]
            if n != last:
                last, since = n, time.monotonic()
            now = time.monotonic()
            if n >= expected or now > deadline or now - since > quiet_s:
                return m
            time.sleep(0.05)

    def summary(self) -> dict[str, Any] | None:
        return next((e for e in self.events if e["event"] == "summary"), None)

    def finish(self, timeout: float = 60) -> dict[str, Any]:
        """SIGTERM (unless it already finished), wait, the summary event (RuntimeError with
        the stderr if it failed). A SIGTERM that lands after the summary, as the process
        exits, is no failure."""
        if self.proc.poll() is None and self.summary() is None:
            self.proc.terminate()
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        for t in self._threads:
            t.join(5)
        summary = self.summary()
        if summary is None or rc not in (0, -signal.SIGTERM):
            raise RuntimeError(f"correlate exited {rc}: {''.join(self.stderr)}")
        return summary
