"""``python -m ckptfs``: the same command line as the ``ckptfs`` script."""

import sys

from ckptfs.cli import main

sys.exit(main())
