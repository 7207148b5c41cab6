"""F-engine packets in: SPEAD heap items and senders (``spead``), the capture/reorder block
(``receive``), pcap recordings with their sidecars (``recording``) and ``xengine record``
(``record``). DESIGN.md sections 5 and 6."""
