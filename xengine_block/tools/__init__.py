"""Command-line support and offline tools: option checks (``argtypes``), progress display,
reprocessing of recordings (``reprocess``), local or Dask task running (``tasks``) and the
backend benchmark (``benchmarking``)."""
