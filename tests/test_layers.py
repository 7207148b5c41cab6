"""The import graph follows the layers: no module imports one of a higher layer.

Every import of the package is read from the source (``ast``, function-level and relative
imports included) and its target's layer looked up in :data:`LAYERS`; a module missing from
the table fails too, so a new subpackage must be placed. Within one layer imports go both ways.

Why each layer sits where it does (what the code needs, not what it was once allowed):

- model: the numbers and formats everything derives from, and where build outputs go
  (``user_cache``); imports nothing above it (the C extensions ``_native``/``_readbw`` and the
  package root, whose only import is the table of moved modules, belong here);
- runtime: rings and pipelines; knows blocks only by their hooks;
- backends and npu: the correlators; the NPU backend takes the runtime's page-locked memory;
- I/O and tools: capture (packets in), readers (recordings), outputs (UVH5, SPEAD heaps,
  PNG), sim (F-engines), console (argument types and progress lines: the terminal's I/O;
  ``argtypes`` checks backends and recording sidecars) and bench (measures the backends);
  readers use the capture's pcap format, outputs and sim its MeerKAT heap formats;
- blocks and bifrost: the pipeline blocks, on our runtime (``blocks/``) or on real Bifrost
  (``bifrost/``, the same blocks adapted); one layer, since ``blocks.chain`` assembles the
  chain on either runtime and ``bifrost/`` wraps ``blocks/``;
- reprocess: recordings to UVH5 through readers, blocks and backends;
- display: the signal display (a page over UVH5 files or a running chain's dumps: reads
  outputs' row layout and feeds from a block on the chain);
- service: the live correlator and its scale-out;
- cli: the ``xengine`` command on top; nothing in the library imports it.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

import xengine_block
from tests.helpers.tree import repository_files

PACKAGE = Path(xengine_block.__file__).resolve().parent


def package_modules() -> list[Path]:
    """The package's Python modules (those git tracks or would add: not a stray build copy)."""
    return [p for p in repository_files(PACKAGE) if p.suffix == ".py"]
MODEL = ("geometry", "frames", "sample_layout", "triangle", "array", "integration", "reference",
         "visibility_orders", "native_extension", "user_cache", "kernel_sources", "_moved",
         "_native", "_readbw")
#: Lowest first: (layer name, the top-level modules and subpackages in it).
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("model", ("", *MODEL)),
    ("runtime", ("runtime",)),
    ("backends", ("backends", "npu")),
    ("io", ("capture", "readers", "outputs", "sim", "console", "bench", "health")),
    ("blocks", ("blocks", "bifrost")),
    ("reprocess", ("reprocess",)),
    ("display", ("display",)),
    ("service", ("service",)),
    ("cli", ("cli",)),
]
RANK = {top: i for i, (_, tops) in enumerate(LAYERS) for top in tops}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name: str) -> bool:
    """Whether ``xengine_block.a.b`` names a module (source, package or compiled extension)."""
    path = PACKAGE.parent.joinpath(*name.split("."))
    return (path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()
            or any(path.parent.glob(f"{path.name}.*.so")))


def imports_of(path: Path) -> list[tuple[int, str]]:
    """(line, module of this package) for every import in the file, at any depth."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:  # ``from pkg import submodule`` imports the submodule
                sub = f"{target}.{alias.name}"
                found.append((node.lineno, sub if is_module(sub) else target))
    return sorted({(line, t) for line, t in found if t.split(".")[0] == "xengine_block"})


def layer_of(module: str) -> int:
    top = module.split(".")[1] if "." in module else ""
    if top not in RANK:
        pytest.fail(f"{module} is in no layer of tests/test_layers.py: place {top!r}")
    return RANK[top]


def test_every_module_imports_only_its_own_layer_or_lower():
    offenders = []
    for path in sorted(package_modules()):
        here = layer_of(module_name(path))
        for line, target in imports_of(path):
            there = layer_of(target)
            if there > here:
                offenders.append(f"{path.relative_to(PACKAGE.parent)}:{line} "
                                 f"({LAYERS[here][0]}) imports {target} ({LAYERS[there][0]})")
    assert not offenders, "imports of a higher layer:\n" + "\n".join(offenders)


def test_the_import_reader_sees_every_form_of_import(tmp_path, monkeypatch):
    """Absolute, relative (one and two levels), ``from .. import module`` and function-level
    imports are all read, with their line numbers."""
    pkg = tmp_path / "xengine_block"
    (pkg / "blocks").mkdir(parents=True)
    (pkg / "cli").mkdir()
    for f in ("__init__.py", "geometry.py", "blocks/__init__.py", "cli/__init__.py",
              "cli/correlate.py"):
        (pkg / f).write_text("")
    (pkg / "blocks" / "chain.py").write_text(
        "import numpy\nimport xengine_block.geometry\nfrom ..cli import correlate\n"
        "from .. import geometry\n\ndef f():\n    from ..cli.correlate import run\n"
        "    from . import chain\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", pkg)
    assert imports_of(pkg / "blocks" / "chain.py") == [
        (2, "xengine_block.geometry"), (3, "xengine_block.cli.correlate"),
        (4, "xengine_block.geometry"), (7, "xengine_block.cli.correlate"),
        (8, "xengine_block.blocks.chain")]


def test_the_command_line_is_the_top_layer_and_nothing_imports_it():
    """(outside ``cli/``, no module imports it: a library import never drags argparse code
    in)."""
    assert LAYERS[-1] == ("cli", ("cli",))
    users = [f"{path.relative_to(PACKAGE.parent)}:{line}"
             for path in package_modules() if "cli" not in path.relative_to(PACKAGE).parts
             for line, target in imports_of(path)
             if target == "xengine_block.cli" or target.startswith("xengine_block.cli.")]
    assert not users, f"library modules importing the CLI: {users}"


def test_the_benchmark_machinery_stays_out_of_the_library():
    """``bench/`` (the machine's limits, the library peers, the correlator benchmark) is imported
    only by itself and the command line (``xengine bench``), so a pipeline never loads it."""
    users = [f"{path.relative_to(PACKAGE.parent)}:{line}"
             for path in package_modules()
             if not {"cli", "bench"} & set(path.relative_to(PACKAGE).parts)
             for line, target in imports_of(path)
             if target == "xengine_block.bench" or target.startswith("xengine_block.bench.")]
    assert not users, f"library modules importing bench/: {users}"
