"""The ``l2sched`` command line (``cli.main``): a thin layer over the
pipeline stages, which never import it."""

from l2sched.cli.main import main

__all__ = ["main"]
