"""Build of the C extension ``xengine_block._native`` (metadata lives in setup.cfg).

The extension is required: it holds the native correlator and the package's one
implementation of each host-side hot loop (xengine_block/native_extension.py). Where it does
not build (no C compiler, no Python headers) the install stops with a message saying what
to install. It compiles on any C11 compiler; each SIMD kernel (AMX-INT8, AVX-512 VNNI, AVX2) is
compiled only where the compiler accepts its target attribute, which is probed here, and the
choice among the compiled kernels is made at run time from CPUID and the kernel's permission
(see ``kernels/cpu/dispatch.c``). A failed probe drops that kernel, never the build. The AMX
kernel's source is also compiled over a software emulation of its tiles (``kern_amx_emu.c``,
the ``amx_emulated`` path) wherever the AVX-512 layout code is built, so that it is tested on
CPUs without AMX. ``xengine_block._readbw`` (``kernels/cpu/readbw/``, a probe beside the
kernels rather than one) measures the machine's streaming read bandwidth for the benchmarks'
roofline, with the widest loads the same probes allow; it stays optional (the benchmarks fall
back to numpy and say so).
"""

from __future__ import annotations

import os
import platform
import tempfile

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import CCompilerError, ExecError, PlatformError

NATIVE = "kernels/cpu"

#: The checkout's top-level source trees, shipped inside the package (their files are
#: setup.cfg's package_data): the AIE and CPU kernels, and the mlir-aie design's entry point
#: and Makefile. The installed package finds them there (xengine_block/kernel_sources.py).
SOURCE_TREES = {"xengine_block._kernels": "kernels", "xengine_block._aie": "aie"}

#: Why the install stopped, where the required extension did not build.
NO_COMPILER = (
    "xengine_block needs its C extension xengine_block._native, which did not build: {error}. "
    "Install a C compiler and the Python headers (Debian/Ubuntu: `apt install gcc "
    "python3-dev`; Fedora: `dnf install gcc python3-devel`; conda: `conda install "
    "c-compiler`) and run the install again. The compiler is found as the CC environment "
    "variable or Python's configured one.")

#: macro -> a function the compiler must accept for that kernel to be built.
PROBES = {
    "XE_HAVE_AVX2": (
        "avx2",
        "__m256i f(__m256i a, __m256i b) { return _mm256_madd_epi16(a, b); }"),
    "XE_HAVE_AVX512VNNI": (
        "avx512f,avx512bw,avx512vl,avx512vnni",
        "__m512i f(__m512i c, __m512i a, __m512i b) { return _mm512_dpbusd_epi32(c, a, b); }"),
    "XE_HAVE_AMX": (
        "amx-tile,amx-int8,avx512f,avx512bw",
        "void f(const void *c) { _tile_loadconfig(c); _tile_dpbssd(0, 1, 2); _tile_release(); }"),
}


def _is_x86_64() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64")


class ProbingBuildExt(build_ext):
    """build_ext that defines XE_HAVE_<ISA> for each kernel the compiler can build."""

    def build_extensions(self) -> None:
        macros = []
        if _is_x86_64() and self.compiler.compiler_type == "unix":
            for macro, (target, body) in PROBES.items():
                if self._compiles(target, body):
                    macros.append((macro, "1"))
                else:
                    self.announce(f"xengine_block._native: compiler lacks {target}; "
                                  f"{macro} kernel skipped", level=3)
        for ext in self.extensions:
            ext.define_macros = list(ext.define_macros or []) + macros
        super().build_extensions()

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except (CCompilerError, ExecError, PlatformError) as exc:
            if ext.optional:
                raise
            raise SystemExit(NO_COMPILER.format(error=exc)) from exc

    def _compiles(self, target: str, body: str) -> bool:
        src = (f"#include <immintrin.h>\n__attribute__((target(\"{target}\")))\n{body}\n")
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "probe.c")
            with open(path, "w") as fh:
                fh.write(src)
            try:
                self.compiler.compile([path], output_dir=tmp, extra_postargs=["-O2"])
            except Exception:  # any compiler failure means "not supported"
                return False
        return True


native = Extension(
    "xengine_block._native",
    sources=[f"{NATIVE}/{name}.c"
             for name in ("module", "dispatch", "engine", "layout", "kern_scalar", "kern_avx2",
                          "kern_avx512", "kern_amx", "kern_amx_emu", "peak", "peak_amx",
                          "host_passes", "uvh5_rows")],
    # kern_amx_emu.c #includes kern_amx.c and peak_amx.c over amx_emu.h: software tiles
    depends=[f"{NATIVE}/{name}" for name in ("xcorr.h", "native.h", "amx_target.h",
                                               "amx_emu.h", "kern_amx.c", "peak_amx.c")],
    include_dirs=[NATIVE],
    extra_compile_args=["-O3", "-std=gnu11", "-pthread", "-fno-strict-aliasing"],
    extra_link_args=["-pthread"],
)

readbw = Extension(
    "xengine_block._readbw",
    sources=["kernels/cpu/readbw/readbw.c"],
    extra_compile_args=["-O2", "-std=gnu11", "-pthread"],
    extra_link_args=["-pthread"],
    optional=True,  # without it bench.correlator measures with numpy and says so
)

setup(packages=find_packages(include=["xengine_block", "xengine_block.*"]) + list(SOURCE_TREES),
      package_dir=SOURCE_TREES,
      ext_modules=[native, readbw], cmdclass={"build_ext": ProbingBuildExt})
