"""``python -m l2sched``: the ``l2sched`` command line."""

import sys

from l2sched.cli import main

sys.exit(main())
