"""``python -m ckptfs_conformance --impl COMMAND``: run the conformance suite."""

import sys

from ckptfs_conformance.runner import main

sys.exit(main())
