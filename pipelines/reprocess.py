#!/usr/bin/env python3
"""Reprocess recordings (same as ``xengine reprocess``):

    python pipelines/reprocess.py rec/*.pcap -o out/ --ninteg 4 --workers 2
"""

import sys

from xengine_block.cli import main

if __name__ == "__main__":
    sys.exit(main(["reprocess", *sys.argv[1:]]))
