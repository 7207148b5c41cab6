"""Reference text generated from the code's own tables, kept in the Markdown pages themselves.

Each table has one source of truth in the package; this module renders it and writes it into
the page between two marker lines, so the page reads complete on the repository's web page as
well as in the built site::

    <!-- generated: config_keys (python docs/_ext/reference_tables.py; do not edit) -->
    | key | flag | ... |
    <!-- end generated: config_keys -->

``python docs/_ext/reference_tables.py`` rewrites every marked section of every page from the
code; ``--check`` only says which are out of date (exit 1). ``tests/test_reference_tables.py``
fails when a committed page differs from what the code renders, and the Sphinx build (this
module is also its extension) warns, so a ``-W`` build fails, rather than publish a stale table.
A marker pair may also sit inside a sentence, around a single figure. The sections:

- ``config_keys.md``: ``xengine_block.service.config.KEYS`` (key, flag, default, meaning);
- ``capture_counters.md``: ``xengine_block.capture.placement.COUNTERS``;
- ``metrics.md``: the metric families ``CorrelatorCollector.collect`` yields, read from a
  collection over a stand-in service, so a metric added in code appears here by itself;
- ``cli.md``: ``xengine --help`` and every subcommand's help, from the argparse parser;
- ``npu_calibration``, ``npu_model``, ``npu_changes``, ``npu_tilings``: the NPU performance
  model's predictions for the published design (beside its measurements), for our plan, the
  design changes it prices (made and left) and the kernel tilings it compares, computed from
  the plan;
- ``npu.<name>``: each figure docs/npu.md's prose quotes from the same model and from the
  host-loop benchmark's results file (:func:`npu_quotes`), inline, so no predicted number is
  copied by hand.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parents[1]
if __name__ == "__main__":  # run as a script: the checkout's package and the sibling modules
    sys.path[:0] = [str(DOCS / "_ext"), str(DOCS.parent)]

from markdown_table import table  # noqa: E402 (after the script's path set-up)

#: The host-loop benchmark's results docs/npu.md quotes (the simulated device).
NPU_HOST_RESULTS = DOCS.parent / "benchmarks/results/intel-avx512vnni/bench_npu_host.json"
#: A generated section: its name, then everything up to its end marker.
SECTION_RE = re.compile(r"(<!-- generated: (?P<name>[\w.-]+)(?: [^>]*)? -->)(?P<body>.*?)"
                        r"(<!-- end generated: (?P=name) -->)", re.DOTALL)


def config_keys() -> str:
    from xengine_block.service.config import KEYS, REQUIRED

    def default(value: Any) -> str:
        if value is REQUIRED:
            return "required"
        return "" if value is None else f"`{value!r}`"

    rows = [[f"`{k.dotted}`", f"`{k.flag}`", default(k.default), k.help] for k in KEYS]
    return table(["key", "flag", "default", "meaning"], rows)


def capture_counters() -> str:
    from xengine_block.capture.placement import COUNTERS

    return table(["counter", "meaning"], [[f"`{name}`", text] for name, text in
                                          COUNTERS.items()])


class _StandIn:
    """Any attribute, call, item or iteration of a service that has done nothing yet."""

    def __getattr__(self, name: str) -> _StandIn:
        return _StandIn()

    def __call__(self, *args: Any, **kwargs: Any) -> _StandIn:
        return _StandIn()

    def __getitem__(self, key: Any) -> int:
        return 0

    def get(self, key: Any, default: Any = None) -> Any:
        return default

    def __iter__(self):
        return iter(())

    def __float__(self) -> float:
        return 0.0

    def __str__(self) -> str:
        return ""


def metrics() -> str:
    from xengine_block.service.config import RELOAD_RESULTS
    from xengine_block.service.metrics import CorrelatorCollector

    collector = CorrelatorCollector(_StandIn(), _StandIn(), [], dict.fromkeys(RELOAD_RESULTS, 0))
    rows = []
    for family in collector.collect():
        suffix = "_total" if family.type == "counter" else ""
        labels = ", ".join(getattr(family, "_labelnames", ()) or ())
        rows.append([f"`{family.name}{suffix}`", family.type, labels, family.documentation])
    return table(["metric", "type", "labels", "meaning"], rows)


#: The rows of docs/npu.md's table of our plan: (S, bits) on each device.
NPU_MODEL_CASES = [(s, bits) for s in (256, 512, 1024) for bits in (8, 4)]
NPU_DEVICES = ("xdna2", "aie-ml-v2")


def npu_calibration() -> str:
    """The published design predicted on xdna2 beside its author's measurements
    (``xengine npu-model --design published``)."""
    from xengine_block.geometry import PUBLISHED
    from xengine_block.npu.design.plan import build_plan
    from xengine_block.npu.model import perfmodel

    pred = perfmodel.predict(build_plan(PUBLISHED), "xdna2")  # the published host by default
    units = {"msps": ("rate", "Msps", 1), "calls_per_s": ("NPU calls", "/s", 1),
             "tops": ("int8 TOPS (full square)", "", 1), "kernel_cycles": ("kernel cycles per "
                                                                         "call", "", 0)}
    rows = []
    for key, c in perfmodel.published_comparison(pred).items():
        what, unit, digits = units[key]
        rows.append([what, f"{c['measured']:.{digits}f} {unit}".strip(),
                     f"{c['predicted']:.{digits}f} {unit}".strip(), f"{c['ratio']:.2f}"])
    limit = pred.bottleneck
    rows.append(["limit", f"`{perfmodel.PUBLISHED_BOTTLENECK}`",
                 f"`{limit}` ({pred.terms[limit]:.1f} Msps alone)", ""])
    return table(["figure", "published measurement", "model", "model / measured"], rows)


def npu_model() -> str:
    """Our plan predicted for each S, sample width and device (``xengine npu-model --nstream S
    --bits B --device D``), with the change the model points to."""
    from xengine_block.backends.npu import predicted
    from xengine_block.geometry import Geometry
    from xengine_block.npu.model import perfmodel

    rows = []
    for device in NPU_DEVICES:
        for nstream, bits in NPU_MODEL_CASES:
            pred = predicted(Geometry(nstream=nstream, sample_bits=bits), device)
            bound = f"`{pred.bottleneck}`"
            if not pred.bottleneck.startswith("host_") and pred.idle_fraction >= 0.05:
                bound += f" (NPU idle {pred.idle_fraction:.0%} between runs)"
            changes = "; ".join(f"`{c['name']}`: {c['msps']:.1f} (x{c['gain']:.2f})"
                                for c in perfmodel.design_changes(pred)) or "none"
            rows.append([nstream, f"ci{bits}", device, f"{pred.msps:.1f}", bound,
                         f"{pred.tops_useful:.1f}", changes])
    return table(["S", "bits", "device", "Msps", "bound by", "useful TOPS",
                  "the changes it points to (predicted Msps, gain)"], rows)


def npu_changes() -> str:
    """The design changes the model prices for our plan at S = 256 ci8 on xdna2: those made,
    each against the design without it, and those left (with their gain, or none)."""
    from xengine_block.backends.npu import predicted
    from xengine_block.geometry import Geometry
    from xengine_block.npu.model import perfmodel

    pred = predicted(Geometry(nstream=256), "xdna2")
    rows = [[f"`{c['name']}`", "made", f"{c['msps_without']:.1f} -> {c['msps']:.1f} "
             f"(x{c['gain']:.2f})", f"`{c['bottleneck_without']}`", c["status"]]
            for c in perfmodel.made_changes(pred)]
    rows += [[f"`{c['name']}`", "left", f"{pred.msps:.1f} -> {c['msps']:.1f} (x{c['gain']:.2f})",
              f"`{pred.bottleneck}`", c["status"]] for c in perfmodel.design_changes(pred)]
    listed = {r[0].strip("`") for r in rows}
    rows += [[f"`{c.name}`", "left", "no gain predicted", f"`{pred.bottleneck}`", c.status]
             for c in perfmodel.DESIGN_CHANGES
             if not c.made and c.name not in listed and c.applies(pred.schedule, pred.device)]
    return table(["change", "state", "Msps without -> with (gain)", "bound without",
                  "status"], rows)


def npu_tilings() -> str:
    """The kernel tilings the model compares for S = 256 ci8 on xdna2 (backends.npu.tilings)."""
    from xengine_block.backends.npu import tilings
    from xengine_block.geometry import Geometry

    rows = [[f"{t['npu_block']}", f"N = {t['tile_n']}, M = {t['tile_m']}", t["block_pairs"],
             f"{t['msps']:.1f}", f"`{t['bottleneck']}`", f"{t['device_msps']:.1f}"]
            for t in tilings(Geometry(nstream=256), "xdna2")]
    return table(["block (streams)", "kernel tile", "block pairs", "Msps", "bound by",
                  "device alone, Msps"], rows)


@cache
def npu_quotes() -> dict[str, str]:
    """The figures docs/npu.md's prose quotes (sections ``npu.<name>``): the NPU model's, and
    the host-loop benchmark's from its results file."""
    import json

    from xengine_block.backends.npu import POLL_S, predicted
    from xengine_block.geometry import PUBLISHED, Geometry
    from xengine_block.npu.design.plan import build_plan
    from xengine_block.npu.model import perfmodel

    def made(pred: Any) -> dict[str, dict]:
        return {c["name"]: c for c in perfmodel.made_changes(pred)}

    published = perfmodel.predict(build_plan(PUBLISHED), "xdna2")
    pub = published.to_dict()
    cycles = pub["kernel_call_cycles"]
    ci8 = predicted(Geometry(nstream=256), "xdna2")
    ci8_made = made(ci8)
    before = perfmodel.predict(ci8.base_plan, ci8.device, ci8.schedule.replace(place="launch"))
    ci4 = {s: predicted(Geometry(nstream=s, sample_bits=4), "xdna2") for s in (256, 512, 1024)}
    ci4_made = {s: made(pred)["ci4_on_tiles"] for s, pred in ci4.items()}
    ci4_v2 = made(predicted(Geometry(nstream=256, sample_bits=4), "aie-ml-v2"))
    k = PUBLISHED
    unpack = perfmodel.tile_unpack_cycles(k.tile_n, k.tile_m, k.tile_t)
    kernel = perfmodel.kernel_cycles(k.tile_n, k.tile_m, k.tile_t)
    out_bytes = k.npu_out_bytes
    place = perfmodel.figure("host_place_bytes_per_s")
    bench = json.loads(NPU_HOST_RESULTS.read_text())
    quotes = {
        "cal_sync_msps": f"{pub['terms_msps']['host_sync']:.1f}",
        "cal_compute_msps": f"{pub['terms_msps']['compute']:.1f}",
        "cal_busy_pct": f"{100 * cycles['compute'] / max(cycles.values()):.0f}",
        "host_sync_gbps": f"{perfmodel.figure('host_sync_bytes_per_s') / 1e9:.1f}",
        "ddr_gbps": f"{perfmodel.figure('xdna2_ddr_read_bytes_per_s') / 1e9:.1f}",
        "launch_us": f"{perfmodel.figure('host_launch_s') * 1e6:.0f}",
        "place_gbps": f"{place / 1e9:.1f}",
        "poll_ms": f"{POLL_S * 1e3:g}",
        "copy_gbps": f"{perfmodel.figure('host_copy_bytes_per_s') / 1e9:.1f}",
        "kernel_cycles": f"{kernel}",
        "unpack_cycles": f"{unpack}",
        "ci4_call_cycles": f"{kernel + unpack}",
        "ci4_without_256": f"{ci4_made[256]['msps_without']:.1f}",
        "v2_ci4_gain": f"{ci4_v2['ci4_on_tiles']['gain']:.2f}",
        "v2_ci4_cost_pct": f"{100 * (1 - ci4_v2['ci4_on_tiles']['gain']):.0f}",
        "out_mb": f"{out_bytes / 1e6:.1f}",
        "place_ms": f"{out_bytes / place * 1e3:.0f}",
        "idle_pct_before": f"{100 * before.idle_fraction:.0f}",
        "idle_pct_256": f"{100 * ci8.idle_fraction:.0f}",
        "place_gain": f"{ci8_made['place_beside_runs']['gain']:.2f}",
        "srd_gain": f"{ci8_made['single_read_diagonal']['gain']:.2f}",
        "offgil_gain": f"{ci8_made['placement_off_gil']['gain']:.2f}",
        "ci4_ddr_msps": f"{ci4[256].terms['ddr']:.1f}",
        "gil_msps": f"{ci8.terms['host_gil']:.1f}",
        "ci8_msps_256": f"{ci8.msps:.1f}",
        "pub_msps": f"{published.msps:.1f}",
        "ours_over_published": f"{ci8.msps / published.msps:.2f}",
        "bench_idle_pct": f"{100 * bench['npu_idle_fraction']:.1f}",
        "bench_exact": ("bit for bit" if (bench.get("exact") or {}).get("bit_exact")
                        else "NOT bit for bit"),
    }
    for s, change in ci4_made.items():
        quotes[f"ci4_gain_{s}"] = f"{change['gain']:.1f}"
    return quotes


def npu_quote(name: str) -> str:
    """One figure of :func:`npu_quotes`."""
    return npu_quotes()[name]


def cli_help() -> str:
    """Every subcommand's description and options, from the argparse parser, as tables (not
    ``--help`` itself, whose wrapping and layout change with the terminal and the Python
    version: the page must render the same wherever it is regenerated)."""
    import argparse

    from xengine_block.cli import DESCRIPTION, EVERYDAY, build_parser, subcommand_parsers

    def option_rows(parser: argparse.ArgumentParser) -> list[list[str]]:
        rows = []
        for action in parser._actions:  # argparse keeps them there, with no public accessor
            if (isinstance(action, (argparse._HelpAction, argparse._SubParsersAction))
                    or action.help == argparse.SUPPRESS):
                continue
            names = ", ".join(action.option_strings) or action.dest
            if action.nargs != 0:
                metavar = action.metavar or (action.dest.upper() if action.option_strings
                                             else "")
                if isinstance(metavar, tuple):
                    metavar = " ".join(metavar)
                if action.choices is not None and not action.metavar:
                    metavar = "{" + ",".join(map(str, action.choices)) + "}"
                names = f"{names} {metavar}".strip() if action.option_strings else names
            text = (action.help or "") % {**vars(action), "prog": parser.prog}
            if action.default not in (None, False, argparse.SUPPRESS) and action.option_strings \
                    and "default" not in text:
                text += f" (default: `{action.default}`)"
            if action.required and action.option_strings:
                text += " (required)"
            rows.append([f"`{names}`", " ".join(text.replace("|", "\\|").split())])
        return rows

    def options(parser: argparse.ArgumentParser) -> str:
        rows = option_rows(parser)
        return table(["option", "meaning"], rows) if rows else "No options."

    parser = build_parser()
    parts = ["## `xengine`", " ".join(DESCRIPTION.split()), "```text\n" + EVERYDAY + "```",
             options(parser)]
    for name, sub in subcommand_parsers(parser).items():
        parts += [f"## `xengine {name}`", sub.description or "", options(sub)]
    return "\n\n".join(p.strip() for p in parts if p)


#: The sections pages may hold, by the name their markers give.
SECTIONS: dict[str, Callable[[], str]] = {
    "config_keys": config_keys, "capture_counters": capture_counters, "metrics": metrics,
    "cli": cli_help, "npu_calibration": npu_calibration, "npu_model": npu_model,
    "npu_changes": npu_changes, "npu_tilings": npu_tilings,
}


def regenerated(text: str, where: str = "page") -> str:
    """``text`` with every generated section rendered anew from the code (a block section
    keeps a blank line on each side of its content; an inline one has none)."""
    def render(m: re.Match) -> str:
        name = m.group("name")
        if name.startswith("npu.") and name[4:] in npu_quotes():
            return m.group(1) + npu_quote(name[4:]) + m.group(4)
        if name not in SECTIONS:
            raise ValueError(f"{where}: no generated section {name!r} "
                             f"(known: {', '.join(sorted(SECTIONS))})")
        body = SECTIONS[name]().strip()
        if m.group("body").startswith("\n"):
            body = f"\n\n{body}\n\n"
        return m.group(1) + body + m.group(4)

    return SECTION_RE.sub(render, text)


def pages(docs: Path = DOCS) -> list[Path]:
    """The Markdown pages holding generated sections (the docs and the README)."""
    candidates = sorted(docs.glob("*.md")) + [docs.parent / "README.md"]
    return [p for p in candidates if p.exists() and SECTION_RE.search(p.read_text())]


def _renewed(docs: Path) -> Iterator[tuple[Path, str]]:
    """Each page whose generated sections differ from what the code renders now, with its
    text rendered anew (each page read and rendered once)."""
    for page in pages(docs):
        old = page.read_text()
        new = regenerated(old, str(page))
        if new != old:
            yield page, new


def stale_pages(docs: Path = DOCS) -> list[Path]:
    """The pages whose generated sections differ from what the code renders now."""
    return [page for page, _ in _renewed(docs)]


def write_pages(docs: Path = DOCS) -> list[Path]:
    """Rewrite every stale page's generated sections; the pages written."""
    written = []
    for page, new in _renewed(docs):
        page.write_text(new)
        written.append(page)
    return written


def warn_if_stale(app: Any) -> None:
    from sphinx.util import logging

    for page in stale_pages():
        logging.getLogger(__name__).warning(
            f"{page.name}: generated sections out of date; run python "
            f"docs/_ext/reference_tables.py")


def setup(app: Any) -> dict[str, Any]:
    app.connect("builder-inited", warn_if_stale)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


def main(argv: list[str]) -> int:
    if argv == ["--check"]:
        stale = stale_pages()
        for page in stale:
            print(f"{page.relative_to(DOCS.parent)}: generated sections out of date")
        return 1 if stale else 0
    if argv:
        print("usage: python docs/_ext/reference_tables.py [--check]", file=sys.stderr)
        return 2
    for page in write_pages():
        print(f"wrote {page.relative_to(DOCS.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
