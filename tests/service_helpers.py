"""Running ``xengine correlate`` instances in tests: configs, the ready line, scraping."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

BASE = {
    "nant": 8,
    "band": {"sync_time": 1.7e9, "fs_hz": 40e3, "freq0_hz": 150e6},
    "capture": {"sources": ["udp://127.0.0.1:0"], "nchan": 9, "npacket": 4},
    "correlator": {"backend": "cpu", "ninteg": 2},
    "output": {"directory": "out"},
    "monitor": {"like_top_s": 0, "metrics_port": 0},
}


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return repr(v)


def write_config(path: Path, config: dict[str, Any]) -> Path:
    """A TOML file from a two-level dict (top-level keys, then tables)."""
    lines = [f"{k} = {toml_value(v)}" for k, v in config.items() if not isinstance(v, dict)]
    for section, table in config.items():
        if isinstance(table, dict):
            lines += ["", f"[{section}]"] + [f"{k} = {toml_value(v)}" for k, v in table.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def merged(base: dict[str, Any], **sections: dict[str, Any]) -> dict[str, Any]:
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in base.items()}
    for name, table in sections.items():
        if isinstance(table, dict):
            out.setdefault(name, {}).update(table)
        elif table is None:
            out.pop(name, None)
        else:
            out[name] = table
    return out


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(ROOT) + os.pathsep + e.get("PYTHONPATH", "")
    return e


class Instance:
    """A ``xengine correlate`` subprocess; :meth:`wait_ready` parses its ready line."""

    def __init__(self, config: Path, *flags: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "xengine_block.cli", "correlate", str(config), *flags],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(),
            cwd=config.parent)
        self.events: list[dict[str, Any]] = []
        self.stderr: list[str] = []
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

    def wait_ready(self, timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while not self._ready.wait(0.1):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                raise RuntimeError(f"instance not ready: {''.join(self.stderr)}")
        return next(e for e in self.events if e["event"] == "ready")

    @property
    def port(self) -> int:
        return int(self.wait_ready()["sources"][0].rpartition(":")[2])

    def scrape(self) -> dict[str, float]:
        """Every sample of the metrics endpoint: ``name{labels}`` -> value."""
        from prometheus_client.parser import text_string_to_metric_families

        port = self.wait_ready()["metrics_port"]
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
        out = {}
        for fam in text_string_to_metric_families(body.decode()):
            for s in fam.samples:
                labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
                out[s.name + (f"{{{labels}}}" if labels else "")] = s.value
        return out

    def wait_packets(self, expected: int, timeout: float = 30) -> dict[str, float]:
        """Scrape until the capture decoded ``expected`` packets (or time is up)."""
        deadline = time.monotonic() + timeout
        while True:
            m = self.scrape()
            if m["xengine_capture_packets_total"] >= expected or time.monotonic() > deadline:
                return m
            time.sleep(0.1)

    def finish(self, timeout: float = 60) -> dict[str, Any]:
        """SIGTERM, wait, return the summary event (stderr in the message if it failed)."""
        self.proc.terminate()
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        for t in self._threads:
            t.join(5)
        if rc != 0:
            raise RuntimeError(f"correlate exited {rc}: {''.join(self.stderr)}")
        return next(e for e in self.events if e["event"] == "summary")
