"""The mlir-aie design generated from the plan, and its build.

Without mlir-aie: the recorded calls (the exact mlir-aie API calls the design would make) are
decoded here, independently of the generator, and compared with the plan the emulator verified
and with values hand-checked against the published design. With mlir-aie (and the toolchain): the
MLIR is generated and the small geometry is built; otherwise those tests skip with the reason.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import require
from xengine_block.geometry import PUBLISHED, small_test_geometry
from xengine_block.kernel_sources import source_dir
from xengine_block.npu import build_plan
from xengine_block.npu.design import build
from xengine_block.npu.design.artifacts import geometry_tag
from xengine_block.npu.design.dataflow import KERNEL_FUNC, KERNEL_OBJECT, ZERO_FUNC, Dim
from xengine_block.npu.design.mlir import FOREVER, design_calls, format_calls, walk
from xengine_block.npu.design.plan import reads_diagonal_once, single_read_diagonal
from xengine_block.npu.host.hostkernel import KERNEL_SOURCE

BUILD_MODULE = [sys.executable, "-m", "xengine_block.npu.design.build"]
PLANS = {"small": build_plan(small_test_geometry()), "published": build_plan(PUBLISHED),
         "small-ci4-re_low": build_plan(small_test_geometry(sample_bits=4,
                                                             nibble_order="re_low")),
         "published-ci4": build_plan(PUBLISHED.replace(sample_bits=4))}


# ---------------------------------------------------------------------- independent decoding
def tile_name(tile):
    return f"tile_{tile.col}_{tile.row}"


def lock_op(op):
    return None if op is None else (op.lock, op.value)


def plan_chains(plan):
    """What each DMA channel must run, straight from the plan."""
    return {(tile_name(c.port.tile), c.port.direction, c.port.channel): [
        dict(buffer=bd.buffer, offset=bd.offset, len=bd.length,
             dims=[tuple(d) for d in bd.dims], acquire=lock_op(bd.acquire),
             release=lock_op(bd.release)) for bd in c.bds] for c in plan.chains}


def decode_bd(body):
    bd = dict(acquire=None, release=None, dims=[])
    for call in body:
        if call.op == "use_lock":
            key = "acquire" if call.args[1] == "AcquireGreaterEqual" else "release"
            assert key not in bd or bd[key] is None, "one acquire and one release per BD"
            assert (key == "acquire") == ("buffer" not in bd), "acquire before, release after"
            bd[key] = (call.args[0].name, call.kwargs["value"])
        elif call.op == "dma_bd":
            bd.update(buffer=call.args[0].name, offset=call.kwargs["offset"],
                      len=call.kwargs["len"], dims=call.kwargs.get("dimensions", []))
    assert body[-1].op == "next_bd"
    return bd, body[-1].args[0].name


def decoded_chains(calls):
    """Follow each region's dma_start -> BD blocks -> next_bd until the chain loops."""
    chains = {}
    for call, _ in walk(calls):
        if call.op not in ("mem", "memtile_dma"):
            continue
        tile = call.args[0].name
        blocks = {b.args[0]: b.body for b in call.body if b.op == "block"}
        blocks[0] = tuple(b for b in call.body if b.op != "block")
        starts = [c for body in blocks.values() for c in body if c.op == "dma_start"]
        ends = [k for k, body in blocks.items() if [c.op for c in body] == ["end"]]
        assert ends == [max(blocks)], "the region's last block ends it"
        for start in starts:
            first = k = start.kwargs["dest"].name
            bds = []
            while True:
                bd, k = decode_bd(blocks[k])
                bds.append(bd)
                if k == first:
                    break
                assert len(bds) < len(blocks)
            chains[(tile, *start.args)] = bds
    return chains


@pytest.mark.parametrize("name", PLANS)
def test_dma_bds_equal_the_plan(name):
    plan = PLANS[name]
    assert decoded_chains(design_calls(plan)) == plan_chains(plan)


@pytest.mark.parametrize("name", PLANS)
def test_tiles_buffers_locks_flows_and_cores_equal_the_plan(name):
    plan = PLANS[name]
    calls = [c for c, _ in walk(design_calls(plan))]
    by_op = {}
    for c in calls:
        by_op.setdefault(c.op, []).append(c)
    assert by_op["device"][0].args == ("npu2",)
    assert {c.result for c in by_op["tile"]} == {tile_name(t) for t in plan.tiles}
    assert {(c.kwargs["name"], c.args[0].name, c.args[1], c.args[2]) for c in by_op["buffer"]} \
        == {(b.name, tile_name(b.tile), b.dtype, (b.nelem,)) for b in plan.buffers}
    assert {(c.kwargs["sym_name"], c.args[0].name, c.kwargs["lock_id"], c.kwargs["init"])
            for c in by_op["lock"]} == {(lk.name, tile_name(lk.tile), lk.lock_id, lk.init)
                                        for lk in plan.locks}
    flows = {(c.args[0].name, c.args[2], c.args[3].name, c.args[5]) for c in by_op["flow"]}
    assert flows == {(tile_name(f.source.tile), f.source.channel, tile_name(d.tile), d.channel)
                     for f in plan.flows for d in f.dests}
    assert len(flows) == len(by_op["flow"])
    funcs = {c.args[0]: c.kwargs for c in by_op["external_func"]}
    g = plan.geometry
    # per call: A and B as the DMAs bring them (ci4: one byte per complex sample, N T 64 and
    # M T 64), the accumulators, and for ci4 the int8 A and B it unpacks them into
    sample_block = 64 if g.ci4 else 128
    inputs = [("int8", (g.tile_n * g.tile_t * sample_block,)),
              ("int8", (g.tile_m * g.tile_t * sample_block,)),
              ("int32", (g.tile_n * g.tile_m * 128,))]
    if g.ci4:
        inputs += [("int8", (g.tile_n * g.tile_t * 128,)), ("int8", (g.tile_m * g.tile_t * 128,))]
    kernel = f"xcorr_kernel_ci4_{g.nibble_order}" if g.ci4 else KERNEL_FUNC
    assert set(funcs) == {kernel, ZERO_FUNC}
    assert funcs[kernel] == dict(inputs=inputs, link_with=KERNEL_OBJECT)
    assert funcs[ZERO_FUNC]["inputs"] == [("int32", (g.tile_n * g.tile_m * 128,))]
    # every core: forever { zero; P * calls_per_packet / 2 x (two kernel calls) }
    assert len(by_op["core"]) == len(plan.cores) == g.rows * g.cols
    loops = sorted({c.args[0] for c in by_op["for"]})
    assert loops == [g.npacket * g.npu_ncalls_per_packet // 2, FOREVER]
    kernel_calls = [c for c in by_op["call"] if c.args[0].name == kernel]
    assert len(kernel_calls) == 2 * len(plan.cores)
    core = plan.cores[0]
    unpacked = list(core.unpacked or ())
    assert len(unpacked) == (2 if g.ci4 else 0)
    assert [a.name for a in kernel_calls[0].args[1:]] == [core.a[0], core.b[0], core.acc,
                                                          *unpacked]
    assert [a.name for a in kernel_calls[1].args[1:]] == [core.a[1], core.b[1], core.acc,
                                                          *unpacked]


@pytest.mark.parametrize("name", PLANS)
def test_runtime_sequence_equals_the_plan_tasks(name):
    plan = PLANS[name]
    (seq,) = [c for c, _ in walk(design_calls(plan)) if c.op == "runtime_sequence"]
    assert seq.args == tuple((a.dtype, (a.nelem,)) for a in plan.host_args)
    assert seq.kwargs["names"] == ("a", "b", "out")
    tasks = [c for c in seq.body if c.op == "dma_configure_task"]
    assert [t.result for t in tasks] == [t.name for t in plan.tasks]
    for call, task in zip(tasks, plan.tasks, strict=True):
        assert (call.args[0].name, *call.args[1:]) == (
            tile_name(task.port.tile), task.port.direction, task.port.channel)
        assert call.kwargs.get("repeat_count", 0) == task.repeat_count
        assert call.kwargs.get("issue_token", False) == task.wait
        bd, end = call.body
        assert end.op == "end" and bd.op == "shim_dma_bd"
        pad = [Dim(1, 0)] * (4 - len(task.dims))
        assert bd.args[0].name == task.host and bd.kwargs["offset"] == task.offset
        assert bd.kwargs["sizes"] == [d.size for d in (*pad, *task.dims)]
        assert bd.kwargs["strides"] == [d.stride for d in (*pad, *task.dims)]
    start, wait = seq.body[-2:]
    assert start.op == "dma_start_task" and [r.name for r in start.args] == [
        t.name for t in plan.tasks]
    assert wait.op == "dma_await_task" and [r.name for r in wait.args] == [
        t.name for t in plan.tasks if t.wait]


def _shim_bd(calls, task_name):
    (task,) = [c for c, _ in walk(calls) if c.op == "dma_configure_task"
               and c.result == task_name]
    return task, task.body[0]


def _bd_dims(calls, tile, direction, channel, index):
    return decoded_chains(calls)[(tile, direction, channel)][index]


def test_seed_values_from_the_notes():
    calls = design_calls(PLANS["published"])
    # shim read per tile: 9 channels (960) x P packets (8640 S) x 32 streams (8640) x 960 B,
    # offset 32 streams * 8640 * shim index; repeat_count = 9 - 1 (the notes' quirk)
    task, bd = _shim_bd(calls, "in_a_r1_h1")
    assert task.args[0].name == "tile_3_0" and task.args[1:] == ("MM2S", 0)
    assert task.kwargs == {"repeat_count": 8}
    assert bd.kwargs == dict(offset=32 * 8640 * 3, sizes=[9, 136, 32, 960],
                             strides=[960, 8640 * 256, 8640, 1])
    task, bd = _shim_bd(calls, "in_b_c5")
    assert task.args[0].name == "tile_5_0" and task.args[1:] == ("MM2S", 1)
    assert bd.kwargs["offset"] == 32 * 8640 * 5
    # memory-tile write: [(N/2, 4 a_len / N), (8, 8), (2 T 4, 64), (8, 1)], a_len = N T 128
    n, t = 8, 15
    a_len = n * t * 128
    a_in = _bd_dims(calls, "tile_2_1", "S2MM", 1, 0)
    assert a_in["dims"] == [(n // 2, 4 * a_len // n), (8, 8), (2 * t * 4, 64), (8, 1)]
    assert a_in["offset"] == 4 * a_len // 2 and a_in["len"] == 4 * a_len // 2
    # memory-tile read for the compute tiles: [(N, 4 a_len / N), (T, 128), (128, 1)] at k*128T
    a_out = decoded_chains(calls)[("tile_0_1", "MM2S", 0)]
    sends = [bd for bd in a_out if bd["len"]]
    assert [bd["offset"] for bd in sends] == [k * 128 * t for k in range(4)] * 2
    assert sends[0]["dims"] == [(n, 4 * a_len // n), (t, 128), (128, 1)]
    assert len(a_out) == 12  # 6 BDs per buffer with the zero-length lock waits
    assert [bd["len"] for bd in a_out[:6]] == [0, a_len, a_len, a_len, a_len, 0]
    # B memory tile: counting locks, prod starts at 2 * 4 sample blocks, 8-BD MM2S chain
    b_out = decoded_chains(calls)[("tile_3_1", "MM2S", 1)]
    assert len(b_out) == 8 and {bd["acquire"] for bd in b_out} == {("mem_b_c3_cons", 1)}
    # output: 9 channels x 32 stream rows x 512 words per column of the array
    task, bd = _shim_bd(calls, "out_c2")
    assert task.args[1:] == ("S2MM", 0) and task.kwargs == {"issue_token": True}
    assert bd.kwargs == dict(offset=2 * 4 * 4096, sizes=[1, 9, 32, 512],
                             strides=[0, 8 * 4 * 4096, 512, 1])


def test_a_changed_plan_changes_the_calls():
    plan = PLANS["small"]
    name = "mem_b_c2_out_buf0_call1"
    dims = list(plan.bd(name).dims)
    dims[1] = Dim(dims[1].size, 64)
    changed = plan.replace_bd(name, dims=tuple(dims))
    chains = decoded_chains(design_calls(changed))
    assert chains != decoded_chains(design_calls(plan))
    assert chains == plan_chains(changed)


# ---------------------------------------------------------------------- with mlir-aie
def test_mlir_module_is_generated():
    pytest.importorskip("aie.dialects.aie", reason="mlir-aie (mlir_aie wheel) is not installed")
    from xengine_block.npu.design.mlir import to_mlir

    plan = PLANS["small"]
    text = to_mlir(plan)
    assert "aie.device(npu2)" in text
    assert text.count("aie.dma_bd(") >= len(plan.bds())
    assert "aiex.runtime_sequence" in text and text.count("aiex.dma_configure_task") == len(
        plan.tasks)


def test_small_geometry_builds(tmp_path):
    tc = build.probe_toolchain()
    if tc.problems:
        pytest.skip("AIE toolchain incomplete: " + "; ".join(tc.problems))
    proc = subprocess.run([*BUILD_MODULE, "--geometry", "small",
                           "--build-root", str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    from xengine_block.npu.design.artifacts import find_artifacts

    art, why = find_artifacts(small_test_geometry(), tmp_path)
    assert art is not None, why


# ---------------------------------------------------------------------- the build script
def test_build_without_toolchain_stops_with_install_instructions(tmp_path):
    env = dict(os.environ, PEANO_INSTALL_DIR=str(tmp_path / "no-peano"),
               PATH=os.path.dirname(sys.executable))
    proc = subprocess.run([*BUILD_MODULE, "--geometry", "small",
                           "--build-root", str(tmp_path)], capture_output=True, text=True,
                          env=env)
    assert proc.returncode == 2
    err = proc.stderr
    assert "toolchain is incomplete" in err and "Peano clang++ not found" in err
    for needed in ("github.com/Xilinx/mlir-aie/releases", "github.com/Xilinx/llvm-aie/releases",
                   "XRT >= 2.20", "amdxdna", "Linux 6.14"):
        assert needed in err
    assert not any(tmp_path.iterdir()) or list(tmp_path.iterdir()) == [tmp_path / "no-peano"]


def test_build_commands():
    tc = build.Toolchain(Path("/peano/bin/clang++"), Path("/aie/include"), Path("/bin/aiecc"),
                         Path("/bin/xclbinutil"), True, ())
    from xengine_block.npu.design.artifacts import Artifacts

    art = Artifacts(Path("/b/published"))
    cmd = build.kernel_command(tc, PUBLISHED, art)
    assert cmd[0] == "/peano/bin/clang++"
    for flag in ("--target=aie2p-none-unknown-elf", "-O2", "-std=c++20", "-I/aie/include",
                 "-DN=8", "-DM=4", "-DT=15", "-c"):
        assert flag in cmd
    assert cmd[-3:] == [str(KERNEL_SOURCE), "-o", f"/b/published/{KERNEL_OBJECT}"]
    assert KERNEL_SOURCE.is_file() and KERNEL_SOURCE.is_relative_to(source_dir("kernels"))
    small = build.kernel_command(tc, small_test_geometry(), art)
    assert {"-DN=2", "-DM=1", "-DT=15"} <= set(small)
    # one object serves ci8 and ci4: its entry points are all compiled, the plan names one
    assert build.kernel_command(tc, small_test_geometry(sample_bits=4), art) == small
    cc = build.aiecc_command(tc)  # aiecc's generation unknown: the newest driver's form
    for flag in ("--get-xclbin", "--get-npu-insts", "--xclbin-name=xcorr.xclbin",
                 "--npu-insts-name=insts.bin"):
        assert flag in cc
    assert cc[-1] == "design.mlir" and KERNEL_OBJECT not in cc


def test_design_script_prints_the_calls_without_mlir_aie():
    proc = subprocess.run([sys.executable, "-m", "xengine_block.npu.design.show_design",
                           "--geometry", "small", "--calls"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("device('npu2'):")
    assert "dma_await_task(out_c0, out_c1, out_c2, out_c3)" in proc.stdout
    assert "ci4" not in proc.stdout


def test_design_and_build_scripts_emit_the_ci4_variant(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "xengine_block.npu.design.show_design",
                           "--geometry", "small", "--bits", "4", "--nibble-order", "re_low",
                           "--calls"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert ("call(xcorr_kernel_ci4_re_low, a_buf0_c0_r0, b_buf0_c0_r0, acc_c0_r0, "
            "a_unpacked_c0_r0, b_unpacked_c0_r0)") in proc.stdout
    proc = subprocess.run([*BUILD_MODULE, "--geometry", "published", "--bits", "4", "--dry-run",
                           "--build-root", str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "b256_c9_k60_p136_n8m4t15_4x8_ci4_re_high" in proc.stdout
    assert not any(tmp_path.iterdir())  # a dry run writes nothing


# ---------------------------------------------------------------------- strict stand-in replay
def _standin(monkeypatch):
    from tests.helpers import mlir_aie_standin

    for name, module in mlir_aie_standin.modules().items():
        monkeypatch.setitem(sys.modules, name, module)
    return mlir_aie_standin


@pytest.mark.parametrize("name", PLANS)
def test_design_replays_against_the_strict_standin(name, monkeypatch):
    _standin(monkeypatch)
    from xengine_block.npu.design.mlir import to_mlir

    plan = PLANS[name]
    text = to_mlir(plan)
    assert text.count("aie.dma_bd(") == len(plan.bds()) + len(plan.tasks)
    assert text.count("aie.flow(") == sum(len(f.dests) for f in plan.flows)
    assert text.count("aie.core(") == len(plan.cores)
    assert text.count("aiex.dma_configure_task(") == len(plan.tasks)
    assert f'link_with = "{KERNEL_OBJECT}"' in text
    assert text.count("aie.lock(") == len(plan.locks)


def _buggy_dma_bd(self, c, buffer, **kw):
    self.api.aie.dma_bd(buffer, offset=kw["offset"], lenght=kw["len"])


def _buggy_lock(self, c, tile, *, lock_id, init, sym_name):
    self.api.aie.lock(tile, lock_id, init=init, sym_name=sym_name)


def _buggy_flow(self, c, src, sb, sc, dst, db, dc):
    wb = self.api.aie.WireBundle
    self.api.aie.flow(src, sc, getattr(wb, sb), dst, getattr(wb, db), dc)


def _buggy_dma_start(self, c, direction, channel, *, dest, chain):
    self.api.aie.dma_start(getattr(self.api.aie.DMAChannelDir, direction), channel, dest=dest)


def _buggy_use_lock(self, c, lock, action, *, value):
    self.api.aie.use_lock(lock, getattr(self.api.aie.LockAction, action), value, None)


def _buggy_task(self, c, tile, direction, channel, **opts):
    task = self.api.aiex.dma_configure_task(
        tile, getattr(self.api.aie.DMAChannelDir, direction), channel_index=channel, **opts)
    self.store(c, "task", task)


@pytest.mark.parametrize("method, buggy, match", [
    ("op_dma_bd", _buggy_dma_bd, "unexpected keyword argument 'lenght'"),
    ("op_lock", _buggy_lock, "positional argument"),
    ("op_flow", _buggy_flow, "source_bundle must be a WireBundle"),
    ("op_dma_start", _buggy_dma_start, "chain must be a block"),
    ("op_use_lock", _buggy_use_lock, "positional argument"),
    ("op_dma_configure_task", _buggy_task, "channel_index"),
])
def test_the_standin_rejects_what_mlir_aie_rejects(method, buggy, match, monkeypatch):
    """A replay with a misspelt keyword, a keyword passed by position, swapped or missing
    arguments fails here, as it would against mlir-aie."""
    _standin(monkeypatch)
    from xengine_block.npu.design import mlir as design

    monkeypatch.setattr(design._Replayer, method, buggy)
    with pytest.raises(TypeError, match=match):
        design.to_mlir(PLANS["small"])


def test_the_standin_refuses_link_with_on_core(monkeypatch):
    standin = _standin(monkeypatch)
    with standin.mlir_mod_ctx(), pytest.raises(TypeError, match="external_func"):
        standin.core(None, link_with="xcorr.o")


def test_compute_buffers_are_pinned_in_the_design(monkeypatch):
    _standin(monkeypatch)
    from xengine_block.npu.design.mlir import to_mlir

    plan = PLANS["published"]
    text = to_mlir(plan)
    for b in plan.buffers:
        line = next(x for x in text.splitlines() if f'sym_name = "{b.name}"' in x)
        assert (f"address = {b.address}" in line) == (b.address is not None), line
    assert text.count("address = 16384") == len(plan.cores)  # every accumulator in bank 1


def test_the_old_geometry_name_seed_still_builds_the_published_design(tmp_path):
    """``--geometry seed`` (the published design's old name) is accepted for a release with a
    warning the user sees, and names the same build."""
    from xengine_block.npu.design.artifacts import named_geometry

    with pytest.warns(FutureWarning, match="'seed' is now 'published'"):
        assert named_geometry("seed") == named_geometry("published") == PUBLISHED
    proc = subprocess.run([*BUILD_MODULE, "--geometry", "seed", "--dry-run", "--build-root",
                           str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "geometry 'seed' is now 'published'" in proc.stderr
    assert "b256_c9_k60_p136_n8m4t15_4x8" in proc.stdout



def _make_aie(tmp_path: Path, *args: str, python: str = sys.executable
              ) -> subprocess.CompletedProcess:
    require("make", None if shutil.which("make") else "make is not on PATH")
    return subprocess.run(["make", "-C", str(source_dir("aie")), f"PYTHON={python}",
                           f"BUILD_ROOT={tmp_path}", *args], capture_output=True, text=True,
                          timeout=120)


def test_make_aie_says_what_is_missing_without_the_toolchain(tmp_path):
    """``make -C aie`` builds through the package's build module, which stops before any step
    and says what to install when mlir-aie, Peano or XRT is absent; without the package the
    Makefile says so."""
    if not build.probe_toolchain().problems:
        pytest.skip("the AIE toolchain is complete here: make -C aie would build")
    proc = _make_aie(tmp_path)
    assert proc.returncode != 0
    assert "cannot build the NPU design, the AIE toolchain is incomplete" in proc.stderr
    assert "How to get the toolchain" in proc.stderr and "mlir-aie" in proc.stderr
    assert not any(tmp_path.iterdir())
    proc = _make_aie(tmp_path, python="false")
    assert proc.returncode != 0 and "cannot import xengine_block; install it" in proc.stderr


def test_make_aie_builds_the_default_geometry(tmp_path):
    proc = _make_aie(tmp_path, "dry-run")
    assert proc.returncode == 0, proc.stderr
    assert f"-> {tmp_path / geometry_tag(PUBLISHED)}" in proc.stdout
    assert f"-DN=8 -DM=4 -DT=15 -c {KERNEL_SOURCE}" in proc.stdout


def test_the_design_entry_point_prints_the_plan_s_design():
    proc = subprocess.run([sys.executable, str(source_dir("aie") / "design.py"), "--geometry",
                           "small", "--calls"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == format_calls(design_calls(PLANS["small"])).strip()


def test_the_build_writes_and_validates_the_diagonal_design(tmp_path, monkeypatch):
    """The build writes two designs: the plan and its diagonal variant reading the input once
    (checked by the validator first), each compiled by its own aiecc run into its own xclbin;
    the diagonal MLIR has no B shim task and each A shim flow fans out to a B memory tile."""
    _standin(monkeypatch)
    ran = []

    def fake_run(cmd: list[str], cwd: Path) -> None:  # what aiecc and Peano would leave
        ran.append(cmd)
        for arg in cmd:
            for key in ("--xclbin-name=", "--npu-insts-name="):
                if arg.startswith(key):
                    (cwd / arg[len(key):]).write_bytes(b"built")

    checked = []
    monkeypatch.setattr(build, "_run", fake_run)
    monkeypatch.setattr(build, "validate_plan", lambda plan: checked.append(plan))
    tc = build.Toolchain(Path("/peano/bin/clang++"), Path("/aie/include"), Path("/bin/aiecc"),
                         Path("/bin/xclbinutil"), True, ())
    g = small_test_geometry()
    art = build.build(g, tmp_path, tc)
    assert art.has_diagonal and art.xclbin.is_file()
    plan = PLANS["small"]
    diagonal = single_read_diagonal(plan)
    assert checked == [diagonal]
    main = (art.directory / "design.mlir").read_text()
    text = (art.directory / "design_diagonal.mlir").read_text()
    assert text.count("aiex.dma_configure_task(") == len(diagonal.tasks) == \
        len(plan.tasks) - g.cols  # the B shim tasks are gone
    assert text.count("aie.flow(") == main.count("aie.flow(") == \
        sum(len(f.dests) for f in diagonal.flows)  # B shim flows replaced by A fan-outs
    aiecc = [c for c in ran if c[0] == "/bin/aiecc"]
    assert [c[-1] for c in aiecc] == ["design.mlir", "design_diagonal.mlir"]
    assert "--xclbin-name=xcorr_diagonal.xclbin" in aiecc[1]


def test_a_geometry_without_the_diagonal_variant_builds_one_design():
    g = small_test_geometry(rows=2, cols=2, tile_n=2, tile_m=2)
    assert not reads_diagonal_once(g)
    assert [d[1] for d in build.designs(build_plan(g))] == ["design.mlir"]
    assert [d[1] for d in build.designs(PLANS["published"])] == ["design.mlir",
                                                                 "design_diagonal.mlir"]
