"""The aiecc command line for the driver actually installed (three generations upstream).

Why: mlir-aie has shipped three ``aiecc`` drivers with different command lines, and the one a
wheel installs is not known in advance. All take **one** MLIR input; the kernel object is found
through ``external_func(..., link_with=...)`` in the design, never on the command line.

==================  ===================================  =====================================
generation          where upstream (Xilinx/mlir-aie)     outputs chosen with
==================  ===================================  =====================================
``python``          python/compiler/aiecc/cl_arguments   ``--aie-generate-xclbin``,
                    .py (argparse; first positional is   ``--aie-generate-npu-insts``; Peano by
                    the MLIR file, the rest go to the    ``--no-xchesscc --no-xbridge``
                    host compiler)
``cpp``             tools/aiecc/aiecc.cpp (LLVM cl;      same flags as ``python``
                    ``<input file> [host sources...]``)
``graph``           tools/aiecc/CommandLineOptions.h,    ``--get-xclbin``, ``--get-npu-insts``;
                    README.md (``aiecc [options]         Peano is the default (no
                    <input.mlir>``, host args after --)  ``--no-xchesscc``/``--no-xbridge``)
==================  ===================================  =====================================

:func:`detect_driver` reads the generation from ``aiecc --help``; :func:`aiecc_args` builds the
command; :func:`unknown_options` checks a command against a help text (the tests run it against
help texts recorded from the upstream sources in ``tests/data/aiecc/``).
"""

from __future__ import annotations

import re
import subprocess
from enum import StrEnum

#: The mlir-aie release the design and this command line were checked against (the wheel and
#: the source commits read; docs/npu_hardware.md). The build records it in ``build.json``.
MLIR_AIE_RELEASE = {
    "wheel": "mlir_aie==1.3.2.dev101+ge094875",
    "index": "https://github.com/Xilinx/mlir-aie/releases/expanded_assets/latest-wheels-3",
    "checked_sources": {
        "python/dialects/aie.py": "00cfd45fa6527f14a4f97069b6a52e84a4055dea",
        "python/dialects/aiex.py": "0155ebd7c8b77cd6846781dd0597a7adee9a7620",
        "python/compiler/aiecc/cl_arguments.py": "00065ead1b27b358cbb2e61bfe0e23675788f25a",
        "tools/aiecc/aiecc.cpp": "014ad1ff6f7d46288a9cb88562506bd96495b5a9",
        "tools/aiecc/CommandLineOptions.h": "08c791150ea62803920cd79f4c0360e7512dc59a",
        "tools/aiecc/README.md": "089e22763c79d91e427c0c5d0d8ded6e9abecaed",
    },
}


class AieccDriver(StrEnum):
    """The aiecc generations (see the module docstring)."""

    PYTHON = "python"
    CPP = "cpp"
    GRAPH = "graph"


class AieccError(RuntimeError):
    """aiecc could not be run or its generation not recognised; the message says which."""


def detect_driver(help_text: str) -> AieccDriver:
    """The generation of the aiecc whose ``--help`` printed ``help_text``.

    The graph driver lists ``--get=<name>`` and ``--output-dir`` and has no
    ``--aie-generate-xclbin``; the other two have ``--aie-generate-xclbin``, the Python one
    with argparse's ``usage:``, the C++ one with LLVM's ``USAGE:``.
    """
    has_generate = "--aie-generate-xclbin" in help_text
    if not has_generate and re.search(r"--get[= ]", help_text) and "--output-dir" in help_text:
        return AieccDriver.GRAPH
    if has_generate and re.search(r"^usage: ", help_text, re.MULTILINE):
        return AieccDriver.PYTHON
    if has_generate and "USAGE:" in help_text:
        return AieccDriver.CPP
    first = help_text.strip().splitlines()[:2]
    raise AieccError(f"unrecognised aiecc (its --help starts {first!r}); expected the Python "
                     f"driver, the C++ driver with --aie-generate-xclbin, or the driver with "
                     f"--get-xclbin")


def aiecc_args(driver: AieccDriver, design: str, *, xclbin: str, insts: str,
               tmpdir: str = "prj", peano: str | None = None,
               help_text: str | None = None) -> list[str]:
    """aiecc's arguments (without the program) that build ``xclbin`` and ``insts`` from
    ``design``, the one MLIR input, which comes last.

    ``peano`` (Peano's install directory) is passed as ``--peano`` only where ``help_text``
    shows the option (all generations read ``$PEANO_INSTALL_DIR`` or their configured path
    otherwise).
    """
    if driver is AieccDriver.GRAPH:
        outputs = ["--get-xclbin", "--get-npu-insts"]
    else:
        outputs = ["--no-xchesscc", "--no-xbridge", "--aie-generate-xclbin",
                   "--aie-generate-npu-insts"]
    args = [*outputs, f"--xclbin-name={xclbin}", f"--npu-insts-name={insts}",
            f"--tmpdir={tmpdir}"]
    if peano and help_text is not None and "--peano" in help_text:
        args.append(f"--peano={peano}")
    return [*args, design]


def unknown_options(args: list[str], help_text: str) -> list[str]:
    """Options in ``args`` that ``help_text`` does not list (an empty list: all known).

    An option counts as listed when ``--name`` occurs in the help as a whole word; for the
    graph driver's ``--get-<name>`` shorthands the help text must name them (the recorded
    help includes the selector list aiecc prints for an unknown selector).
    """
    unknown = []
    for arg in args:
        if not arg.startswith("-"):
            continue
        name = arg.split("=", 1)[0]
        if not re.search(re.escape(name) + r"(?![\w-])", help_text):
            unknown.append(name)
    return unknown


def positional_args(args: list[str]) -> list[str]:
    """The positional (non-option) arguments of an aiecc command built here: the inputs."""
    return [a for a in args if not a.startswith("-")]


def read_help(aiecc: str, timeout: float = 60.0) -> str:
    """``aiecc --help`` (stdout and stderr), or AieccError saying why it could not be read."""
    try:
        proc = subprocess.run([aiecc, "--help"], capture_output=True, text=True,
                              timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise AieccError(f"could not run {aiecc} --help ({exc})") from exc
    text = proc.stdout + proc.stderr
    if not text.strip():
        raise AieccError(f"{aiecc} --help printed nothing (exit {proc.returncode})")
    return text


__all__ = ["MLIR_AIE_RELEASE", "AieccDriver", "AieccError", "aiecc_args", "detect_driver",
           "positional_args", "read_help", "unknown_options"]
