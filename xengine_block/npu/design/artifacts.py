"""Where a built NPU design lives and which geometry it was built for.

Shared by the build (:mod:`.build` writes), the pyxrt backend (finds and checks) and the
simulated device (writes a stand-in), so the file names and the matching rule exist once.

One build = one *design geometry*: the geometry with ``nstream`` set to the NPU block and
``nchan`` to one channel group, because the xclbin computes one block pair of one channel group
per call; any S and any number of groups run on it through block pairs (``blockpairs.py``).
A build directory holds ``xcorr.xclbin``, ``insts.bin`` (the runtime sequence as uint32 words)
and ``build.json`` (the design geometry, checked before use so a build for another P or tiling
is never run on the wrong data).
"""

from __future__ import annotations

import argparse
import json
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

from ...geometry import NIBBLE_ORDERS, PUBLISHED, SAMPLE_BITS, Geometry, small_test_geometry
from ...user_cache import cache_dir
from .dataflow import MAX_NPACKET

#: Environment variable naming a build directory (or a root of ``<tag>/`` directories).
BUILD_DIR_ENV = "XENGINE_XCLBIN_DIR"
XCLBIN_NAME = "xcorr.xclbin"
INSTS_NAME = "insts.bin"
MANIFEST_NAME = "build.json"
#: The second design of a build: diagonal block pairs reading their one input once.
DIAGONAL_DESIGN_NAME = "design_diagonal.mlir"
DIAGONAL_XCLBIN_NAME = "xcorr_diagonal.xclbin"
DIAGONAL_INSTS_NAME = "insts_diagonal.bin"
#: The xclbin's kernel name (aiecc's default) and how it is called through XRT (the published
#: design's host code): ``kernel(OPCODE, instr_bo, n_instr_words, bo_a, bo_b, bo_out)``, the BOs
#: allocated in the memory groups of arguments 1 (instructions), 3, 4 and 5.
KERNEL_NAME = "MLIR_AIE"
OPCODE = 3
INSTR_GROUP, A_GROUP, B_GROUP, OUT_GROUP = 1, 3, 4, 5


#: Geometries the build makes by name: the published design and the small test geometry (32-stream
#: blocks on a 2 x 4 array), which the tests use and which builds and runs in seconds.
NAMED_GEOMETRIES = {"published": PUBLISHED, "small": small_test_geometry()}
#: Old names of :data:`NAMED_GEOMETRIES`, accepted for one release with a warning.
RENAMED_GEOMETRIES = {"seed": "published"}


def geometry_name(name: str) -> str:
    """``name``, or the current name of an old one (warning: FutureWarning, which Python shows
    to a command's user, as ``--geometry`` is typed by one)."""
    if name in RENAMED_GEOMETRIES:
        new = RENAMED_GEOMETRIES[name]
        warnings.warn(f"geometry {name!r} is now {new!r}; the old name will be removed in the "
                      "next release", FutureWarning, stacklevel=2)
        return new
    return name


def named_geometry(name: str, npacket: int | None = None, sample_bits: int = 8,
                   nibble_order: str = "re_high") -> Geometry:
    """A geometry of :data:`NAMED_GEOMETRIES` (or an old name of one), optionally with another
    P, or ci4 (``sample_bits=4``) in either nibble order."""
    name = geometry_name(name)
    if name not in NAMED_GEOMETRIES:
        raise ValueError(f"unknown geometry {name!r}; choose one of {sorted(NAMED_GEOMETRIES)}")
    g = NAMED_GEOMETRIES[name]
    if npacket is not None:
        g = g.replace(npacket=npacket)
    if sample_bits != 8:
        g = g.replace(sample_bits=sample_bits, nibble_order=nibble_order)
    return g


def add_geometry_arguments(p: argparse.ArgumentParser, default: str, *extra: str) -> None:
    """``--geometry`` (a name of :data:`NAMED_GEOMETRIES` or ``extra``), ``--npacket``,
    ``--bits`` and ``--nibble-order``: the options of the build and design scripts."""
    p.add_argument("--geometry", type=geometry_name, choices=[*sorted(NAMED_GEOMETRIES), *extra],
                   default=default)
    p.add_argument("--npacket", type=int, help="packets per NPU call (default: the geometry's)")
    p.add_argument("--bits", type=int, choices=SAMPLE_BITS, default=8,
                   help="bits per re/im part: 8 (ci8) or 4 (ci4, sent packed and unpacked on "
                        "the compute tiles)")
    p.add_argument("--nibble-order", choices=NIBBLE_ORDERS, default="re_high",
                   help="ci4: which nibble holds the real part")


def arguments_geometry(a: argparse.Namespace, name: str) -> Geometry:
    """The geometry :func:`add_geometry_arguments`' options name, for geometry ``name``."""
    return named_geometry(name, a.npacket, a.bits, a.nibble_order)


def design_geometry(g: Geometry) -> Geometry:
    """The geometry the xclbin is built for: one NPU block of streams, one channel group, and at
    most :data:`~.plan.MAX_NPACKET` packets (only ci4's int32 bound allows more; a longer call
    is several NPU calls, their int32 results summed)."""
    return g.replace(nstream=g.npu_block, nchan=g.nchan_pkt,
                     npacket=min(g.npacket, MAX_NPACKET))


def geometry_tag(g: Geometry) -> str:
    """Directory name of the build for ``g``: every field that changes the design (ci4 builds
    end in ``_ci4_<nibble order>``)."""
    d = design_geometry(g)
    samples = f"_ci4_{d.nibble_order}" if d.ci4 else ""
    return (f"b{d.npu_block}_c{d.nchan_pkt}_k{d.ncoarse}_p{d.npacket}"
            f"_n{d.tile_n}m{d.tile_m}t{d.tile_t}_{d.rows}x{d.cols}{samples}")


@dataclass(frozen=True)
class Artifacts:
    """The files of one build."""

    directory: Path

    @property
    def xclbin(self) -> Path:
        return self.directory / XCLBIN_NAME

    @property
    def insts(self) -> Path:
        return self.directory / INSTS_NAME

    @property
    def diagonal_xclbin(self) -> Path:
        """The design for diagonal block pairs (A = B), reading its input once
        (:func:`~.plan.single_read_diagonal`); absent where the geometry cannot have it."""
        return self.directory / DIAGONAL_XCLBIN_NAME

    @property
    def diagonal_insts(self) -> Path:
        return self.directory / DIAGONAL_INSTS_NAME

    @property
    def has_diagonal(self) -> bool:
        return self.diagonal_xclbin.is_file() and self.diagonal_insts.is_file()

    @property
    def manifest(self) -> Path:
        return self.directory / MANIFEST_NAME

    def write_manifest(self, g: Geometry, **extra: object) -> None:
        """Record the design geometry next to the binaries (the build's last step)."""
        data = {"geometry": design_geometry(g).to_dict(), "tag": geometry_tag(g), **extra}
        self.manifest.write_text(json.dumps(data, indent=1) + "\n")

    def check(self, g: Geometry) -> str | None:
        """None if this directory holds a complete build for ``g``, else what is wrong."""
        missing = [p.name for p in (self.xclbin, self.insts, self.manifest) if not p.is_file()]
        if missing:
            return f"{self.directory}: missing {', '.join(missing)}"
        try:
            built = Geometry.from_dict(json.loads(self.manifest.read_text())["geometry"])
        except (ValueError, KeyError, TypeError) as exc:
            return f"{self.manifest}: unreadable ({exc})"
        if built != design_geometry(g):
            return (f"{self.directory} was built for {geometry_tag(built)}, "
                    f"not {geometry_tag(g)}")
        return None


def default_build_root() -> Path:
    """Where the build writes by default and the backend looks last: ``xclbin/`` in the user's
    cache directory (:mod:`xengine_block.user_cache`), never the installation."""
    return cache_dir("xclbin")


def build_roots(build_dir: str | os.PathLike | None = None) -> list[Path]:
    """Where to look, in order: ``build_dir``, ``$XENGINE_XCLBIN_DIR``, the cache's
    :func:`default_build_root`."""
    roots = [Path(p) for p in (build_dir, os.environ.get(BUILD_DIR_ENV)) if p]
    return roots + [default_build_root()]


def list_builds(build_dir: str | os.PathLike | None = None) -> list[Artifacts]:
    """Every complete-looking build (manifest and both binaries) under the build roots."""
    found = []
    for root in build_roots(build_dir):
        for manifest in [root / MANIFEST_NAME, *sorted(root.glob(f"*/{MANIFEST_NAME}"))]:
            art = Artifacts(manifest.parent)
            if all(p.is_file() for p in (art.manifest, art.xclbin, art.insts)):
                found.append(art)
    return found


def find_artifacts(g: Geometry,
                   build_dir: str | os.PathLike | None = None) -> tuple[Artifacts | None, str]:
    """(the build for ``g``, why) or (None, everything that was tried and why it failed).

    Each root is tried as ``<root>/<tag>/`` and then as a build directory itself.
    """
    tried = []
    for root in build_roots(build_dir):
        for directory in (root / geometry_tag(g), root):
            art = Artifacts(directory)
            problem = art.check(g)
            if problem is None:
                return art, f"build {directory}"
            tried.append(problem)
    ci4 = f" --bits 4 --nibble-order {g.nibble_order}" if g.ci4 else ""
    return None, (f"no xclbin built for {geometry_tag(g)} (build it with "
                  f"`python -m xengine_block.npu.design.build{ci4}` or `make -C aie`, or set "
                  f"{BUILD_DIR_ENV}); tried: "
                  + "; ".join(tried))
