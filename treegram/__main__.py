"""``python -m treegram``: same as the ``treegram`` command."""

import sys

from treegram.cli import main

sys.exit(main())
