"""katgpucbf's own F-engine simulator, ``fsim``, as a second, independent sender.

fsim (``katgpucbf/fsim/main.py``) needs Python >= 3.12 and katgpucbf's dependencies
(aiokatcp, katsdpservices, katsdptelstate, prometheus-async, numba, spead2). The test runs it
in its own interpreter: ``$XENGINE_FSIM_PYTHON`` (a Python >= 3.12 that imports
``katgpucbf.fsim.main``; ``$XENGINE_KATGPUCBF_SRC``, a katgpucbf source tree, is put on its
path when set), else this interpreter when it qualifies; otherwise it skips, saying why.
fsim sends 8 F-engines' heaps to our capture over loopback UDP, unpaced to a unicast address;
the frames are compared with fsim's own payload pattern (its ``make_heap_payload``, computed
in that interpreter) and every counter is checked. To run it: a Python 3.12 venv (``pip install
spead2 numba numpy aiokatcp 'katsdpservices[aiomonitor]' katsdptelstate prometheus-async
prometheus-client aiohttp``) and katgpucbf's ``src/`` at 1e38bdc.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from xengine_block.capture.meerkat import MeerkatFormat
from xengine_block.capture.receive import Capture
from xengine_block.capture.transports import UdpSource

A, CHANNELS, CPS = 8, 64, 16  # array size, band channels, channels per substream
JONES = CHANNELS * 256  # 256 spectra per heap
T = JONES // CHANNELS


def fsim_python() -> str:
    """An interpreter that runs fsim, or skip with the reason."""
    cand = os.environ.get("XENGINE_FSIM_PYTHON") or sys.executable
    env = fsim_env()
    probe = subprocess.run([cand, "-c", "import sys; assert sys.version_info >= (3, 12), "
                            "sys.version; import katgpucbf.fsim.main"],
                           capture_output=True, text=True, env=env, timeout=120)
    if probe.returncode:
        why = probe.stderr.strip().splitlines()[-1] if probe.stderr.strip() else "failed"
        pytest.skip(f"katgpucbf's fsim needs Python >= 3.12 with katgpucbf importable "
                    f"(set XENGINE_FSIM_PYTHON, XENGINE_KATGPUCBF_SRC); {cand}: {why}")
    return cand


def fsim_env() -> dict[str, str]:
    env = dict(os.environ)
    src = os.environ.get("XENGINE_KATGPUCBF_SRC")
    if src:
        env["PYTHONPATH"] = os.path.join(src, "src") + os.pathsep + env.get("PYTHONPATH", "")
    return env


PATTERN = """
import json, sys, numpy as np
from katgpucbf.fsim.main import make_heap_payload
out = np.empty((8, {A}, {CPS}, {T}, 2, 2), np.int8)
for slot in range(8):
    for a in range({A}):
        make_heap_payload(out[slot, a], slot, a, {A})
sys.stdout.buffer.write(out.tobytes())
"""


def test_fsim_heaps_are_captured_exactly():
    py = fsim_python()
    pattern = subprocess.run([py, "-c", PATTERN.format(A=A, CPS=CPS, T=T)],
                             capture_output=True, env=fsim_env(), timeout=300, check=True)
    payload = np.frombuffer(pattern.stdout, np.int8).reshape(8, A, CPS, T, 2, 2)
    fmt = MeerkatFormat(A, CPS, samples_between_spectra=2 * CHANNELS, spectra_per_heap=T)
    source = UdpSource("127.0.0.1", 0, buffer_size=16 << 20)
    source.bind()
    cap = Capture(source, fmt, chan0=0, copy=True, idle_timeout=3.0)
    frames: list = []
    consumer = threading.Thread(target=lambda: frames.extend(cap))
    consumer.start()
    # 4 s at a slow ADC rate (1.6 ms per heap time): fsim paces itself and sends until killed.
    proc = subprocess.Popen([py, "-m", "katgpucbf.fsim.main", f"--array-size={A}",
                             f"--channels={CHANNELS}", f"--channels-per-substream={CPS}",
                             f"--jones-per-batch={JONES}", "--adc-sample-rate=2e6",
                             "--interface=lo", f"127.0.0.1:{source.port}"],
                            env=fsim_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        time.sleep(4.0)
    finally:
        proc.terminate()
        proc.wait(30)
    consumer.join(30)
    c = cap.counters()
    assert frames, (c, proc.stderr.read().decode()[-2000:])
    assert c["bad_timestamp"] == c["bad_size"] == c["bad_stream"] == c["bad_channel"] == 0
    assert c["metadata"] >= 1  # fsim's descriptors
    for f in frames[:-1]:  # the last may be cut by the kill
        heap_time = f.time_tag // T
        want = payload[heap_time % 8]  # fsim's slots repeat every 8 batches
        assert f.mask.all() and np.array_equal(f.frame, want), heap_time
    print(json.dumps({"frames": len(frames), **c}))
