"""Shared pytest setup: make the repository root importable so the tests run
from a plain checkout (``pytest`` or ``python -m pytest``), without installing
the package. Keep this file minimal; fixtures go next to their tests."""

import os
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)
