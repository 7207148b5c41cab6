"""``benchmarks/report.py``: the committed performance page and README table are what the
results files render (so the docs cannot drift from the data), and a changed result shows."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def report():
    spec = importlib.util.spec_from_file_location("report", ROOT / "benchmarks" / "report.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_committed_page_and_readme_table_are_what_the_results_render(report):
    page, readme = report.render(report.load_results())
    assert (ROOT / "docs" / "performance.md").read_text() == page, \
        "docs/performance.md is stale: run python benchmarks/report.py"
    assert (ROOT / "README.md").read_text() == readme, \
        "README.md's performance table is stale: run python benchmarks/report.py"


def test_every_class_with_a_correlator_result_has_its_roofline_plot(report):
    for cpu, results in report.load_results().items():
        if "bench_correlator" in results:
            assert (ROOT / "docs" / report.roofline_name(cpu)).stat().st_size > 0


#: A correlator result as bench_correlator.py writes one, cut to what the report reads.
CORRELATOR = {
    "benchmark": "bench_correlator", "backend": "native", "machine_int8_isa": "avx512vnni",
    "nthreads": 2, "S": 256, "exact": True, "fraction_of_roofline": 0.8125,
    "roofline_bound": "int8 compute", "fraction_of_int8_peak": 0.8125,
    "machine_int8_tops": 1.0, "machine_read_gbps": 20.0, "ops_per_input_byte": 514,
    "int8_tops_triangle_useful": 0.8125,
    "ours_over_best_exact_peer": {"peer": "onnxruntime_u8s8", "ratio": 9.6},
    "peers": {"onnxruntime_u8s8": {"exact": True, "int8_tops_triangle_useful": 0.085}},
    "scaling": [{"S": s, "nthreads": 1, "fraction_of_roofline": 0.5,
                 "int8_tops_triangle_useful": 0.4} for s in (64, 256, 1024)],
    "machine": {"model_name": "A CPU", "family": 25, "model": 17, "cpus": 2,
                "isa_flags": ["avx2", "avx512_vnni"]},
    "measured_utc": "2026-01-02T03:04:05Z",
}


def test_a_changed_result_changes_the_page_and_the_readme_table(report, tmp_path):
    results = tmp_path / "results"
    shutil.copytree(report.RESULTS, results)
    (results / "amd-zen4").mkdir()
    (results / "amd-zen4" / "bench_correlator.json").write_text(json.dumps(CORRELATOR))
    page, readme = report.render(report.load_results(results))
    row = next(line for line in readme.splitlines() if line.startswith("| `amd-zen4`"))
    assert "| 0.81 | 9.6 (onnxruntime_u8s8) |" in row
    assert "A CPU (family 25, model 17" in readme and "measured 2026-01-02" in readme
    assert f"![Roofline of amd-zen4](docs/{report.roofline_name('amd-zen4')})" in readme
    assert "## amd-zen4" in page and "![Roofline of amd-zen4](roofline-amd-zen4.png)" in page
    assert "| fraction of the roofline | 0.81 (bound: int8 compute) |" in page
    committed_page, committed_readme = report.render(report.load_results())
    assert page != committed_page and readme != committed_readme


def test_roofline_plot_is_drawn(report, tmp_path):
    path = tmp_path / "roofline.png"
    report.plot_roofline("amd-zen4", CORRELATOR, path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_readme_without_the_markers_is_refused(report):
    with pytest.raises(SystemExit, match="marker lines are missing"):
        report.replace_readme_block("# a README without them\n", "| table |\n")


def test_every_result_records_the_load_in_one_shape(report):
    """``results_file.emit``'s ``{"start", "end"}`` (either may be null in a file written
    before a start was kept), which is the one shape the page reads."""
    for cpu, results in report.load_results().items():
        for name, result in results.items():
            load = result.get("load_average_1min")
            assert isinstance(load, dict) and set(load) == {"start", "end"}, (cpu, name, load)
            assert any(isinstance(load[k], float) for k in load), (cpu, name, load)
    assert report.load_average({"load_average_1min": {"start": 2.04, "end": 3.96}}) == "2.0-4.0"
    assert report.load_average({"load_average_1min": {"start": None, "end": 4.8}}) == "4.8"
