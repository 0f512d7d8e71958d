"""No file of the library is over 600 lines: a longer one is split along a seam before it lands.

A file that long holds more than one thing a reader has to keep in mind at once (issue 49, item 6); the core's
penalty (detector, knobs and decisions) and the reader's rules (one module per rule) were split for it.
"""

from __future__ import annotations

from pathlib import Path

import edit_lab

LIBRARY = Path(edit_lab.__file__).parent
MOST = 600

#: Files still over the limit. Empty since issue 49 split the last three (config.py: its knobs (knob.py) and cross-field
#: checks (config/checks.py); clock/virtual.py: the fabric (clock/fabric.py); clock/sim/programs.py: the synchronous
#: programs (clock/sim/replica.py)). A file may only come back here with its reason, and leave once it fits.
TOO_LONG_FOR_NOW: set[str] = set()


def lengths() -> dict[str, int]:
    return {path.relative_to(LIBRARY).as_posix(): len(path.read_text().splitlines())
            for path in sorted(LIBRARY.rglob("*.py"))}


def test_no_library_file_is_over_600_lines():
    long = {name: n for name, n in lengths().items() if n > MOST and name not in TOO_LONG_FOR_NOW}
    assert not long, f"files of edit_lab/ over {MOST} lines (split them along a seam): {long}"


def test_the_allowed_files_are_still_long():
    fits = sorted(name for name, n in lengths().items() if name in TOO_LONG_FOR_NOW and n <= MOST)
    missing = sorted(TOO_LONG_FOR_NOW - set(lengths()))
    assert not fits and not missing, f"take these off TOO_LONG_FOR_NOW: {fits + missing}"
