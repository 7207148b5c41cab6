"""``xengine correlate --format meerkat``: the keys' checks (one line naming the
key, exit 2, before anything binds) and a live instance fed by simulated MeerKAT F-engines
over UDP, writing UVH5 files and a visibility stream at once."""

from __future__ import annotations

import io
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from tests.helpers.service import BASE, env, merged, write_config
from tests.helpers.spead import meerkat_formula, receive_heaps
from xengine_block.service.config import ConfigError, load_config
from xengine_block.sim.meerkat import MeerkatFEngines

MEERKAT = merged(BASE, capture={"format": "meerkat", "nchan": 16, "chan0": 16,
                                "total_channels": 64, "spectra_per_heap": 256},
                 correlator={"backend": "cpu", "integration_spectra": 768})
del MEERKAT["correlator"]["ninteg"]

BAD = [
    ({"capture": {"spectra_per_heap": 70000}}, "capture.spectra_per_heap"),
    ({"capture": {"samples_between_spectra": 0}}, "capture.samples_between_spectra"),
    ({"capture": {"chan0": 8}}, "capture.chan0"),
    ({"capture": {"total_channels": 40}}, "capture.total_channels"),
    ({"capture": {"total_channels": 16}}, "capture.total_channels"),  # chan0 + nchan > it
    ({"capture": {"sample_bits": 4}}, "capture.sample_bits"),
    ({"capture": {"format": "skarab"}}, "capture.format"),
    ({"capture": {"nchan": 1 << 20, "chan0": 0, "total_channels": 1 << 20}},
     "capture.nchan"),  # a frame over 1 GiB
    ({"correlator": {"integration_spectra": 1000}}, "correlator.integration_spectra"),
    ({"correlator": {"ninteg": 2}}, "correlator.integration_spectra"),  # both given
    ({"output": {"spead": "udp://somewhere:7148"}}, "output.spead"),
    ({"output": {"spead_rate_factor": -1}}, "output.spead_rate_factor"),
]


@pytest.mark.parametrize("change,key", BAD, ids=[k for _, k in BAD])
def test_each_bad_meerkat_key_is_named(tmp_path, change, key):
    with pytest.raises(ConfigError) as info:
        load_config(write_config(tmp_path / "c.toml", merged(MEERKAT, **change)))
    assert info.value.key == key
    assert str(info.value).startswith(f"{key}: ") and "\n" not in str(info.value)


def test_meerkat_rules_that_need_several_keys(tmp_path):
    cfg = merged(MEERKAT, correlator={"integration_spectra": None})
    del cfg["correlator"]["integration_spectra"]
    del cfg["capture"]["total_channels"]
    with pytest.raises(ConfigError, match="^capture.total_channels: is required"):
        load_config(write_config(tmp_path / "a.toml", cfg))  # chan0 > 0: 2 * total unknown
    cfg["capture"]["samples_between_spectra"] = 128
    c = load_config(write_config(tmp_path / "b.toml", cfg))
    assert c.samples_between_spectra == 128
    assert c.integration_spectra == round(40e3 / 256) * 256  # whole heaps near one second
    with pytest.raises(ConfigError, match="^correlator.ninteg: "):
        load_config(write_config(tmp_path / "c.toml", merged(cfg, correlator={"ninteg": 2})))
    out = merged(MEERKAT, output={"spead": "udp://127.0.0.1:9"})
    del out["output"]["directory"]
    assert load_config(write_config(tmp_path / "d.toml", out)).directory is None
    del out["output"]["spead"]
    with pytest.raises(ConfigError, match="^output.directory: is required"):
        load_config(write_config(tmp_path / "e.toml", out))
    xeng = merged(BASE, correlator={"integration_spectra": 480 * 7})
    del xeng["correlator"]["ninteg"]
    assert load_config(write_config(tmp_path / "f.toml", xeng)).dump_spectra == 480 * 7
    with pytest.raises(ConfigError, match="^correlator.integration_spectra: 1000 is not"):
        load_config(write_config(tmp_path / "g.toml", merged(
            xeng, correlator={"integration_spectra": 1000})))


def test_cli_meerkat_bad_key_is_one_line_exit_2_and_binds_nothing(tmp_path):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = write_config(tmp_path / "c.toml", merged(MEERKAT, capture={
        "sources": [f"udp://127.0.0.1:{port}"]}))
    for flags, key in ((["--spectra-per-heap", "70000"], "capture.spectra_per_heap"),
                       (["--chan0", "24"], "capture.chan0")):
        p = subprocess.run([sys.executable, "-m", "xengine_block.cli", "correlate", str(cfg),
                            *flags], capture_output=True, text=True, env=env(), timeout=120)
        assert p.returncode == 2, p.stderr
        assert p.stderr.strip().count("\n") == 0 and key in p.stderr
        assert not (tmp_path / "out").exists()
    p = subprocess.run([sys.executable, "-m", "xengine_block.cli", "correlate", str(cfg),
                        "--samples-between-spectra", "0"], capture_output=True, text=True,
                       env=env(), timeout=120)
    assert p.returncode == 2 and "--samples-between-spectra" in p.stderr.splitlines()[-1]


def test_live_meerkat_instance_writes_uvh5_and_a_visibility_stream(tmp_path):
    from xengine_block.service.live import CorrelatorService

    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    got: list = []
    receiver, thread = receive_heaps(sock, got)
    cfg = load_config(write_config(tmp_path / "c.toml", merged(MEERKAT, output={
        "spead": f"udp://127.0.0.1:{sock.getsockname()[1]}", "spead_rate_factor": 0})))
    svc = CorrelatorService(cfg, stdout=io.StringIO())
    runner = threading.Thread(target=svc.run)
    runner.start()
    try:
        while not svc.capture.receiving.is_set():
            time.sleep(0.01)
        port = svc.endpoints[0].port
        rng = np.random.default_rng(11)
        x = rng.integers(-128, 128, (16, 16, 12 * 256, 2), dtype=np.int8)
        eng = MeerkatFEngines.udp("127.0.0.1", port, n_ants=8, nchan=16, spectra_per_heap=256,
                                  samples_between_spectra=128, frequency=16, rate_gbps=0.3)
        for h in range(12):  # heap times 30..41: dumps of 3 heaps at 30, 33, 36, 39
            eng.send(x[:, :, h * 256:(h + 1) * 256], (30 + h) * 256)
        eng.close()
        deadline = time.monotonic() + 30
        while svc.chain.integrate.dumps < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        svc.stop()
        runner.join(30)
        thread.join(10)
        receiver.stop()
        sock.close()
    assert not runner.is_alive()
    assert svc.chain.writer.dumps_written >= 3
    assert [h["timestamp"] // (256 * 128) for h in got][:3] == [30, 33, 36]
    for h in got[:3]:
        start = h["timestamp"] // (256 * 128) - 30
        assert np.array_equal(h["xeng_raw"], meerkat_formula(x[:, :, start * 256:
                                                               (start + 3) * 256]))
