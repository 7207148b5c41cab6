"""``xengine correlate``: config validation, a live run over loopback UDP stopped by SIGTERM,
the Prometheus endpoint, start-up errors."""

from __future__ import annotations

import argparse
import io
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import pyuvdata

from tests.conftest import random_frames
from tests.helpers.service import (
    BASE,
    Instance,
    env,
    merged,
    send,
    write_config,
    write_latin1_config,
)
from xengine_block.array import default_array
from xengine_block.backends import availability
from xengine_block.blocks.writer import WRITER_COUNTERS
from xengine_block.capture.spead import frame_datagrams
from xengine_block.frames import frames_to_natural
from xengine_block.geometry import Geometry
from xengine_block.reference import reference_full
from xengine_block.service.config import (
    KEYS,
    RELOAD_RESULTS,
    REQUIRED,
    ConfigError,
    ServiceConfig,
    add_flags,
    load_config,
)

# ---------------------------------------------------------------------------- validation

BAD = [  # (change to BASE, key the one-line error must name)
    ({"nant": 0}, "nant"),
    ({"nant": "eight"}, "nant"),
    ({"array": "missing.toml", "nant": None}, "array"),
    ({"array": "a.toml"}, "nant"),
    ({"band": {"sync_time": -1.0}}, "band.sync_time"),
    ({"band": {"fs_hz": 0}}, "band.fs_hz"),
    ({"band": {"freq0_hz": "150 MHz"}}, "band.freq0_hz"),
    ({"band": {"chan_bw_hz": -5.0}}, "band.chan_bw_hz"),
    ({"capture": {"sources": ["tcp://127.0.0.1:7148"]}}, "capture.sources"),
    ({"capture": {"sources": ["udp://127.0.0.1:70000"]}}, "capture.sources"),
    ({"capture": {"sources": ["udp://localhost:7148"]}}, "capture.sources"),
    ({"capture": {"sources": []}}, "capture.sources"),
    ({"capture": {"sources": ["udp://127.0.0.1:7148", "udp://127.0.0.1:7148"]}},
     "capture.sources"),
    ({"capture": {"sources": ["udp://239.1.2.3:7148"]}}, "capture.interface"),
    ({"capture": {"interface": "eth0"}}, "capture.interface"),
    ({"capture": {"chan0": -9}}, "capture.chan0"),
    ({"capture": {"nchan": 10}}, "capture.nchan"),
    ({"capture": {"npacket": 137}}, "capture.npacket"),
    ({"capture": {"npacket": 34953, "sample_bits": 4}}, "capture.npacket"),
    ({"capture": {"sample_bits": 6}}, "capture.sample_bits"),
    ({"capture": {"sample_bits": "four"}}, "capture.sample_bits"),
    ({"capture": {"sample_bits": True}}, "capture.sample_bits"),
    ({"capture": {"nibble_order": "big"}}, "capture.nibble_order"),
    ({"capture": {"window": 0}}, "capture.window"),
    ({"capture": {"buffer_bytes": 10}}, "capture.buffer_bytes"),
    ({"capture": {"chanO": 0}}, "capture.chanO"),
    ({"correlator": {"backend": "gpu"}}, "correlator.backend"),
    ({"correlator": {"ninteg": 0}}, "correlator.ninteg"),
    ({"output": {"directory": ""}}, "output.directory"),
    ({"output": {"directory": "c.toml/out"}}, "output.directory"),  # a file on the way
    ({"output": {"directory": "/proc/xengine_out"}}, "output.directory"),  # ENOENT, as root
    ({"output": {"prefix": 3}}, "output.prefix"),
    ({"output": {"dumps_per_file": 0}}, "output.dumps_per_file"),
    ({"output": {"seconds_per_file": 0}}, "output.seconds_per_file"),
    ({"output": {"dumps_per_file": 2, "seconds_per_file": 60.0}}, "output.seconds_per_file"),
    ({"output": {"quicklook": "maybe"}}, "output.quicklook"),
    ({"monitor": {"metrics_port": 65536}}, "monitor.metrics_port"),
    ({"monitor": {"metrics_address": "everywhere"}}, "monitor.metrics_address"),
    ({"monitor": {"like_top_s": -1}}, "monitor.like_top_s"),
    ({"extra": {"a": 1}}, "extra"),
    ({"chan0": 9}, "chan0"),
    ({"correlator": {"threads": 0}}, "correlator.threads"),
    ({"correlator": {"threads": 1}}, "correlator.threads"),  # BASE runs backend cpu
    ({"cpu": {"xengine": [10_000]}}, "cpu.xengine"),  # no such core
    ({"cpu": {"capture": []}}, "cpu.capture"),
    ({"cpu": {"output": "0-x"}}, "cpu.output"),
    ({"output": {"directory": "out", "formats": ["uvh5", "fits"]}}, "output.formats"),
    ({"output": {"directory": "out", "formats": []}}, "output.formats"),
    ({"output": {"directory": "out", "phase_centre": "10,100"}}, "output.phase_centre"),
]


@pytest.mark.parametrize("change,key", BAD, ids=[k for _, k in BAD])
def test_each_bad_key_is_named(tmp_path, change, key):
    cfg = write_config(tmp_path / "c.toml", merged(BASE, **change))
    with pytest.raises(ConfigError) as info:
        load_config(cfg)
    assert info.value.key == key
    assert str(info.value).startswith(f"{key}: ") and "\n" not in str(info.value)


@pytest.mark.parametrize("key", [k for k in KEYS if k.default is REQUIRED],
                         ids=lambda k: k.dotted)
def test_missing_required_keys_are_named(tmp_path, key):
    cfg = merged(BASE)
    cfg[key.section] = {k: v for k, v in cfg[key.section].items() if k != key.name}
    with pytest.raises(ConfigError, match=f"^{key.dotted}: is required"):
        load_config(write_config(tmp_path / "c.toml", cfg))


def test_flags_override_keys_and_defaults_fill_in(tmp_path):
    cfg = load_config(write_config(tmp_path / "c.toml", BASE),
                      {"chan0": 18, "seconds_per_file": 0.5, "sources": None})
    assert cfg.chan0 == 18 and cfg.window == 8 and cfg.chan_bw_hz == 40e3
    assert cfg.sky["freq0_hz"] == 150e6 + 18 * 40e3  # the header's freq0 is this instance's
    assert cfg.directory == tmp_path / "out"  # relative to the config file
    # a dump is 2 frames x 4 packets x 480 spectra / 40 kHz = 0.096 s
    assert cfg.dumps_per_file == round(0.5 / 0.096)


def test_cpu_keys_pin_the_blocks(tmp_path):
    """cpu.capture / cpu.xengine / cpu.output reach the blocks' ``core`` (a TOML array or a
    CPU list flag); with the native backend and no correlator.threads, one worker per core."""
    from xengine_block.runtime.affinity import usable_cores
    from xengine_block.service.live import CorrelatorService

    last = max(usable_cores())
    cfg = load_config(write_config(tmp_path / "c.toml", merged(
        BASE, cpu={"capture": last, "output": [last]})), {"xengine": (last,)})
    assert (cfg.capture, cfg.xengine, cfg.output) == ((last,), (last,), (last,))
    parser = argparse.ArgumentParser()
    add_flags(parser)
    flag = parser.parse_args(["--xengine-cores", f"0-{last}"]).xengine
    flags = load_config(write_config(tmp_path / "d.toml", BASE), {"xengine": flag})
    assert flags.xengine == tuple(range(last + 1))
    svc = CorrelatorService(cfg, stdout=io.StringIO())
    try:
        assert svc.capture.core == (last,) and svc.chain.xengine.core == (last,)
        assert svc.chain.integrate.core == (last,) and svc.chain.writer.core == (last,)
    finally:
        svc.source.close()
    if availability().get("native", (False,))[0]:
        native = load_config(write_config(tmp_path / "e.toml", merged(
            BASE, correlator={"backend": "native"}, cpu={"xengine": [last]})))
        assert native.backend_choice == ("native", {"nthreads": 1})


def test_sample_bits_and_nibble_order_reach_the_geometry(tmp_path):
    cfg = load_config(write_config(tmp_path / "c.toml", merged(
        BASE, capture={"sample_bits": 4, "nibble_order": "re_low", "npacket": 137})))
    g = cfg.geometry
    assert (g.sample_bits, g.nibble_order, g.npacket, g.payload_bytes) == (4, "re_low", 137, 4320)
    assert load_config(write_config(tmp_path / "d.toml", BASE)).geometry.sample_bits == 8
    flags = load_config(write_config(tmp_path / "e.toml", BASE),
                        {"sample_bits": 4, "nibble_order": None})
    assert (flags.geometry.sample_bits, flags.geometry.nibble_order) == (4, "re_high")


@pytest.mark.skipif(not availability().get("native", (False,))[0],
                    reason="the native backend is unavailable here")
def test_threads_reach_the_native_backend(tmp_path):
    """correlator.threads = 1: the X-engine's native backend runs one worker thread, leaving
    the capture and writer a core (bench_pipeline.py's inproc_dedicated)."""
    from xengine_block.service.live import CorrelatorService

    cfg = load_config(write_config(tmp_path / "c.toml", merged(
        BASE, correlator={"backend": "auto", "threads": 1})))
    assert cfg.backend_choice == ("native", {"nthreads": 1})
    svc = CorrelatorService(cfg, stdout=io.StringIO())
    try:
        assert svc.chain.xengine.backend.name == "native"
        assert svc.chain.xengine.backend.nthreads == 1
    finally:
        svc.source.close()
    default = load_config(write_config(tmp_path / "d.toml", BASE))
    assert default.backend_choice == ("cpu", None)


def test_cli_bad_key_is_one_line_exit_2_and_binds_nothing(tmp_path):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = write_config(tmp_path / "c.toml", merged(BASE, capture={
        "sources": [f"udp://127.0.0.1:{port}"], "nchan": 10}))
    p = subprocess.run([sys.executable, "-m", "xengine_block.cli", "correlate", str(cfg)],
                       capture_output=True, text=True, env=env(), timeout=120)
    assert p.returncode == 2
    assert p.stderr.strip().count("\n") == 0 and "capture.nchan" in p.stderr
    assert not (tmp_path / "out").exists()
    # a bad flag value is argparse's one line, exit 2
    p = subprocess.run([sys.executable, "-m", "xengine_block.cli", "correlate", str(cfg),
                        "--chan0", "-1"], capture_output=True, text=True, env=env(), timeout=120)
    assert p.returncode == 2 and "--chan0" in p.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("problem", ["port", "interface", "directory"])
def test_startup_errors_are_one_clear_line(tmp_path, problem):
    busy = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    busy.bind(("127.0.0.1", 0))
    change = {
        "port": {"capture": {"sources": [f"udp://127.0.0.1:{busy.getsockname()[1]}"]}},
        "interface": {"capture": {"sources": ["udp://239.255.7.7:0"], "interface": "192.0.2.77"}},
        # unwritable even for root: a configuration error (exit 2), found before start-up
        "directory": {"output": {"directory": "file/out"}},
    }[problem]
    (tmp_path / "file").write_text("not a directory")
    cfg = write_config(tmp_path / "c.toml", merged(BASE, **change))
    try:
        p = subprocess.run([sys.executable, "-m", "xengine_block.cli", "correlate", str(cfg)],
                           capture_output=True, text=True, env=env(), timeout=120)
    finally:
        busy.close()
    assert p.returncode == (2 if problem == "directory" else 1), p.stderr
    line = p.stderr.strip()
    assert "\n" not in line
    assert {"port": "already in use", "interface": "192.0.2.77",
            "directory": "output.directory: "}[problem] in line


# ---------------------------------------------------------------------------- live run


def test_live_run_sigterm_every_dump_readable_and_metrics_equal_summary(tmp_path):
    pyuvdata = pytest.importorskip("pyuvdata")
    cfg = write_config(tmp_path / "c.toml", merged(BASE, output={"dumps_per_file": 2},
                                                   monitor={"metrics_port": 0}))
    g = Geometry(nstream=16, nchan=9, npacket=4)
    inst = Instance(cfg)
    try:
        port = inst.port
        frames = random_frames(g, 8 * 5, seed=3)  # 5 dumps of 2 x 4 frames
        bad = frame_datagrams(frames[:1], g, 0, chan0=9, cnt0=1 << 20)
        extra = [d for *_, d in bad[:3]]  # channels 9.. are not this instance's: bad_channel
        sent = send(frames, g, port, extra=extra)
        scraped = inst.wait_packets(sent)
        mid = inst.scrape()
    finally:
        summary = inst.finish()
    cap = summary["capture"]
    assert cap["packets"] == sent and cap["bad_channel"] == 3 and cap["missing"] == 0
    assert cap["heaps"] == len(frames) * g.nstream
    # the endpoint shows the same counters: everything is counted before the stop, except the
    # frames not yet delivered at the scrape (those spead2 still holds, window + max_ahead, and
    # any waiting for ring space on a loaded machine), which the stop delivers (heaps, frames)
    for name, value in cap.items():
        got = mid[f"xengine_capture_{name}_total"]
        if name in ("heaps", "frames"):
            per = g.nstream if name == "heaps" else 1
            assert 0 <= value - got and (value - got) % per == 0
        else:
            assert got == value, name
    assert scraped["xengine_capture_packets_total"] == sent
    assert any(k.startswith("xengine_backend_info{backend=cpu") for k in mid)
    assert any(k.startswith("xengine_block_acquire_seconds_total{block=") for k in mid)
    assert any(k.startswith("xengine_ring_fill_ratio{ring=") for k in mid)
    assert mid["xengine_dumps_written_total"] <= summary["dumps_written"]

    # every completed dump is in a readable file, none twice, exact
    assert summary["dumps_written"] == 5 and len(summary["files"]) == 3  # 2 + 2 + 1
    uv = pyuvdata.UVData.from_file(summary["files"], axis="blt")
    assert uv.Ntimes == 5 and not uv.flag_array.any() and (uv.nsample_array == 1).all()
    re, im = reference_full(frames_to_natural(frames[:8], g))  # first dump: K[c, j, k]
    arr = default_array(8)
    a1, a2 = 2, 5
    blt = np.flatnonzero((uv.ant_1_array == arr.antenna_numbers[a1]) &
                         (uv.ant_2_array == arr.antenna_numbers[a2]))[0]
    xy = list(uv.polarization_array).index(-7)  # x of ant_1, y of ant_2: K[s2, s1]
    s1, s2 = 2 * a1, 2 * a2 + 1
    np.testing.assert_array_equal(uv.data_array[blt, :, xy], re[:, s2, s1] + 1j * im[:, s2, s1])


def test_restart_continues_into_new_files(tmp_path):
    cfg = write_config(tmp_path / "c.toml", merged(BASE))
    g = Geometry(nstream=16, nchan=9, npacket=4)
    files = []
    for run in range(2):
        inst = Instance(cfg)
        try:
            sent = send(random_frames(g, 16, seed=run), g, inst.port, time_tag=run * 16 * 480)
            inst.wait_packets(sent)
        finally:
            summary = inst.finish()
        files.append(summary["files"])
    assert files[0] and files[1] and not set(files[0]) & set(files[1])
    assert len(list((tmp_path / "out").glob("*.uvh5"))) == len(files[0]) + len(files[1])


def test_restart_on_replayed_data_writes_a_new_file_beside_the_old_one(tmp_path):
    """The same recording replayed into a restarted instance: same first dump time, so the
    second file is ``...-1.uvh5`` (was: exit 1, refusing to overwrite); both hold the data."""
    cfg = write_config(tmp_path / "c.toml", merged(BASE))
    g = Geometry(nstream=16, nchan=9, npacket=4)
    frames = random_frames(g, 16, seed=5)
    files = []
    for _ in range(2):
        inst = Instance(cfg)
        try:
            inst.wait_packets(send(frames, g, inst.port, time_tag=0))
        finally:
            summary = inst.finish()
        files.append([Path(f) for f in summary["files"]])
    assert files[0] and len(files[1]) == len(files[0])
    assert [f.name for f in files[1]] == [f.stem + "-1.uvh5" for f in files[0]]
    for first, again in zip(files[0], files[1], strict=True):
        a, b = pyuvdata.UVData.from_file(first), pyuvdata.UVData.from_file(again)
        np.testing.assert_array_equal(a.data_array, b.data_array)
        assert a.Ntimes == b.Ntimes >= 1


def test_reloaded_applies_live_keys_keeps_flags_and_names_the_rest(tmp_path):
    """SIGHUP's re-read (ServiceConfig.reloaded): the keys that can change live take their new
    values, the flags given at start still override the file, any other changed key is named
    and keeps its running value; a file that does not load raises, naming why."""
    path = write_config(tmp_path / "c.toml", BASE)
    running = load_config(path, {"chan0": 9, "window": None})
    write_config(path, merged(BASE, band={"sync_time": 1.8e9}, capture={"window": 4},
                              output={"prefix": "night_", "seconds_per_file": 1.0},
                              correlator={"backend": "emulator"}))
    new, applied, refused = running.reloaded()
    assert applied == {"sync_time": 1.8e9, "prefix": "night_", "seconds_per_file": 1.0}
    assert refused == ["capture.window", "correlator.backend"]
    assert (new.sync_time, new.prefix, new.dumps_per_file) == (1.8e9, "night_", round(1 / 0.096))
    assert (new.window, new.backend, new.chan0) == (8, "cpu", 9)  # running values; the flag
    assert new.sky["sync_time"] == 1.8e9 and running.sync_time == 1.7e9  # (a new object)
    write_config(path, merged(BASE, capture={"chan0": 18}))  # overridden by the flag: no change
    assert running.reloaded()[1:] == ({}, [])
    path.write_text("[band]\nsync_time = 'soon'\n")
    with pytest.raises(ConfigError, match="^band.sync_time: "):
        running.reloaded()
    with pytest.raises(ConfigError, match="without a configuration file"):
        load_config(None, {k: v for k, v in running.values.items()
                           if k in ("sync_time", "fs_hz", "freq0_hz", "sources",
                                    "directory")}).reloaded()


def test_a_file_not_utf8_is_one_error_naming_the_byte(tmp_path):
    """Not UTF-8: a ConfigError for the file, at start one line and exit 2 (before: tomllib's
    UnicodeDecodeError, a traceback; on SIGHUP, the end of the service)."""
    path = tmp_path / "c.toml"
    line = write_latin1_config(path, BASE)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == f"(file): not UTF-8, as TOML must be: byte 0xe9 on line {line}"
    p = subprocess.run([sys.executable, "-m", "xengine_block.cli", "correlate", str(path)],
                       capture_output=True, text=True, env=env(), timeout=120)
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
    assert f"{path}: (file): not UTF-8" in p.stderr


@pytest.fixture
def service(tmp_path):
    """A CorrelatorService built (not run) from BASE in tmp_path/c.toml; SIGHUP's work is its
    ``reload``."""
    from xengine_block.service.live import CorrelatorService

    svc = CorrelatorService(load_config(write_config(tmp_path / "c.toml", BASE)),
                            stdout=io.StringIO())
    yield svc
    svc.source.close()


def sighup_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("SIGHUP")]


def test_reload_that_fails_in_any_way_is_invalid(service, monkeypatch, caplog):
    """A re-read that fails in any way (a file not UTF-8; an exception nobody foresaw) is one
    ``invalid``, one log line with the reason, and the running configuration stays (before:
    anything but ConfigError and OSError left the main thread and ended the service)."""
    write_latin1_config(service.config.source_file, BASE)

    def unforeseen(self):
        raise RuntimeError("something unforeseen")

    with caplog.at_level("WARNING"):
        assert service.reload() == "invalid"
        monkeypatch.setattr(ServiceConfig, "reloaded", unforeseen)
        assert service.reload() == "invalid"
    assert service.reloads == {"applied": 0, "refused": 0, "invalid": 2}
    assert service.config.prefix == service.chain.writer.prefix == "xengine_"
    utf8, other = sighup_lines(caplog)
    assert "(file): not UTF-8" in utf8 and "the running configuration stays" in utf8
    assert "(RuntimeError: something unforeseen); the running configuration stays" in other


def test_reload_probes_nothing(service, monkeypatch, caplog):
    """SIGHUP's re-read while the output directory takes no file (a quota) and no backend
    would probe usable: output.prefix applies, and the probed keys that changed are refused by
    name (before: the start-up probes ran again and refused the whole file as invalid)."""
    from xengine_block.backends import BackendUnavailable
    from xengine_block.service import config as config_module

    def no_backend(*args):
        raise BackendUnavailable("no backend is usable: probing is not allowed here")

    monkeypatch.setattr(config_module, "directory_problem",
                        lambda p: f"cannot write in {p}: Disk quota exceeded")
    monkeypatch.setattr(config_module, "choose_backend", no_backend)
    path, running = service.config.source_file, service.config.directory
    with caplog.at_level("WARNING"):
        write_config(path, merged(BASE, output={"prefix": "night_"}))
        assert service.reload() == "applied"
        assert service.chain.writer.prefix == "night_"
        write_config(path, merged(BASE, output={"prefix": "n2_", "directory": "other"},
                                  correlator={"backend": "native"}))
        assert service.reload() == "refused"
    assert service.reloads == {"applied": 1, "refused": 1, "invalid": 0}
    assert service.chain.writer.prefix == service.config.prefix == "n2_"
    assert service.config.directory == running and service.config.backend == "cpu"
    applied, refused, also = sighup_lines(caplog)
    assert "output.prefix = night_" in applied and "output.prefix = n2_" in also
    assert "correlator.backend, output.directory cannot change while running" in refused


def test_deploy_doc_says_what_the_service_does_through_a_night():
    """docs/deploy.md's Operations part names every key that can change live, and the
    metrics that show restarts, write failures and reloads."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "deploy.md").read_text()
    ops = doc[doc.index("## Operations"):doc.index("## Metrics")]
    for k in KEYS:
        assert (f"`{k.dotted}`" in ops) == bool(k.live), k.dotted
    metrics = doc[doc.index("## Metrics"):]
    assert "xengine_capture_restarts_total" in ops and "sequences, restarts)" in metrics
    for name in [*(f"xengine_{n}_total" for n in WRITER_COUNTERS),
                 "xengine_output_write_failing", "xengine_config_reloads_total",
                 "xengine_sync_time_seconds"]:
        assert name in ops and name in metrics, name
    for result in RELOAD_RESULTS:
        assert f'"{result}"' in ops, result


def test_every_key_has_its_flag_on_the_command_line():
    """The docs' key table is generated from KEYS (docs/_ext/reference_tables.py), so each
    key's ``flag`` must be the flag ``xengine correlate`` really takes."""
    import argparse

    p = argparse.ArgumentParser()
    add_flags(p)
    flags = {s for a in p._actions for s in a.option_strings}
    assert {k.flag for k in KEYS} <= flags, sorted({k.flag for k in KEYS} - flags)
    doc = (Path(__file__).resolve().parents[2] / "docs" / "deploy.md").read_text()
    assert "](config.md)" in doc  # deploy.md points to the generated table, not a copy


def test_docs_example_config_is_valid(tmp_path):
    page = (Path(__file__).resolve().parents[2] / "docs" / "config.md").read_text()
    start = page.index("# x0.toml\n")
    text = page[start:page.index("```", start)]
    cfg = load_config(write_text(tmp_path / "x0.toml", text))
    assert cfg.geometry.nchan == 18 and cfg.sources[0].multicast and cfg.dumps_per_file >= 1


def write_text(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_formats_uvh5_and_ms_write_both_files_as_the_dumps_come(tmp_path):
    """``[output] formats = ["uvh5", "ms"]``: a Measurement Set beside each UVH5 file, one
    row per baseline and dump of the UVH5 file, phased to the configured centre."""
    tables = pytest.importorskip("casacore.tables", reason="python-casacore (ms extra)")
    cfg = write_config(tmp_path / "c.toml", merged(
        BASE, output={"directory": str(tmp_path / "out"), "formats": ["uvh5", "ms"],
                      "phase_centre": "120,-30"}))
    g = Geometry(nstream=16, nchan=9, npacket=4)
    inst = Instance(cfg)
    try:
        inst.wait_packets(send(random_frames(g, 16, seed=3), g, inst.port, time_tag=0))
    finally:
        summary = inst.finish()
    assert summary["files"] and len(summary["ms_files"]) == len(summary["files"])
    for uvh5, ms in zip(summary["files"], summary["ms_files"], strict=True):
        assert Path(ms) == Path(uvh5).with_suffix(".ms")
        uv = pyuvdata.UVData.from_file(uvh5)
        with tables.table(ms, ack=False) as t:
            assert t.nrows() == uv.Nblts
        with tables.table(f"{ms}::FIELD", ack=False) as f:
            assert np.rad2deg(f.getcell("PHASE_DIR", 0)[0]) == pytest.approx([120, -30])
