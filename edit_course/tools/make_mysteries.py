"""Record the capstone's three mystery runs (notebook 08) with a hidden seed.

    python -m edit_course.tools.make_mysteries [--out DIR]

Without --out it replaces the ones shipped in edit_lab/records/examples. The seed is drawn from the
operating system and never printed: nobody, the author included, knows the answers without
diagnosing the runs (edit_course/lessons/capstone.py).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from edit_course.lessons.capstone import HERE, make_mysteries


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m edit_course.tools.make_mysteries", description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=HERE, help="where the mystery-a, -b, -c directories go")
    args = ap.parse_args(argv)
    for path in make_mysteries(args.out):
        print(path)


if __name__ == "__main__":
    main()
