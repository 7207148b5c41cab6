"""The display's HTTP server and commands: read-only, the page's files by name only, bounded
requests and rates, a stalled client holds nobody else; ``xengine view`` and ``xengine
correlate --display`` serve the API over a real socket, the live one value for value with the
files the service writes."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

from tests.conftest import random_frames
from tests.helpers.service import BASE, Instance, env, merged, send, write_config
from xengine_block.display.files import FileDumps
from xengine_block.display.server import MAX_URL, DisplayServer, RateLimiter, static_files
from xengine_block.geometry import Geometry

pyuvdata = pytest.importorskip("pyuvdata")


@pytest.fixture(scope="module")
def server(known_run):
    s = DisplayServer(FileDumps([known_run.file]))
    yield s
    s.close()


def fetch(url: str, method: str = "GET") -> tuple[int, bytes, dict]:
    req = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read(), dict(r.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), dict(exc.headers)


def raw(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    return out


def test_page_files_and_api_are_served(server):
    code, page, headers = fetch(server.url)
    assert code == 200 and b"plotly.min.js" in page and "text/html" in headers["Content-Type"]
    for name, (data, _) in static_files().items():
        assert fetch(server.url.rstrip("/") + name)[1] == data
    code, lic, _ = fetch(server.url + "plotly.LICENSE.txt")
    assert code == 200 and b"MIT" in lic
    code, body, headers = fetch(server.url + "api/v1/status")
    assert code == 200 and json.loads(body)["dumps"] == 4
    assert headers["Content-Type"] == "application/json"


@pytest.mark.parametrize("path", ["/../setup.cfg", "/static/index.html", "/%2e%2e/setup.cfg",
                                  "/api/v1/../../../etc/passwd", "//etc/passwd",
                                  "/display.js/../../setup.cfg"])
def test_no_request_path_reaches_the_file_system(server, path):
    reply = raw(server.port, f"GET {path} HTTP/1.0\r\n\r\n".encode())
    assert reply.startswith(b"HTTP/1.0 404"), reply[:80]


def test_read_only_and_bounded(server):
    code, body, headers = fetch(server.url + "api/v1/status", "POST")
    assert code == 405 and "read-only" in json.loads(body)["error"] and headers["Allow"]
    reply = raw(server.port, b"GET /" + b"a" * (MAX_URL + 10) + b" HTTP/1.0\r\n\r\n")
    assert reply.startswith(b"HTTP/1.0 414")
    reply = raw(server.port, b"\x00\xff garbage\r\n\r\n")
    assert b" 400 " in reply.split(b"\r\n")[0] and b"Traceback" not in reply
    reply = raw(server.port, b"GET / HTTP/1.0\r\n" + b"X: y\r\n" * 200 + b"\r\n")
    assert b" 431 " in reply.split(b"\r\n")[0] or b" 400 " in reply.split(b"\r\n")[0]
    reply = raw(server.port, b"BREW /api/v1/status HTTP/1.0\r\n\r\n")
    assert reply.split(b"\r\n")[0].split()[1] in (b"405", b"501")


def test_a_stalled_client_holds_nobody_else(server):
    """Connections that send half a request and nothing more: others are still answered."""
    stalled = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(4)]
    try:
        for s in stalled:
            s.sendall(b"GET /api/v1/status HTTP/1.0\r\n")
        t0 = time.monotonic()
        assert fetch(server.url + "api/v1/autos")[0] == 200
        assert time.monotonic() - t0 < 5
    finally:
        for s in stalled:
            s.close()


def test_the_rate_is_bounded_per_client():
    limiter = RateLimiter(rate=1.0, burst=3.0)
    assert [limiter.allow("a") for _ in range(5)] == [True, True, True, False, False]
    assert limiter.allow("b")  # another client has its own bucket


def test_view_command_serves_the_files_and_refuses_bad_ones_in_one_line(tmp_path, known_run):
    bad = tmp_path / "x.uvh5"
    bad.write_bytes(b"\x89HDF\r\n garbage")
    r = subprocess.run([sys.executable, "-m", "xengine_block.cli", "view", str(bad)],
                       capture_output=True, text=True, env=env(), timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "x.uvh5" in r.stderr, r.stderr
    proc = subprocess.Popen([sys.executable, "-m", "xengine_block.cli", "view",
                             str(known_run.file), "--address", "127.0.0.1:0"],
                            stdout=subprocess.PIPE, text=True, env=env())
    try:
        line = proc.stdout.readline()
        url = line.rsplit(" at ", 1)[1].strip()
        assert url.startswith("http://127.0.0.1:")
        code, body, _ = fetch(url + "api/v1/baseline?ant1=0&ant2=1&pol=yy&dump=2")
        uv = pyuvdata.UVData.from_file(str(known_run.file))
        uv.select(times=[np.unique(uv.time_array)[2]])
        b = json.loads(body)
        np.testing.assert_array_equal(np.array(b["re"]) + 1j * np.array(b["im"]),
                                      uv.get_data((0, 1, "yy")).ravel())
    finally:
        proc.terminate()
        proc.wait(30)


def test_correlate_display_serves_the_live_dumps_as_the_files_hold_them(tmp_path):
    """``xengine correlate --display 127.0.0.1:0`` fed by an independent sender: the URL is in
    the ready line; every dump's baseline, autos and matrix are the files' values."""
    cfg = write_config(tmp_path / "c.toml", merged(BASE, display={"history": 8}))
    g = Geometry(nstream=16, nchan=9, npacket=4)
    inst = Instance(cfg, "--display", "127.0.0.1:0")
    answers = []
    try:
        url = inst.wait_ready()["display_url"]
        assert url.startswith("http://127.0.0.1:")
        # 6 dumps sent; the capture's reorder window holds the last back until the stop
        send(random_frames(g, 8 * 6, seed=4), g, inst.port)
        deadline = time.monotonic() + 60
        while json.loads(fetch(url + "api/v1/status")[1])["dumps"] < 3:
            assert time.monotonic() < deadline, "the display saw no dumps"
            time.sleep(0.2)
        status = json.loads(fetch(url + "api/v1/status")[1])
        assert status["source"] == "live" and status["sequences"] == 1
        for dump in range(3):
            for q in (f"baseline?ant1=2&ant2=5&pol=xy&dump={dump}", f"autos?dump={dump}",
                      f"matrix?pol=yy&dump={dump}", f"health?dump={dump}"):
                code, body, _ = fetch(url + "api/v1/" + q)
                assert code == 200, body
                answers.append(json.loads(body))
    finally:
        summary = inst.finish()
    uv = pyuvdata.UVData.from_file(summary["files"], axis="blt")
    times = np.unique(uv.time_array)
    assert len(times) == 6
    for dump in range(3):
        b, autos, m, health = answers[4 * dump: 4 * dump + 4]
        sel = uv.select(times=[times[dump]], inplace=False)
        assert b["time_jd"] == times[dump]
        np.testing.assert_array_equal(np.array(b["re"]) + 1j * np.array(b["im"]),
                                      sel.get_data((2, 5, "xy")).ravel())
        for inp in autos["inputs"]:
            a = inp["antenna"]
            np.testing.assert_array_equal(inp["power"],
                                          sel.get_data((a, a, inp["pol"] * 2)).ravel().real)
        v = sel.get_data((1, 6, "yy")).ravel()
        assert m["amplitude"][1][6] == pytest.approx(np.abs(v).mean(), rel=1e-12)
        assert health["source"] == "live" and health["latest"]["heaps"] > 0
        assert "loss_percent" in health["latest"] and "realtime_factor" in health["latest"]


def test_correlate_display_marks_the_inputs_the_health_block_judges(tmp_path):
    """With ``[flagging] health``, the autos carry the health block's states: an input whose
    F-engine sends zeros is marked ``dead``, the others carry no mark."""
    cfg = write_config(tmp_path / "c.toml", merged(BASE, flagging={"health": True}))
    g = Geometry(nstream=16, nchan=9, npacket=4)
    frames = random_frames(g, 8 * 5, seed=6)
    frames[:, 7] = 0  # stream 7: antenna 3's y
    inst = Instance(cfg, "--display", "127.0.0.1:0")
    try:
        url = inst.wait_ready()["display_url"]
        send(frames, g, inst.port)
        deadline = time.monotonic() + 60
        while json.loads(fetch(url + "api/v1/status")[1])["dumps"] < 2:
            assert time.monotonic() < deadline, "the display saw no dumps"
            time.sleep(0.2)
        autos = json.loads(fetch(url + "api/v1/autos?dump=1")[1])
    finally:
        inst.finish()
    assert autos["marks"]
    assert [(i["antenna"], i["pol"], i["state"]) for i in autos["inputs"] if "state" in i] == \
        [(3, "y", "dead")]
