"""The docs' generated reference tables (``docs/_ext/reference_tables.py``) list everything the
code's own tables and collectors hold."""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def reference_tables() -> Iterator[ModuleType]:
    """The extension as Sphinx loads it (``docs/_ext`` on the path, as docs/conf.py puts it)."""
    ext = str(ROOT / "docs" / "_ext")
    sys.path.insert(0, ext)
    try:
        yield importlib.import_module("reference_tables")
    finally:
        sys.path.remove(ext)


def test_metrics_table_names_every_family_the_collector_declares(reference_tables) -> None:
    """Every family ``service/metrics.py`` spells out (``f"{NAMESPACE}_name"``) is a row, the
    SIGHUP outcomes among them."""
    from xengine_block.service import metrics
    from xengine_block.service.config import RELOAD_RESULTS

    source = Path(metrics.__file__).read_text()
    declared = set(re.findall(r'f"\{NAMESPACE\}_(\w+)"', source))
    assert "config_reloads" in declared
    rendered = reference_tables.metrics()
    rows = set(re.findall(r"^\| `xengine_(\w+?)(?:_total)?` \|", rendered, re.MULTILINE))
    assert declared <= rows, f"missing from the metrics reference: {sorted(declared - rows)}"
    reloads = next(line for line in rendered.splitlines() if "config_reloads" in line)
    assert all(result in reloads for result in RELOAD_RESULTS), reloads


def test_npu_tables_are_the_model_s_predictions(reference_tables) -> None:
    """docs/npu.md's tables of predicted rates are rendered from the model, one row per case,
    each with the rate ``predicted`` gives (no figure typed in by hand)."""
    from xengine_block.backends.npu import predicted
    from xengine_block.geometry import Geometry

    page = (ROOT / "docs" / "npu.md").read_text()
    assert "<!-- generated: npu_model " in page and "<!-- generated: npu_calibration " in page
    rows = [line.split(" | ") for line in reference_tables.npu_model().splitlines()[2:]]
    cases = [(d, s, b) for d in reference_tables.NPU_DEVICES
             for s, b in reference_tables.NPU_MODEL_CASES]
    assert len(rows) == len(cases)
    for row, (device, nstream, bits) in zip(rows, cases, strict=True):
        msps = predicted(Geometry(nstream=nstream, sample_bits=bits), device).msps
        assert row[:4] == [f"| {nstream}", f"ci{bits}", device, f"{msps:.1f}"], row
    assert "| rate |" in reference_tables.npu_calibration()


def test_generated_sections_are_up_to_date(reference_tables) -> None:
    """Every page's generated sections are what the code renders now (else: python
    docs/_ext/reference_tables.py), so the repository's web page shows them right."""
    stale = [str(p.relative_to(ROOT)) for p in reference_tables.stale_pages()]
    assert not stale, f"run python docs/_ext/reference_tables.py: {stale} are out of date"


def test_the_reference_pages_hold_their_sections(reference_tables) -> None:
    want = {"cli.md": ["cli"], "config.md": ["config_keys"],
            "metrics.md": ["metrics", "capture_counters"]}
    for page, names in want.items():
        text = (ROOT / "docs" / page).read_text()
        found = [m.group("name") for m in reference_tables.SECTION_RE.finditer(text)]
        assert found == names, (page, found)
        assert "_generated/" not in text  # nothing read at build time only


def test_a_stale_or_unknown_section_is_found_and_rewritten(reference_tables, tmp_path) -> None:
    page = tmp_path / "page.md"
    body = reference_tables.capture_counters()
    inline = "<!-- generated: capture_counters -->x<!-- end generated: capture_counters -->"
    page.write_text("# P\n\n<!-- generated: capture_counters -->\n\n| old |\n\n"
                    f"<!-- end generated: capture_counters -->\n\nInline: {inline}.\n")
    assert reference_tables.stale_pages(tmp_path) == [page]
    assert reference_tables.write_pages(tmp_path) == [page]
    text = page.read_text()
    assert "| old |" not in text and text.count(body.strip()) == 2
    assert f"\n\n{body.strip()}\n\n<!-- end generated" in text  # the block keeps its blank lines
    assert reference_tables.stale_pages(tmp_path) == []
    page.write_text("<!-- generated: nothing_such -->\n<!-- end generated: nothing_such -->\n")
    with pytest.raises(ValueError, match="no generated section 'nothing_such'"):
        reference_tables.stale_pages(tmp_path)


def test_the_cli_reference_does_not_depend_on_the_terminal(reference_tables, monkeypatch) -> None:
    """argparse wraps ``--help`` to the terminal: the page is rendered from the parser's
    actions instead, the same at any width."""
    monkeypatch.setenv("COLUMNS", "40")
    narrow = reference_tables.cli_help()
    monkeypatch.setenv("COLUMNS", "200")
    assert reference_tables.cli_help() == narrow


def test_npu_page_reads_right_outside_the_built_site(reference_tables) -> None:
    """docs/npu.md holds every figure and table itself (generated between markers), as the
    repository's web page shows it: no MyST substitution, no include of a build-time file; its
    quoted figures are the model's and the host-loop benchmark's."""
    page = (ROOT / "docs" / "npu.md").read_text()
    assert "{{" not in page and "{include}" not in page and "_generated" not in page
    # a line opening with an inline marker would start an HTML block, cutting its paragraph
    assert not [line for line in page.splitlines()
                if line.lstrip().startswith("<!-- generated: npu.")]
    for name in ("npu_changes", "npu_tilings"):
        assert f"<!-- generated: {name} " in page
    quotes = reference_tables.npu_quotes()
    for name in ("ci8_msps_256", "ours_over_published", "bench_idle_pct", "srd_gain"):
        assert (f"<!-- generated: npu.{name} -->{quotes[name]}<!-- end generated: npu.{name} -->"
                in page), name
    assert float(quotes["ours_over_published"]) >= 1.25
    assert float(quotes["bench_idle_pct"]) < 5
    assert reference_tables.regenerated(page) == page
