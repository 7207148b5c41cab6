"""Reference tables generated from the code's own tables at build time (a Sphinx extension).

Each table has one source of truth in the package, and the docs include what this module
renders from it into ``docs/_generated/`` (ignored by git) when the build starts:

- ``config_keys.md``: ``xengine_block.service.config.KEYS`` (key, flag, default, meaning);
- ``capture_counters.md``: ``xengine_block.capture.placement.COUNTERS``;
- ``metrics.md``: the metric families ``CorrelatorCollector.collect`` yields, read from a
  collection over a stand-in service, so a metric added in code appears here by itself;
- ``cli.md``: ``xengine --help`` and every subcommand's help, from the argparse parser;
- ``npu_calibration.md``, ``npu_model.md``: the NPU performance model's predictions for the
  published design (beside its measurements) and for our plan, computed from the plan.

And the figures docs/npu.md's prose quotes from the same model (``{{ name }}``, MyST
substitutions from :func:`npu_quotes`), so no predicted number is copied by hand.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from markdown_table import table

GENERATED = Path(__file__).resolve().parents[1] / "_generated"


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


def npu_quotes() -> dict[str, str]:
    """The NPU model's figures that docs/npu.md's prose quotes, by substitution name."""
    from xengine_block.backends.npu import POLL_S, predicted
    from xengine_block.geometry import PUBLISHED, Geometry
    from xengine_block.npu.design.plan import build_plan
    from xengine_block.npu.model import perfmodel

    def changes(pred: Any, made: bool = False) -> dict[str, dict]:
        found = perfmodel.made_changes(pred) if made else perfmodel.design_changes(pred)
        return {c["name"]: c for c in found}

    pub = perfmodel.predict(build_plan(PUBLISHED), "xdna2").to_dict()
    cycles = pub["kernel_call_cycles"]
    ci8 = predicted(Geometry(nstream=256), "xdna2")
    ci8_changes = changes(ci8)
    ci4 = {s: predicted(Geometry(nstream=s, sample_bits=4), "xdna2") for s in (256, 512, 1024)}
    ci4_made = {s: changes(pred, made=True)["ci4_on_tiles"] for s, pred in ci4.items()}
    ci4_v2 = changes(predicted(Geometry(nstream=256, sample_bits=4), "aie-ml-v2"), made=True)
    k = PUBLISHED
    unpack = perfmodel.tile_unpack_cycles(k.tile_n, k.tile_m, k.tile_t)
    kernel = perfmodel.kernel_cycles(k.tile_n, k.tile_m, k.tile_t)
    out_bytes = k.npu_out_bytes
    place = perfmodel.figure("host_place_bytes_per_s")
    group_bytes = {s: (g := Geometry(nstream=s)).npacket * g.frame_bytes for s in (512, 1024)}
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
        "idle_pct_256": f"{100 * ci8.idle_fraction:.0f}",
        "place_gain": f"{ci8_changes['place_beside_runs']['gain']:.2f}",
        "srd_gain": f"{ci8_changes['single_read_diagonal']['gain']:.2f}",
        "ci4_ddr_msps": f"{ci4[256].terms['ddr']:.1f}",
        "copy_gb_512": f"{group_bytes[512] / 1e9:.1f}",
        "copy_gb_1024": f"{group_bytes[1024] / 1e9:.1f}",
        "gil_msps": f"{ci8.terms['host_gil']:.1f}",
        "ci8_msps_256": f"{ci8.msps:.1f}",
    }
    for s, made in ci4_made.items():
        quotes[f"ci4_gain_{s}"] = f"{made['gain']:.1f}"
    return quotes


def set_substitutions(app: Any, config: Any) -> None:
    config.myst_substitutions = {**getattr(config, "myst_substitutions", {}), **npu_quotes()}


def cli_help() -> str:
    from xengine_block.cli import build_parser, subcommand_parsers

    parser = build_parser()
    parts = ["## `xengine`\n", "```text\n" + parser.format_help() + "```\n"]
    for name, sub in subcommand_parsers(parser).items():
        parts += [f"## `xengine {name}`\n", "```text\n" + sub.format_help() + "```\n"]
    return "\n".join(parts)


def write_tables(app: Any = None) -> None:
    GENERATED.mkdir(exist_ok=True)
    for name, render in (("config_keys", config_keys), ("capture_counters", capture_counters),
                         ("metrics", metrics), ("cli", cli_help),
                         ("npu_calibration", npu_calibration), ("npu_model", npu_model)):
        path = GENERATED / f"{name}.md"
        text = render()
        if not path.exists() or path.read_text() != text:  # unchanged: no rebuild
            path.write_text(text)


def setup(app: Any) -> dict[str, Any]:
    app.connect("builder-inited", write_tables)
    app.connect("config-inited", set_substitutions)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
