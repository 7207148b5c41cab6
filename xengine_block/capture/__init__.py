"""F-engine packets in: SPEAD heap items and senders (``spead``), the capture/reorder block
(``receive``), pcap recordings with their sidecars (``recording``) and ``xengine record``
(``record``). docs/design.md, "Ring headers" and "SPEAD items"."""
