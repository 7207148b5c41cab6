"""The NPU package's roles import in one direction: the design (plan, validator, mlir-aie
design, build) imports neither the model nor the host side; the model and the host side import
the design and not each other. So there is no import cycle among them (nor inside the design,
where the validator imports the plan's vocabulary, never the builder that calls it)."""

from __future__ import annotations

from pathlib import Path

from tests.test_layers import PACKAGE, imports_of, module_name

NPU = PACKAGE / "npu"
#: role -> the roles it may import (itself included).
ALLOWED = {"design": {"design"}, "model": {"model", "design"}, "host": {"host", "design"}}


def role(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["xengine_block", "npu"] else None


def test_the_npu_roles_import_one_way():
    assert {p.name for p in NPU.iterdir() if (p / "__init__.py").is_file()} == set(ALLOWED)
    offenders = []
    for path in sorted(NPU.rglob("*.py")):
        here = role(module_name(path))
        for line, target in imports_of(path):
            there = role(target)
            if here and there and there not in ALLOWED[here]:
                offenders.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {target}")
    assert not offenders, offenders


def test_no_module_of_the_design_imports_back_the_one_importing_it():
    graph = {module_name(p): {t for _, t in imports_of(p)} for p in (NPU / "design").glob("*.py")}
    cycles = [(a, b) for a, targets in graph.items() for b in targets
              if b != a and a in graph.get(b, ())]
    assert not cycles, cycles
    assert "xengine_block.npu.design.plan" not in graph["xengine_block.npu.design.validate"]


def test_the_tests_mirror_the_roles():
    here = Path(__file__).parent
    assert {p.name for p in here.iterdir() if p.is_dir() and (p / "__init__.py").is_file()} \
        >= set(ALLOWED)
