"""``python -m l2sched.bench``."""
import sys

from . import main

sys.exit(main())
