"""xengine_block: an exact complex-int8 X-engine correlator as Bifrost-style pipeline blocks.

Start with ``pipelines/fx.py`` (end to end) and the README. The tree follows the data, each
layer importing only those below it:

- the model every part derives from: ``geometry``, ``frames`` (our packet/frame format),
  ``sample_layout`` (where the samples of any input lie), ``triangle``, ``array``,
  ``integration``, ``reference`` (the test oracle);
- ``runtime/``: rings and pipeline with Bifrost's semantics;
- ``backends/``: cpu, native (C extension in ``src/native``), NPU emulator, NPU; ``npu/``: the
  NPU dataflow plan, validator and host code;
- ``capture/``: SPEAD packets in, the capture/reorder block, pcap recordings; ``readers/``:
  recorded voltages read in place; ``outputs/``: UVH5 files, SPEAD visibilities, the quick-look
  PNG; ``sim/``: simulated F-engines;
- ``blocks/``: X-engine, integrate, UVH5 writer, quick-look, and ``blocks.chain`` assembling
  them; ``bifrost/``: the same blocks on real Bifrost;
- ``reprocess/``: recordings to UVH5 again, locally or on Dask; ``service/``: the live
  ``xengine correlate`` and scale-out;
- ``console/``: option checks and progress display shared by every command; ``bench/``: the
  benchmarks' measurements of the machine and the peers (nothing in the library imports it);
- ``cli/``: the ``xengine`` command, one module per subcommand, on top of everything.
"""

from . import _moved

_moved.install()

__version__ = "0.1.0"
