"""``python -m conformance --impl COMMAND``: run the conformance suite."""

import sys

from conformance.runner import main

sys.exit(main())
