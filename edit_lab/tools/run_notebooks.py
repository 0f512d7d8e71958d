"""`make notebooks`: run every notebook with its own defaults, timed, as a reader would.

Prints a markdown table (notebook, seconds, ok) for the README; outputs go to runs/notebooks/.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from pathlib import Path

from .notebooks import ROOT, execute, notebooks


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("names", nargs="*", help="only notebooks whose file name contains one of these")
    ap.add_argument("--out", default=str(ROOT / "runs" / "notebooks"))
    args = ap.parse_args(argv)
    rows, failed = [], 0
    for nb in notebooks():
        if args.names and not any(n in nb.name for n in args.names):
            continue
        print(f"running {nb.name} ...", flush=True)
        try:
            _, seconds = execute(nb, Path(args.out))
            rows.append((nb.name, seconds, "ok"))
        except Exception:
            traceback.print_exc()
            rows.append((nb.name, float("nan"), "FAILED"))
            failed += 1
    print("\n| notebook | seconds (defaults, 2 CPU cores) | result |\n|---|---:|---|")
    for name, s, ok in rows:
        print(f"| {name} | {s:.0f} | {ok} |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
