"""aiecc's command line for each driver generation, against help texts recorded from upstream.

The help texts in ``tests/data/aiecc/`` were reconstructed from mlir-aie's sources (see the
README there); each generation must be recognised, every option we pass must be one it lists,
and there must be exactly one positional argument: the MLIR design.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from xengine_block.npu.design.aiecc import (
    MLIR_AIE_RELEASE,
    AieccDriver,
    AieccError,
    aiecc_args,
    detect_driver,
    positional_args,
    unknown_options,
)

DATA = Path(__file__).resolve().parents[2] / "data" / "aiecc"
ROOT = Path(__file__).resolve().parents[3]


def recorded_help(driver: AieccDriver) -> str:
    """The recorded help text without its provenance comments."""
    lines = (DATA / f"{driver.value}.help.txt").read_text().splitlines()
    return "\n".join(x for x in lines if not x.startswith("#"))


@pytest.mark.parametrize("driver", list(AieccDriver))
def test_generation_is_detected_from_its_help(driver):
    assert detect_driver(recorded_help(driver)) is driver


@pytest.mark.parametrize("driver", list(AieccDriver))
def test_command_uses_only_listed_options_and_one_mlir_input(driver):
    help_text = recorded_help(driver)
    args = aiecc_args(driver, "design.mlir", xclbin="xcorr.xclbin", insts="insts.bin",
                      peano="/opt/llvm-aie", help_text=help_text)
    assert unknown_options(args, help_text) == []
    assert positional_args(args) == ["design.mlir"]
    assert args[-1] == "design.mlir"
    assert not any(a.endswith(".o") for a in args)  # the kernel is linked via link_with
    assert "--xclbin-name=xcorr.xclbin" in args and "--npu-insts-name=insts.bin" in args
    assert ("--peano=/opt/llvm-aie" in args) == ("--peano" in help_text)


def test_each_generation_selects_outputs_its_own_way():
    new = aiecc_args(AieccDriver.GRAPH, "d.mlir", xclbin="x", insts="i")
    old = aiecc_args(AieccDriver.PYTHON, "d.mlir", xclbin="x", insts="i")
    assert {"--get-xclbin", "--get-npu-insts"} <= set(new)
    assert not any(a.startswith(("--aie-generate", "--no-x")) for a in new)
    assert {"--aie-generate-xclbin", "--aie-generate-npu-insts", "--no-xchesscc",
            "--no-xbridge"} <= set(old)
    assert aiecc_args(AieccDriver.CPP, "d.mlir", xclbin="x", insts="i") == old


@pytest.mark.parametrize("driver", list(AieccDriver))
def test_a_command_for_another_generation_is_caught(driver):
    """The check can fail: the old flags are unknown to the newest driver and vice versa."""
    other = AieccDriver.PYTHON if driver is AieccDriver.GRAPH else AieccDriver.GRAPH
    args = aiecc_args(other, "design.mlir", xclbin="x", insts="i")
    assert unknown_options(args, recorded_help(driver))


def test_the_old_command_line_had_two_inputs():
    """What the build ran before: the Python driver would take xcorr.o as the MLIR file."""
    old = ["--aie-generate-xclbin", "--no-xchesscc", "xcorr.o", "design.mlir"]
    assert positional_args(old)[0] == "xcorr.o"


def test_unrecognised_aiecc_is_a_clear_error():
    with pytest.raises(AieccError, match="unrecognised aiecc"):
        detect_driver("some other tool\n  --frobnicate\n")


def test_release_is_pinned():
    assert MLIR_AIE_RELEASE["wheel"].startswith("mlir_aie==")
    assert all(len(sha) == 40 for sha in MLIR_AIE_RELEASE["checked_sources"].values())
    docs = (ROOT / "docs" / "npu_hardware.md").read_text()
    assert MLIR_AIE_RELEASE["wheel"] in docs


def test_dry_run_prints_one_mlir_input_without_the_toolchain():
    proc = subprocess.run([sys.executable, "-m", "xengine_block.npu.design.build", "--dry-run",
                           "--geometry", "small"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stdout.splitlines() if "<aiecc>" in x or "aiecc " in x)
    cmd = line.split("&&", 1)[1].split(")", 1)[0].split()
    assert positional_args(cmd[1:]) == ["design.mlir"]
