"""xengine_block: an exact complex-int8 X-engine correlator as Bifrost-style pipeline blocks.

Start with ``pipelines/fx.py`` (end to end) and the README. The tree follows the data, each
layer importing only its own and those below it (``tests/test_layers.py`` checks the table and
says why each layer sits where it does):

- the model every part derives from: ``geometry``, ``frames`` (our packet/frame format),
  ``sample_layout`` (where the samples of any input lie), ``triangle``, ``array``,
  ``integration``, ``reference`` (the test oracle), ``user_cache`` (where build outputs go);
- ``runtime/``: rings and pipeline with Bifrost's semantics;
- ``backends/``: cpu, native (C extension in ``kernels/cpu``), NPU emulator, NPU; ``npu/``: the
  NPU dataflow plan, validator, host code, the AIE kernel source (package data) and its build;
- ``capture/``: SPEAD packets in, the capture/reorder block, pcap recordings; ``readers/``:
  recorded voltages read in place; ``outputs/``: UVH5 files, SPEAD visibilities, the quick-look
  PNG; ``sim/``: simulated F-engines; beside them ``console/`` (option checks and progress
  display shared by every command) and ``bench/`` (the benchmarks' measurements of the machine
  and the peers; nothing in the library imports it);
- ``blocks/``: X-engine, integrate, UVH5 writer, quick-look, SPEAD output, and ``blocks.chain``
  assembling them on either runtime; ``bifrost/``: the same blocks on real Bifrost;
- ``reprocess/``: recordings to UVH5 again, locally or on Dask; ``service/``: the live
  ``xengine correlate`` and scale-out;
- ``cli/``: the ``xengine`` command, one module per subcommand, on top of everything.

Process-wide settings stay the application's: the library never freezes the garbage collector
(``runtime.pipeline.frozen_heap`` is there for programs that own their process), and build
outputs (numba's cache of the capture loops included) go to the user's cache directory
(``user_cache``), never into the installation.
"""

from . import _moved

_moved.install()

__version__ = "0.1.0"
