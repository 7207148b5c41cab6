"""xengine_block: an exact complex-int8 X-engine correlator as Bifrost-style pipeline blocks.

Start with ``pipelines/fx.py`` (end to end) and the README; the parts are one module each:
geometry, layout, triangle, backends, ring, pipeline, capture, blocks, uvh5, reprocess.
"""

__version__ = "0.1.0"
