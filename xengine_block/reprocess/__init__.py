"""Reprocessing: recordings (our pcap files, GUPPI RAW, PSRDADA, VDIF, MWAX) to UVH5 files
again, locally or across a dask.distributed cluster (docs/reprocess.md).

- ``jobs``: what to write from which recording, and the run of it;
- ``recording_correlator``: a recording's integrations correlated in place, straight from the
  file's memory map through a backend's ``correlate_layout``;
- ``tasks``: independent file tasks in this process or on Dask, resumable.
"""
