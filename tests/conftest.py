"""Top-level pytest setup.

Put the repository root on sys.path only when ``edit_lab`` is not importable, so the
suite also runs from a plain checkout; an installed (editable) package always wins.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

if importlib.util.find_spec("edit_lab") is None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
