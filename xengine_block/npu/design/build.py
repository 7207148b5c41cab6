"""Build the NPU X-engine: xclbin + instruction stream for named geometries.

For each geometry, into ``<build root>/<tag>/`` (by default ``xclbin/`` in the user's cache
directory, :func:`~.artifacts.default_build_root`, the last place the ``npu`` backend searches):

1. ``design.mlir``: the mlir-aie design generated from the geometry's ``NpuPlan``
   (``xengine_block/npu/design/mlir.py``; needs mlir-aie's Python package);
2. ``xcorr.o``: ``kernels/aie/xcorr.cc`` (package data) compiled by Peano (llvm-aie) for AIE2P
   with -DN/-DM/-DT from the geometry;
3. ``xcorr.xclbin`` and ``insts.bin``: ``aiecc`` with ``design.mlir`` as its one input (the
   kernel object is linked through ``external_func(link_with=...)``), its command line built
   for the driver generation its ``--help`` shows (``xengine_block/npu/design/aiecc.py``);
4. ``build.json``: the design geometry, the pinned mlir-aie release, the installed mlir-aie and
   the aiecc generation used; the backend checks the geometry before loading.

    B=xengine_block.npu.design.build
    python -m $B                                # published and small geometries
    python -m $B --geometry published --npacket 68
    python -m $B --bits 4 --nibble-order re_low # ci4 designs
    python -m $B --check                        # only report the toolchain
    python -m $B --dry-run                      # print the commands, run nothing
    make -C aie                                 # the published geometry (aie/Makefile)

A missing tool stops the build before any step, with what to install and where from (exit 2).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import site
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from ...geometry import Geometry
from .aiecc import (
    MLIR_AIE_RELEASE,
    AieccDriver,
    AieccError,
    aiecc_args,
    detect_driver,
    read_help,
)
from .artifacts import (
    DIAGONAL_DESIGN_NAME,
    DIAGONAL_INSTS_NAME,
    DIAGONAL_XCLBIN_NAME,
    INSTS_NAME,
    KERNEL_NAME,
    NAMED_GEOMETRIES,
    XCLBIN_NAME,
    Artifacts,
    add_geometry_arguments,
    arguments_geometry,
    default_build_root,
    geometry_tag,
)
from .dataflow import KERNEL_OBJECT, KERNEL_SOURCE, NpuPlan
from .mlir import INSTALL_HINT, to_mlir
from .plan import build_plan, reads_diagonal_once, single_read_diagonal
from .validate import validate_plan

PROG = "xengine_block.npu.design.build"  # the name in its messages (run as python -m)
DESIGN_NAME = "design.mlir"
#: Peano flags of the published design's build (warnings its headers raise are silenced).
PEANO_FLAGS = ("-O2", "-std=c++20", "--target=aie2p-none-unknown-elf", "-DNDEBUG",
               "-Wno-parentheses", "-Wno-attributes", "-Wno-macro-redefined",
               "-Wno-empty-body", "-Wno-missing-template-arg-list-after-template-kw")

INSTALL_TEXT = f"""\
How to get the toolchain (Linux x86_64, Python 3.10+, in a virtual environment):
  mlir-aie (Python package `aie`, `aiecc`): {INSTALL_HINT}
  Peano (llvm-aie): pip install llvm-aie \\
                      -f https://github.com/Xilinx/llvm-aie/releases/expanded_assets/nightly
                    export PEANO_INSTALL_DIR=<that environment's site-packages>/llvm-aie
  XRT (xclbinutil packages the xclbin; pyxrt and the device run it): XRT >= 2.20 with the
                    amdxdna driver (mainline Linux 6.14+), then `source /opt/xilinx/xrt/setup.sh`
See docs/npu_hardware.md for the whole procedure."""


@dataclass(frozen=True)
class Toolchain:
    """Where each tool is, or None; ``problems`` says what is missing and why."""

    clang: Path | None
    include: Path | None
    aiecc: Path | None
    xclbinutil: Path | None
    python_aie: bool
    problems: tuple[str, ...]
    #: aiecc's ``--help`` (None when aiecc is absent) and the generation it shows.
    aiecc_help: str | None = None
    aiecc_driver: AieccDriver | None = None


def _peano_clang() -> tuple[Path | None, str]:
    """Peano's clang++: $PEANO_INSTALL_DIR if set (authoritative), else site-packages/llvm-aie."""
    env = os.environ.get("PEANO_INSTALL_DIR")
    if env:
        roots = [Path(env)]
        where = f"$PEANO_INSTALL_DIR={env}"
    else:
        dirs = [sysconfig.get_paths()["purelib"], *site.getsitepackages(),
                site.getusersitepackages()]
        roots = [Path(d) / "llvm-aie" for d in dirs]
        where = "llvm-aie in site-packages ($PEANO_INSTALL_DIR unset)"
    for root in roots:
        clang = root / "bin" / "clang++"
        if clang.is_file():
            return clang, str(clang)
    return None, f"Peano clang++ not found ({where})"


def _mlir_aie_include() -> tuple[Path | None, str]:
    """mlir-aie's include directory (aie_api headers): $MLIR_AIE_INCLUDE_DIR or the wheel's."""
    candidates = []
    if os.environ.get("MLIR_AIE_INCLUDE_DIR"):
        candidates.append(Path(os.environ["MLIR_AIE_INCLUDE_DIR"]))
    try:
        from aie.utils.config import root_path
        candidates.append(Path(root_path()) / "include")
    except (ImportError, AttributeError):
        pass
    if importlib.util.find_spec("mlir_aie") is not None:
        import mlir_aie
        candidates += [Path(p) / "include" for p in mlir_aie.__path__]
    for inc in candidates:
        if (inc / "aie_api" / "aie.hpp").is_file():
            return inc, str(inc)
    return None, f"mlir-aie include dir with aie_api/aie.hpp not found (tried {candidates})"


def _python_aie() -> tuple[bool, str]:
    try:
        found = importlib.util.find_spec("aie.dialects.aie") is not None
    except (ImportError, ValueError) as exc:
        return False, f"mlir-aie Python package not importable ({exc})"
    return found, "aie.dialects.aie" if found else "mlir-aie Python package not importable"


def probe_toolchain() -> Toolchain:
    """Find every tool the build needs; nothing is run."""
    problems = []
    python_aie, why = _python_aie()
    if not python_aie:
        problems.append(why)
    clang, why = _peano_clang()
    if clang is None:
        problems.append(why)
    include, why = _mlir_aie_include()
    if include is None:
        problems.append(why)
    aiecc = shutil.which("aiecc") or shutil.which("aiecc.py")
    if aiecc is None:
        problems.append("aiecc not on PATH (installed by the mlir_aie wheel)")
    help_text, driver = None, None
    if aiecc is not None:
        try:
            help_text = read_help(aiecc)
            driver = detect_driver(help_text)
        except AieccError as exc:
            problems.append(str(exc))
    xclbinutil = shutil.which("xclbinutil")
    if xclbinutil is None:
        problems.append("xclbinutil not on PATH (part of XRT; source /opt/xilinx/xrt/setup.sh)")
    return Toolchain(clang, include, Path(aiecc) if aiecc else None,
                     Path(xclbinutil) if xclbinutil else None, python_aie, tuple(problems),
                     help_text, driver)


def kernel_command(tc: Toolchain, g: Geometry, art: Artifacts) -> list[str]:
    """Peano compile of kernels/aie/xcorr.cc for this geometry's tiling."""
    return [str(tc.clang or "<Peano clang++>"), *PEANO_FLAGS,
            f"-I{tc.include or '<mlir-aie include>'}",
            f"-DN={g.tile_n}", f"-DM={g.tile_m}", f"-DT={g.tile_t}",
            "-c", str(KERNEL_SOURCE), "-o", str(art.directory / KERNEL_OBJECT)]


def aiecc_command(tc: Toolchain, design: str = DESIGN_NAME, xclbin: str = XCLBIN_NAME,
                  insts: str = INSTS_NAME) -> list[str]:
    """aiecc with ``design`` (``design.mlir``) as its one input, run inside the build directory
    (the design links ``xcorr.o`` from there through ``external_func(link_with=...)``), writing
    ``xclbin`` and ``insts``; the diagonal design is built the same way under its own names.

    Built for the generation ``aiecc --help`` showed; without aiecc (a dry run here) for the
    newest generation (``--get-xclbin``).
    """
    driver = tc.aiecc_driver or AieccDriver.GRAPH
    peano = str(tc.clang.parent.parent) if tc.clang is not None else None
    return [str(tc.aiecc or "<aiecc>"),
            *aiecc_args(driver, design, xclbin=xclbin, insts=insts, peano=peano,
                        help_text=tc.aiecc_help)]


def designs(plan: NpuPlan) -> list[tuple[NpuPlan, str, str, str]]:
    """(plan, design file, xclbin, instructions) of each design a build makes: the plan, and
    where the geometry allows it the plan of diagonal block pairs reading their input once
    (:func:`~.plan.single_read_diagonal`), each checked by the validator first."""
    out = [(plan, DESIGN_NAME, XCLBIN_NAME, INSTS_NAME)]
    if reads_diagonal_once(plan.geometry):
        diagonal = single_read_diagonal(plan)
        validate_plan(diagonal)
        out.append((diagonal, DIAGONAL_DESIGN_NAME, DIAGONAL_XCLBIN_NAME, DIAGONAL_INSTS_NAME))
    return out


def installed_mlir_aie() -> str | None:
    """The installed mlir_aie wheel's version, if any (recorded in the manifest)."""
    try:
        from importlib.metadata import PackageNotFoundError, version
        return version("mlir_aie")
    except (ImportError, PackageNotFoundError):
        return None


def _run(cmd: list[str], cwd: Path) -> None:
    print("+", " ".join(cmd), flush=True)
    proc = subprocess.run(cmd, cwd=cwd)
    if proc.returncode:
        raise SystemExit(f"{PROG}: command failed with exit code {proc.returncode}")


def build(g: Geometry, root: Path, tc: Toolchain, dry_run: bool = False) -> Artifacts:
    """Build one geometry into ``root/<tag>/``."""
    art = Artifacts(root / geometry_tag(g))
    plan = build_plan(g)
    print(f"== {geometry_tag(g)} -> {art.directory}", flush=True)
    built = designs(plan)
    if dry_run:
        for _, design, _, _ in built:
            print(f"+ write {art.directory / design} (mlir-aie design of the plan)")
        print("+", " ".join(kernel_command(tc, g, art)))
        driver = tc.aiecc_driver.value if tc.aiecc_driver else "newest (aiecc not found)"
        for _, design, xclbin, insts in built:
            print(f"+ (cd {art.directory} &&", " ".join(aiecc_command(tc, design, xclbin, insts))
                  + ")", f"  # aiecc driver: {driver}")
        return art
    art.directory.mkdir(parents=True, exist_ok=True)
    for design_plan, design, _, _ in built:
        (art.directory / design).write_text(to_mlir(design_plan) + "\n")
    _run(kernel_command(tc, g, art), art.directory)
    for _, design, xclbin, insts in built:
        _run(aiecc_command(tc, design, xclbin, insts), art.directory)
    for path in [art.directory / name for _, _, xclbin, insts in built for name in (xclbin, insts)]:
        if not path.is_file():
            raise SystemExit(f"{PROG}: aiecc finished but {path} is missing")
    art.write_manifest(g, kernel=KERNEL_NAME, mlir_aie_release=MLIR_AIE_RELEASE["wheel"],
                       mlir_aie_installed=installed_mlir_aie(),
                       aiecc_driver=tc.aiecc_driver.value if tc.aiecc_driver else None)
    print(f"built {art.xclbin} and {art.insts}", flush=True)
    return art


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_geometry_arguments(p, "all", "all")
    p.add_argument("--build-root", type=Path, default=None,
                   help="where to build (default: the user's cache directory, "
                        f"{default_build_root()})")
    p.add_argument("--check", action="store_true", help="only report the toolchain")
    p.add_argument("--dry-run", action="store_true", help="print the steps, run nothing")
    a = p.parse_args(argv)
    tc = probe_toolchain()
    if tc.problems and not a.dry_run:
        print(f"{PROG}: cannot build the NPU design, the AIE toolchain is incomplete:",
              *[f"  - {x}" for x in tc.problems], INSTALL_TEXT, sep="\n", file=sys.stderr)
        return 2
    if a.check:
        print(f"toolchain complete: clang++ {tc.clang}, aiecc {tc.aiecc} "
              f"({tc.aiecc_driver.value} driver), include {tc.include}, "
              f"xclbinutil {tc.xclbinutil}")
        installed = installed_mlir_aie()
        if installed and installed not in MLIR_AIE_RELEASE["wheel"]:
            print(f"note: mlir_aie {installed} is installed; the design was checked against "
                  f"{MLIR_AIE_RELEASE['wheel']}")
        return 0
    names = sorted(NAMED_GEOMETRIES) if a.geometry == "all" else [a.geometry]
    for name in names:
        build(arguments_geometry(a, name), a.build_root or default_build_root(), tc, a.dry_run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
