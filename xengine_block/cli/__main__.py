"""``python -m xengine_block.cli``: the ``xengine`` command."""

import sys

from xengine_block.cli import main

sys.exit(main())
