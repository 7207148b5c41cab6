"""Modules that moved keep their old import path for a release: the old name is the new module
itself, and importing it warns with the new path."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import bifrost_or_skip
from xengine_block._moved import MOVED


def needs_of(module: str) -> None:
    """Skip with the reason (or fail where required) when ``module`` needs real Bifrost and it
    does not import: ``xengine_block.bifrost`` and everything under it."""
    if module == "xengine_block.bifrost" or module.startswith("xengine_block.bifrost."):
        bifrost_or_skip()


def module_file(root: Path, name: str) -> Path | None:
    """Where module ``name`` lives under ``root`` (a module or a package), found without
    importing it (a package may need what is absent here, like real Bifrost)."""
    base = root.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.exists():
            return candidate
    return None


@pytest.mark.parametrize("old, new", sorted(MOVED.items()))
def test_old_path_is_the_new_module_with_a_warning(old, new):
    needs_of(new)
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=new.replace(".", r"\.")):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)


def test_the_old_npu_design_module_s_names_are_read_from_the_design_package():
    """``xengine_block.npu.design`` was the module now at ``npu.design.mlir``: its public names
    stay readable from the package (the same objects, with a warning); its submodules still
    import, and a name it never had stays an error."""
    from xengine_block.npu import design
    from xengine_block.npu.design import mlir, plan

    for name in ("to_mlir", "design_calls", "format_calls", "MlirAieUnavailable", "INSTALL_HINT"):
        with pytest.warns(DeprecationWarning, match=rf"design\.{name} has moved to "
                                                    rf"xengine_block\.npu\.design\.mlir"):
            assert getattr(design, name) is getattr(mlir, name)
    assert design.plan is plan
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        design.nothing_here  # noqa: B018


def test_names_from_an_old_path_are_the_new_objects():
    """``from old import name`` in a fresh interpreter (the README's import of ``UdpSource``)."""
    code = ("import warnings; warnings.simplefilter('error'); "
            "from xengine_block.capture import transports as t\n"
            "try:\n    from xengine_block.capture.sources import UdpSource\n"
            "except DeprecationWarning as e: print('warned', e)\n"
            "warnings.simplefilter('ignore')\n"
            "from xengine_block.capture.sources import UdpSource\n"
            "print(UdpSource is t.UdpSource)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "warned xengine_block.capture.sources has moved to xengine_block.capture.transports" \
        in out.stdout and out.stdout.strip().endswith("True"), out.stdout + out.stderr


def test_every_new_module_exists_and_no_old_one_does():
    root = Path(importlib.import_module("xengine_block").__file__).parent.parent
    for old, new in MOVED.items():
        assert module_file(root, new) is not None, f"{new} does not exist"
        assert module_file(root, old) is None, f"{old} still exists as a module"


def test_the_new_module_keeps_its_own_spec():
    """Importing the old name leaves the module's ``__spec__`` naming the new module, so
    ``importlib.reload`` reloads it under its own name (in a fresh interpreter: a reload here
    would give the other tests' modules stale classes)."""
    code = ("import importlib, warnings; warnings.simplefilter('ignore')\n"
            "import xengine_block.frames as f, xengine_block.layout\n"
            "print(f.__spec__.name, f.__name__)\n"
            "assert importlib.reload(f) is f\n"
            "print(f.__spec__.name, f.__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["xengine_block.frames"] * 4, out.stdout + out.stderr


def test_renamed_capture_attribute_reads_and_sets_the_new_one_with_a_warning():
    """``Capture.layout`` (0.1) is ``Capture.plan``: the same object, read or set, with a
    warning naming the new attribute; the class attribute itself does not warn (help, docs)."""
    import spead2

    from xengine_block.capture.receive import Capture, CaptureBlock
    from xengine_block.capture.transports import InprocSource
    from xengine_block.geometry import Geometry

    with Capture(InprocSource(spead2.InprocQueue()), Geometry(nstream=4, npacket=2)) as cap:
        with pytest.warns(DeprecationWarning, match=r"Capture\.layout is now Capture\.plan"):
            assert cap.layout is cap.plan
        plan = cap.plan
        with pytest.warns(DeprecationWarning, match="Capture.plan"):
            cap.layout = "replaced"
        assert cap.plan == "replaced"
        cap.plan = plan
    for cls in (Capture, CaptureBlock):
        assert cls.layout.new == "plan" and cls.layout.old == "layout"


def test_renamed_capture_attribute_on_the_bifrost_capture():
    """The Bifrost capture block keeps the old name too (skips without real Bifrost)."""
    xb = bifrost_or_skip()
    assert xb.CaptureBlock.layout.new == "plan" and xb.CaptureBlock.layout.old == "layout"


def test_renamed_module_names_give_the_new_object_with_a_warning():
    from xengine_block.capture import placement

    with pytest.warns(DeprecationWarning, match="placement.CaptureLayout is CapturePlan"):
        assert placement.CaptureLayout is placement.CapturePlan
    with pytest.raises(AttributeError, match="no attribute 'CaptureLayoutt'"):
        placement.CaptureLayoutt  # noqa: B018 (a typo stays an error)


def test_names_of_the_split_uvh5_module_keep_their_old_path():
    """``outputs/uvh5.py`` was split by role: names it still uses stay importable from it as
    they were; the others (and the renamed error type) warn with their new path."""
    from xengine_block.outputs import baselines, errors, site, staged_file, times, uvh5

    assert uvh5.SiteInfo is site.SiteInfo and uvh5.StagedFile is staged_file.StagedFile
    assert uvh5.baseline_map is baselines.baseline_map and uvh5.LstClock is times.LstClock
    with pytest.warns(DeprecationWarning, match="uvh5.UVH5WriteError is OutputWriteError"):
        assert uvh5.UVH5WriteError is errors.OutputWriteError
    with pytest.warns(DeprecationWarning, match="moved to xengine_block.outputs.times"):
        assert uvh5.load_time_tables is times.load_time_tables
    with pytest.warns(DeprecationWarning, match="moved to xengine_block.outputs.baselines"):
        assert uvh5.BaselineMap is baselines.BaselineMap
    with pytest.raises(AttributeError, match="no attribute 'UVH5Writr'"):
        uvh5.UVH5Writr  # noqa: B018 (a typo stays an error)
