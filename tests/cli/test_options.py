"""Every bad option of ``pipelines/fx.py`` and of every ``xengine`` subcommand: one line naming
the option, exit status 2, no traceback, and nothing created.

The parsers run in this process (fast); a few cases also run as real processes, to cover the
entry points themselves (``python -m xengine_block.cli`` must know every subcommand).
"""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.cli import assert_usage_error
from tests.helpers.service import BASE, write_config
from xengine_block.capture.recording import read_metadata
from xengine_block.cli import COMMANDS, SUBCOMMANDS, build_parser, main
from xengine_block.console import argtypes

ROOT = Path(__file__).resolve().parents[2]
FX = ROOT / "pipelines" / "fx.py"
SKY = ["--sync-time", "0", "--fs-hz", "40e3", "--freq0-hz", "150e6", "--chan-bw-hz", "40e3"]


@pytest.fixture(scope="module")
def fx():
    spec = importlib.util.spec_from_file_location("fx_under_test", FX)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def files(tmp_path):
    """Existing things to point options at, outside the working directory checked."""
    d = tmp_path / "given"
    d.mkdir()
    (d / "plain.txt").write_text("not TOML [[[")
    (d / "rec.pcap").write_bytes(b"\xd4\xc3\xb2\xa1" + bytes(20))
    (d / "rec2").mkdir()
    (d / "rec2" / "rec.pcap").write_bytes(b"x")
    (d / "side.pcap.json").mkdir()  # where a recording's sidecar would go
    write_config(d / "svc.toml", BASE)
    return d


@pytest.fixture
def busy_port():
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    yield str(sock.getsockname()[1])
    sock.close()


def expand(args: list[str], files: Path, busy_port: str) -> list[str]:
    return [a.replace("{files}", str(files)).replace("{busy}", busy_port) for a in args]


OUT = ["--out", "new_out"]
FX_CASES = [
    (["--nant", "0"], "--nant"), (["--nant", "129"], "--nant"), (["--nant", "x"], "--nant"),
    (["--array", "{files}/missing.toml"], "--array"), (["--array", "{files}/plain.txt"], "--array"),
    (["--array", "{files}"], "--array"),
    (["--nchan", "10"], "--nchan"), (["--nchan", "0"], "--nchan"),
    (["--npacket", "137"], "--npacket"), (["--npacket", "-1"], "--npacket"),
    (["--ninteg", "0"], "--ninteg"), (["--dumps", "0"], "--dumps"), (["--dumps", "1.5"], "--dumps"),
    (["--backend", "gpu"], "--backend"), (["--transport", "tcp"], "--transport"),
    (["--address", "999.1.1.1"], "--address"), (["--address", "no such host!"], "--address"),
    (["--port", "70000"], "--port"), (["--port", "-1"], "--port"), (["--port", "x"], "--port"),
    (["--port", "{busy}"], "--port"),
    (["--rate-gbps", "-1"], "--rate-gbps"), (["--rate-gbps", "nan"], "--rate-gbps"),
    (["--record", "{files}"], "--record"), (["--record", "{files}/plain.txt/x.pcap"], "--record"),
    (["--record", "{files}/side.pcap"], "--record"),
    (["--out", "{files}/plain.txt"], "--out"), (["--out", "{files}/plain.txt/sub"], "--out"),
    (["--fs-hz", "0"], "--fs-hz"), (["--fs-hz", "-4e4"], "--fs-hz"),
    (["--fs-hz", "inf"], "--fs-hz"),
    (["--freq0-hz", "-1"], "--freq0-hz"), (["--freq0-hz", "0"], "--freq0-hz"),
    (["--source-alt-az", "91", "0"], "--source-alt-az"),
    (["--source-alt-az", "x", "0"], "--source-alt-az"),
    (["--source-alt-az", "45", "nan"], "--source-alt-az"),
    (["--noise", "-1"], "--noise"), (["--noise", "x"], "--noise"),
    (["--seed", "-1"], "--seed"), (["--seed", "1.5"], "--seed"),
    (["--monitor", "-1"], "--monitor"), (["--monitor", "soon"], "--monitor"),
    (["--bogus"], ""),
]


@pytest.mark.parametrize(("args", "option"), FX_CASES,
                         ids=[" ".join(a) for a, _ in FX_CASES])
def test_fx_bad_option(fx, args, option, files, busy_port, tmp_path, monkeypatch, capsys):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)  # the default output directory (fx_out/run-*) would go here
    argv = expand(args, files, busy_port)
    assert_usage_error(fx.main, argv if option == "--out" else argv + OUT, option, capsys, work)


def test_fx_default_output_dir_is_checked_too(fx, tmp_path, monkeypatch, capsys):
    (tmp_path / "fx_out").write_text("a file where the default output directory goes")
    monkeypatch.chdir(tmp_path)
    assert_usage_error(fx.main, ["--nant", "2", "--port", "-3"], "--port", capsys, tmp_path)
    with pytest.raises(SystemExit) as info:
        fx.main(["--nant", "2", "--backend", "cpu"])
    assert info.value.code == 2 and "argument --out" in capsys.readouterr().err


SUBCOMMAND_CASES = [
    (["bench", "--nstream", "7"], "--nstream"), (["bench", "--nstream", "0"], "--nstream"),
    (["bench", "--nchan", "10"], "--nchan"), (["bench", "--npacket", "137"], "--npacket"),
    (["bench", "--repeat", "0"], "--repeat"), (["bench", "--backend", "gpu"], "--backend"),
    (["backends", "--extra"], ""),
    (["npu-model", "--nstream", "7"], "--nstream"), (["npu-model", "--nstream", "0"], "--nstream"),
    (["npu-model", "--bits", "5"], "--bits"), (["npu-model", "--device", "gpu"], "--device"),
    (["npu-model", "--design", "mine"], "--design"),
    (["npu-model", "--design", "published", "--nstream", "512"], "--nstream"),
    (["npu-model", "--design", "published", "--bits", "4"], "--bits"),
    (["npu-model", "--trace", "{files}/plain.txt/t.json"], "--trace"),
    (["npu-model", "--trace", "{files}"], "--trace"),
    (["npu-model", "--trace-calls", "0"], "--trace-calls"),
    (["quicklook", "{files}/missing.uvh5"], "file"), (["quicklook", "{files}/rec.pcap"], "file"),
    (["quicklook", "{files}/rec.pcap", "-o", "{files}"], "-o/--output"),
    (["reprocess", "{files}/rec.pcap", "-o", "out", "--ninteg", "0"], "--ninteg"),
    (["reprocess", "{files}/rec.pcap", "-o", "out", "--npacket", "x"], "--npacket"),
    (["reprocess", "{files}/missing.pcap", "-o", "out"], "inputs"),
    (["reprocess", "{files}/rec.pcap", "{files}/rec2/rec.pcap", "-o", "out"], "inputs"),
    (["reprocess", "{files}/rec.pcap", "-o", "{files}/plain.txt"], "-o/--out"),
    (["reprocess", "{files}/rec.pcap", "-o", "out", "--channels", "x:y"], "--channels"),
    (["reprocess", "{files}/rec.pcap", "-o", "out", "--channels", "5:5"], "--channels"),
    (["reprocess", "{files}/rec.pcap", "-o", "out", "--channels", "-1,2"], "--channels"),
    (["reprocess", "{files}/rec.pcap", "-o", "out", "--backend", "gpu"], "--backend"),
    (["reprocess", "{files}/rec.pcap", "-o", "out", "--workers", "0"], "--workers"),
    (["reprocess", "{files}/rec.pcap", "-o", "out", "--scheduler", "nowhere"], "--scheduler"),
    (["reprocess", "{files}/rec.pcap", "-o", "out", "--scheduler", "127.0.0.1:{busy}"],
     "--scheduler"),  # a UDP port: nothing accepts TCP there
    (["reprocess", "{files}/rec.pcap", "-o", "out", "--workers", "2", "--scheduler",
      "127.0.0.1:1"], "--scheduler"),
    (["record", "-o", "{files}/plain.txt", *SKY], "-o/--out"),
    (["record", "-o", "out", "--address", "1.2.3.4.5", *SKY], "--address"),
    (["record", "-o", "out", "--port", "-1", *SKY], "--port"),
    (["record", "-o", "out", "--port", "{busy}", *SKY], "--port"),
    (["record", "-o", "out", "--max-mb", "0", *SKY], "--max-mb"),
    (["record", "-o", "out", "--duration", "-1", *SKY], "--duration"),
    (["record", "-o", "out", "--idle-timeout", "0", *SKY], "--idle-timeout"),
    (["record", "-o", "out", "--array", "{files}/plain.txt", *SKY], "--array"),
    (["record", "-o", "out", "--nant", "200", *SKY], "--nant"),
    (["record", "-o", "out", "--nchan", "10", *SKY], "--nchan"),
    (["record", "-o", "out", "--npacket", "0", *SKY], "--npacket"),
    (["record", "-o", "out", "--chan0", "-1", *SKY], "--chan0"),
    (["record", "-o", "out", *SKY, "--sync-time", "nan"], "--sync-time"),
    (["record", "-o", "out", *SKY, "--fs-hz", "-1"], "--fs-hz"),
    (["record", "-o", "out", *SKY, "--freq0-hz", "-1"], "--freq0-hz"),
    (["record", "-o", "out", *SKY, "--chan-bw-hz", "0"], "--chan-bw-hz"),
    (["correlate", "--chan0", "-9"], "--chan0"), (["correlate", "--nchan", "0"], "--nchan"),
    (["correlate", "--source", "tcp://127.0.0.1:1"], "--source"),
    (["correlate", "--fs-hz", "-1"], "--fs-hz"), (["correlate", "--npacket", "0"], "--npacket"),
    (["correlate", "--metrics-port", "70000"], "--metrics-port"),
    (["correlate", "--quicklook", "maybe"], "--quicklook"),
    (["combine", "{files}/missing.uvh5", "-o", "out"], "inputs"),
    (["combine", "{files}", "-o", "{files}/plain.txt"], "-o/--out"),
    (["reprocess", "{files}/rec.pcap", "-o", "out", "--output-format", "fits"],
     "--output-format"),
    (["reprocess", "{files}/rec.pcap", "-o", "out", "--phase-centre", "1,2,3"],
     "--phase-centre"),
    (["convert", "{files}/missing.uvh5", "-o", "out.ms"], "inputs"),
    (["convert", "{files}/plain.txt", "-o", "out.ms"], "inputs"),
    (["convert", "{files}/plain.txt", "-o", "out.txt"], "-o/--out"),
    (["convert", "{files}/plain.txt", "-o", "{files}/plain.txt"], "-o/--out"),
    (["convert", "{files}/plain.txt", "-o", "out.ms", "--phase-centre", "north"],
     "--phase-centre"),
    (["convert", "{files}/plain.txt", "-o", "out.ms", "--phase-centre", "10,95"],
     "--phase-centre"),
    (["correlate", "--display", "nowhere"], "--display"),
    (["correlate", "--display", "1.2.3.4.5:80"], "--display"),
    (["correlate", "--display-history", "0"], "--display-history"),
    (["view", "{files}/missing.uvh5"], "FILE"),
    (["view", "{files}/plain.txt", "--address", "127.0.0.1:70000"], "--address"),
    (["view", "{files}/plain.txt", "--address", ":80"], "--address"),
    (["nosuchcommand"], "command"),
]


@pytest.mark.parametrize(("args", "option"), SUBCOMMAND_CASES,
                         ids=[" ".join(a) for a, _ in SUBCOMMAND_CASES])
def test_subcommand_bad_option(args, option, files, busy_port, tmp_path, monkeypatch, capsys):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    assert_usage_error(main, expand(args, files, busy_port), option, capsys, work)


def test_every_subcommand_is_covered():
    """A new subcommand must add its bad-option cases above (and use argtypes)."""
    build_parser()  # loads every subcommand module
    assert set(COMMANDS) == set(SUBCOMMANDS), "each cli/ module registers the command it names"
    covered = {args[0] for args, _ in SUBCOMMAND_CASES}
    assert set(COMMANDS) - {"backends"} <= covered, set(COMMANDS) - covered


@pytest.mark.parametrize("entry", [
    [sys.executable, "-m", "xengine_block.cli"],
    [sys.executable, str(ROOT / "pipelines" / "reprocess.py")],
], ids=["python -m xengine_block.cli", "pipelines/reprocess.py"])
def test_entry_points_know_every_subcommand(entry, tmp_path):
    argv = entry + (["reprocess"] if "-m" in entry else [])
    proc = subprocess.run([*argv, str(tmp_path / "none.pcap"), "-o", str(tmp_path / "o"),
                           "--ninteg", "0"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "xengine reprocess: error: argument inputs: "
        f"'{tmp_path / 'none.pcap'}': no such file (--help for usage)"]
    assert not (tmp_path / "o").exists()
    helps = subprocess.run([*entry[:3], "--help"] if "-m" in entry else [*entry, "--help"],
                           capture_output=True, text=True, timeout=120)
    assert helps.returncode == 0
    for name in COMMANDS if "-m" in entry else ["--allow-damaged"]:
        assert name in helps.stdout


def test_fx_process_bad_option_is_one_line(tmp_path):
    proc = subprocess.run([sys.executable, str(FX), "--freq0-hz", "-1", "--out",
                           str(tmp_path / "o")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "fx.py: error: argument --freq0-hz: must be > 0, got -1 (--help for usage)"]
    assert not (tmp_path / "o").exists()


def test_argtypes_accept_good_values(tmp_path):
    assert argtypes.port("0") == 0 and argtypes.port("65535") == 65535
    assert argtypes.positive_number("1e-3") == 1e-3
    assert argtypes.ipv4_address("127.0.0.1") == "127.0.0.1"
    assert argtypes.ipv4_address("localhost") == "127.0.0.1"
    assert argtypes.output_dir(str(tmp_path / "a" / "b")) == tmp_path / "a" / "b"
    assert not (tmp_path / "a").exists()
    assert argtypes.output_file(str(tmp_path / "c" / "x.pcap")) == tmp_path / "c" / "x.pcap"
    assert argtypes.number(-90, 90)("-90") == -90.0


# ------------------------------------------------------- unwritable and unreadable paths
# Every path option fails in one line naming it (exit 2), before anything
# starts, whatever the kernel's reason, as root too: ENOENT (/proc), a file where a directory
# belongs, EROFS (a read-only tmpfs, in a mount namespace of its own) and EACCES (as root: a
# process without CAP_DAC_OVERRIDE, for which permission bits count).

#: Every option that writes: (program, argv with {p} where the output goes, the option named).
WRITE_OPTIONS = [
    ("fx", ["--out", "{p}/out"], "--out"),
    ("fx", ["--out", "{p}"], "--out"),  # an existing directory that takes no new file
    ("fx", ["--record", "{p}/rec.pcap", "--out", "new_out"], "--record"),
    ("xengine", ["quicklook", "{files}/plain.txt", "-o", "{p}/q.png"], "-o/--output"),
    ("xengine", ["reprocess", "{files}/rec.pcap", "-o", "{p}/out"], "-o/--out"),
    ("xengine", ["record", "-o", "{p}/out", *SKY], "-o/--out"),
    ("xengine", ["combine", "{files}", "-o", "{p}/out"], "-o/--out"),
    ("xengine", ["correlate", "{files}/svc.toml", "--directory", "{p}/out"], "output.directory"),
]
#: Every option that reads, with {p}/secret a file that cannot be opened (EACCES only).
READ_OPTIONS = [
    ("fx", ["--array", "{p}/secret", "--out", "new_out"], "--array"),
    ("xengine", ["quicklook", "{p}/secret"], "file"),
    ("xengine", ["reprocess", "{p}/secret", "-o", "out"], "inputs"),
    ("xengine", ["reprocess", "{files}/rec.pcap", "-o", "out", "--array", "{p}/secret"],
     "--array"),
    ("xengine", ["record", "-o", "out", "--array", "{p}/secret", *SKY], "--array"),
    ("xengine", ["combine", "{p}/secret", "-o", "out"], "inputs"),
    ("xengine", ["correlate", "{p}/secret"], "config"),
]


def run_path_cases(cases: list, p: str, files: str, work: str) -> list[dict]:
    """Run each case in this process, in a fresh directory under ``work``: exit status, stderr,
    and what it left there. Also the body of the subprocesses below (``python -c``)."""
    import contextlib
    import io
    import os

    spec = importlib.util.spec_from_file_location("fx_paths", FX)
    fx = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fx)
    results = []
    for i, (program, args, option) in enumerate(cases):
        d = Path(work) / f"case{i}"
        d.mkdir()
        os.chdir(d)
        argv = [a.replace("{p}", p).replace("{files}", files) for a in args]
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            try:
                code = (fx.main if program == "fx" else main)(argv)
            except SystemExit as exc:
                code = exc.code
        results.append({"argv": argv, "option": option, "code": code, "err": err.getvalue(),
                        "left": sorted(os.listdir(d))})
    return results


def check_path_results(results: list[dict], reason: str, ncase: int) -> None:
    assert len(results) == ncase
    for r in results:
        lines = r["err"].strip().splitlines()
        assert r["code"] == 2, r
        assert len(lines) == 1 and "Traceback" not in r["err"], r
        assert r["option"] in lines[0] and reason in lines[0], r
        assert r["left"] == [], r  # nothing created


def in_subprocess(prefix: list[str], cases: list, p: Path, files: Path, work: Path
                  ) -> list[dict]:
    import json
    code = ("import json, sys; from tests.cli.test_options import WRITE_OPTIONS, READ_OPTIONS, "
            "run_path_cases as run; c = WRITE_OPTIONS + READ_OPTIONS; "
            "print(json.dumps(run([c[i] for i in json.loads(sys.argv[1])], *sys.argv[2:])))")
    everything = WRITE_OPTIONS + READ_OPTIONS
    proc = subprocess.run([*prefix, sys.executable, "-c", code,
                           json.dumps([everything.index(c) for c in cases]), str(p), str(files),
                           str(work)], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(("place", "reason"), [
    ("/proc", "No such file or directory"),  # ENOENT even for root
    ("{files}/plain.txt", "not a directory"),
])
def test_unwritable_paths_in_process(place, reason, files, tmp_path):
    import os
    here = os.getcwd()
    try:
        results = run_path_cases(WRITE_OPTIONS, place.replace("{files}", str(files)),
                                 str(files), str(tmp_path))
    finally:
        os.chdir(here)
    check_path_results(results, reason, len(WRITE_OPTIONS))


def test_read_only_file_system(files, tmp_path):
    """EROFS: a read-only tmpfs mounted in a mount namespace of the subprocess alone."""
    import shutil
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is not installed: no read-only mount to test EROFS")
    ro, work = tmp_path / "ro", tmp_path / "work"
    ro.mkdir()
    work.mkdir()
    import os
    userns = [] if os.geteuid() == 0 else ["--map-root-user"]
    probe = subprocess.run(["unshare", "--mount", *userns, "mount", "-t", "tmpfs", "-o", "ro",
                            "tmpfs", str(ro)], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a read-only tmpfs here: {probe.stderr.strip()}")
    mount = ["unshare", "--mount", *userns, "sh", "-c",
             f'mount -t tmpfs -o ro tmpfs "{ro}" && exec "$@"', "sh"]
    check_path_results(in_subprocess(mount, WRITE_OPTIONS, ro, files, work),
                       "Read-only file system", len(WRITE_OPTIONS))


def test_permission_denied(files, tmp_path):
    """EACCES: a directory of another user, and a file nobody may read; as root the
    subprocess runs without CAP_DAC_OVERRIDE / CAP_DAC_READ_SEARCH, so the bits count."""
    import os
    import shutil
    locked, work = tmp_path / "locked", tmp_path / "work"
    locked.mkdir()
    work.mkdir()
    (locked / "secret").write_text("nant = 2")
    prefix: list[str] = []
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv (util-linux): cannot drop "
                        "CAP_DAC_OVERRIDE, so no path is unwritable by permission bits")
        os.chown(locked / "secret", 65534, 65534)
        os.chown(locked, 65534, 65534)
        prefix = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
    (locked / "secret").chmod(0o000)
    locked.chmod(0o555)
    try:
        results = in_subprocess(prefix, WRITE_OPTIONS + READ_OPTIONS, locked, files, work)
    finally:
        locked.chmod(0o755)
    check_path_results(results, "Permission denied", len(WRITE_OPTIONS + READ_OPTIONS))


def test_xengine_record_bits_option(tmp_path, capsys):
    from xengine_block.cli import main

    common = ["record", "-o", str(tmp_path / "rec"), "--port", "0", "--nant", "2",
              "--duration", "0.2", "--sync-time", "0", "--fs-hz", "1", "--freq0-hz", "1",
              "--chan-bw-hz", "1"]
    with pytest.raises(SystemExit) as exit_info:
        main(common + ["--bits", "3"])
    assert exit_info.value.code == 2
    assert "sample bits must be one of 8, 4" in capsys.readouterr().err
    assert not (tmp_path / "rec").exists()
    assert main(common + ["--bits", "4", "--nibble-order", "re_low"]) == 0
    g = read_metadata(tmp_path / "rec" / "rec0000.pcap").geometry
    assert (g.sample_bits, g.nibble_order, g.payload_bytes) == (4, "re_low", 4320)


def test_subcommand_parsers_are_every_registered_subcommand_in_help_order():
    """What the docs' CLI reference and the help-reference check walk: each subcommand's own
    parser, in ``xengine --help``'s order."""
    from xengine_block.cli import subcommand_parsers

    parsers = subcommand_parsers(build_parser())
    assert list(parsers) == [name for name in SUBCOMMANDS if name in COMMANDS]
    assert all(p.prog == f"xengine {name}" for name, p in parsers.items())
