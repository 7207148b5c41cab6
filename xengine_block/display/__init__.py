"""The signal display: a page in the browser over a running service's dumps or UVH5 files
(docs/display.md).

- :mod:`.model`: dumps as a UVH5 file holds them and the questions the page asks of them;
- :mod:`.files`: the dumps of UVH5 files, through pyuvdata (``xengine view``);
- :mod:`.live`: the block that feeds a running chain's dumps into a bounded history
  (``xengine correlate --display``);
- :mod:`.api`: the JSON API ``/api/v1/...``, the page's only source;
- :mod:`.server`: the read-only HTTP server (standard library) of the page and the API.
"""
