"""Modules that moved keep their old import path for a release: the old name is the new module
itself, and importing it warns with the new path."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from xengine_block._moved import FORWARDED, MOVED


@pytest.mark.parametrize("old, new", sorted(MOVED.items()))
def test_old_path_is_the_new_module_with_a_warning(old, new):
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=new.replace(".", r"\.")):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)


@pytest.mark.parametrize("package", sorted(FORWARDED))
def test_a_module_that_became_a_package_forwards_its_names_with_a_warning(package):
    new, names = FORWARDED[package]
    old = importlib.import_module(package)
    for name in names:
        with pytest.warns(DeprecationWarning, match=rf"{package}\.{name} has moved to "):
            assert getattr(old, name) is getattr(importlib.import_module(new), name)
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        old.nothing_here  # noqa: B018


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
        assert importlib.util.find_spec(new) is not None, new
        base = root.joinpath(*old.split("."))
        assert not base.with_suffix(".py").exists() and not (base / "__init__.py").exists(), \
            f"{old} still exists as a module"


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

    from xengine_block.bifrost.blocks import CaptureBlock as BifrostCapture
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
    for cls in (Capture, CaptureBlock, BifrostCapture):
        assert cls.layout.new == "plan" and cls.layout.old == "layout"


def test_renamed_module_names_give_the_new_object_with_a_warning():
    from xengine_block.capture import placement

    with pytest.warns(DeprecationWarning, match="placement.CaptureLayout is CapturePlan"):
        assert placement.CaptureLayout is placement.CapturePlan
    with pytest.raises(AttributeError, match="no attribute 'CaptureLayoutt'"):
        placement.CaptureLayoutt  # noqa: B018 (a typo stays an error)
