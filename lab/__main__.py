"""``python -m lab``: the lab's command line (run from the repository root)."""

import sys

from lab import main

sys.exit(main())
