import sys

from ckptfs.cli import main

sys.exit(main())
