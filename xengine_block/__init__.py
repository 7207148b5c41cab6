"""xengine_block: an exact complex-int8 X-engine correlator as Bifrost-style pipeline blocks.

Start with ``pipelines/fx.py`` (end to end) and the README. The tree follows the data:

- the model every part derives from: ``geometry``, ``layout``, ``triangle``, ``array``,
  ``integration``, ``reference`` (the test oracle);
- ``runtime/``: rings and pipeline with Bifrost's semantics; ``bifrost/``: the same blocks on
  real Bifrost;
- ``capture/``: SPEAD packets in, the capture/reorder block, pcap recordings;
- ``blocks/``: X-engine, integrate, UVH5 writer, quick-look; ``chain`` assembles them;
- ``backends/``: cpu, native (C extension in ``src/native``), NPU emulator, NPU; ``npu/``: the
  NPU dataflow plan, validator and host code;
- ``outputs/``: UVH5 files and the quick-look PNG;
- ``service/``: ``xengine correlate`` and scale-out; ``tools/``: command-line support,
  reprocessing, benchmarking; ``sim/``: the F-engine simulator; ``cli/``: the ``xengine`` command
  (one module per subcommand, on top of everything else: no library module imports it).
"""

__version__ = "0.1.0"
