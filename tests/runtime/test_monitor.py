"""like_top shares: exact windows, so a long wait never shows more than 100 %."""

from __future__ import annotations

import io
import re
import threading
import time
from types import SimpleNamespace

from xengine_block.runtime.monitor import TIME_COUNTERS, BlockCounters, Monitor, format_line


def _wait_in(counters: BlockCounters, name: str, seconds: float, started: threading.Event):
    with counters.timing(name):
        started.set()
        time.sleep(seconds)


def test_a_phase_in_progress_counts_up_to_the_sample_and_never_exceeds_the_window():
    c = BlockCounters()
    started = threading.Event()
    t = threading.Thread(target=_wait_in, args=(c, "acquire_s", 0.4, started))
    t.start()
    started.wait()
    samples = []
    while t.is_alive() or len(samples) < 2:
        samples.append(c.sample())
        time.sleep(0.05)
    t.join()
    samples.append(c.sample())
    # visible while running (the old code showed 0 until the wait ended, then all of it at once)
    assert any(0 < v["acquire_s"] for _, v in samples[:3])
    for (t0, v0), (t1, v1) in zip(samples[:-1], samples[1:], strict=True):
        assert 0 <= v1["acquire_s"] - v0["acquire_s"] <= t1 - t0 + 1e-12
    assert abs(samples[-1][1]["acquire_s"] - 0.4) < 0.1


def test_monitor_percentages_stay_within_0_and_100_when_waits_span_windows():
    """A block alternating long waits (3 windows) with short work: every share <= 100 %."""
    c = BlockCounters()
    block = SimpleNamespace(name="slow", counters=c)
    out = io.StringIO()
    mon = Monitor(lambda: [block], interval=0.03, stream=out)
    mon.start()
    for _ in range(3):
        with c.timing("acquire_s"):
            time.sleep(0.1)
        with c.timing("process_s"):
            time.sleep(0.01)
    mon.stop()
    shares = [float(x) for x in re.findall(r"(?:acquire|process|reserve)\s+([\d.]+)%",
                                             out.getvalue())]
    assert len(shares) >= 9 and max(shares) <= 100.0
    assert max(shares) > 50  # the waits do show


def test_format_line_clips_only_rounding():
    prev = dict.fromkeys(("frames", "bytes", "skipped", "sequences", *TIME_COUNTERS), 0)
    cur = dict(prev, acquire_s=1.0000000001)
    assert "acquire 100.0%" in format_line("b", prev, cur, 1.0)
