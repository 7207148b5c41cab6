"""The display in a real browser: Debian's Chromium driven by Playwright (never ``playwright
install``: ``executable_path`` is the system's). One browser for the module; each test its own
page. The page loads with no console error; every panel plots what the API reports for fx.py's
point source; a click on a matrix cell selects that baseline; a live store's new dumps appear.
"""

from __future__ import annotations

import json
import shutil
import urllib.request

import numpy as np
import pytest

from tests.conftest import import_or_require, require
from xengine_block.display.files import FileDumps
from xengine_block.display.live import LiveDumps
from xengine_block.display.server import DisplayServer

CHROMIUM = "/usr/bin/chromium"
require("chromium", None if shutil.which(CHROMIUM) else f"{CHROMIUM} is not installed "
        "(apt-get install chromium)")
sync_api = import_or_require("playwright.sync_api", "playwright")
#: The flags a sandboxed CI runner needs, and nothing that reaches out to the network.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
TIMEOUT_MS = 30000


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


class Page:
    """A page of the display with its console errors collected. The page's Content-Security-
    Policy forbids eval, which Playwright's string predicates use: the test context bypasses
    it (the page itself runs under it: a violation in its own scripts is a console error)."""

    def __init__(self, browser, url: str) -> None:
        self.context = browser.new_context(bypass_csp=True,
                                           viewport={"width": 1400, "height": 1150})
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.url = url
        self.page.goto(url)
        self.wait("window.xdisplay && window.xdisplay.shown !== null")

    def wait(self, predicate: str) -> None:
        self.page.wait_for_function(predicate, timeout=TIMEOUT_MS)

    def data(self, plot: str) -> list[dict]:
        return self.page.evaluate(f"document.getElementById('{plot}').data")

    def api(self, query: str) -> dict:
        with urllib.request.urlopen(self.url + "api/v1/" + query, timeout=10) as r:
            return json.load(r)

    def close(self) -> None:
        self.context.close()


@pytest.fixture(scope="module")
def file_server(known_run):
    s = DisplayServer(FileDumps([known_run.file]))
    yield s
    s.close()


def test_panels_plot_what_the_api_reports(browser, file_server, known_run):
    page = Page(browser, file_server.url)
    try:
        shown = page.page.evaluate("window.xdisplay.sel")
        a1, a2 = shown["ant1"], shown["ant2"]
        m = page.api("matrix?pol=xx&dump=-1")
        (heat,) = page.data("matrix")
        assert heat["z"] == m["coherence"] and heat["x"] == [str(a) for a in m["antennas"]]
        assert np.min(m["coherence"]) > 0.95  # the point source: coherent fringes
        b = page.api(f"baseline?ant1={a1}&ant2={a2}&pol=xx&dump=-1")
        amp, phase = page.data("spectrum")
        v = np.array(b["re"]) + 1j * np.array(b["im"])
        np.testing.assert_allclose(amp["y"], np.abs(v), rtol=1e-12)
        np.testing.assert_allclose(phase["y"], np.angle(v), atol=1e-12)
        autos = page.api("autos?dump=-1")
        traces = page.data("autos")
        assert [t["y"] for t in traces[:-1]] == [i["power"] for i in autos["inputs"]]
        assert traces[-1]["y"] == autos["median"]
        w = page.api(f"waterfall?ant1={a1}&ant2={a2}&pol=xx&dump=-1&last=32")
        assert page.data("waterfall")[1]["z"] == w["phase"]
        health = page.api("health?dump=-1")
        flagged = page.data("health")[0]["y"]
        assert flagged == [100 * s["flagged_fraction"] for s in health["series"]]
        assert page.page.inner_text("#status").startswith("files: 4 dumps")
        assert page.errors == []
    finally:
        page.close()


def test_a_click_on_a_matrix_cell_selects_that_baseline(browser, file_server, known_run):
    page = Page(browser, file_server.url)
    try:
        ants = page.api("status")["antennas"]
        i, j = 5, 2  # row: ant1, column: ant2
        x, y = page.page.evaluate(f"""() => {{
            const gd = document.getElementById('matrix');
            const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
            const r = gd.getBoundingClientRect();
            return [r.left + xa._offset + xa.l2p({j}), r.top + ya._offset + ya.l2p({i})];
        }}""")
        page.page.mouse.click(x, y)
        page.wait(f"window.xdisplay.sel.ant1 === {ants[i]} && window.xdisplay.sel.ant2 === "
                  f"{ants[j]} && !window.xdisplay.busy && "
                  f"document.getElementById('selected').textContent.includes('{ants[i]}–')")
        assert page.page.inner_text("#selected") == f"baseline {ants[i]}–{ants[j]} xx"
        b = page.api(f"baseline?ant1={ants[i]}&ant2={ants[j]}&pol=xx&dump=-1")
        amp = page.data("spectrum")[0]["y"]
        np.testing.assert_allclose(amp, np.hypot(b["re"], b["im"]), rtol=1e-12)
        assert page.errors == []
    finally:
        page.close()


def test_a_live_run_s_new_dumps_appear(browser, known_run):
    store = LiveDumps(history=8)
    store.add(known_run.store.dump(0))
    server = DisplayServer(store)
    page = Page(browser, server.url)
    try:
        assert page.page.evaluate("window.xdisplay.dump") == 0
        for k in (1, 2):
            store.add(known_run.store.dump(k))
        page.wait("window.xdisplay.dump === 2 && window.xdisplay.shown !== null && "
                  "JSON.parse(window.xdisplay.shown)[0] === 2")
        assert page.page.inner_text("#status").startswith("live: 3 dumps")
        assert page.page.evaluate("document.getElementById('dump').max") == "2"
        autos = page.api("autos?dump=2")
        assert [t["y"] for t in page.data("autos")[:-1]] == \
            [i["power"] for i in autos["inputs"]]
        assert page.errors == []
    finally:
        page.close()
        server.close()
