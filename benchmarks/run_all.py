"""`make bench`: every CPU benchmark of docs/benchmarks.md, one after the other (about 75 minutes on 2 cores).

Each script writes its result file under benchmarks/results/; `python benchmarks/render.py` prints the
README's tables from them. The GPU benchmark (`benchmarks/gpu.py`) is separate: it needs a machine with
NVIDIA GPUs.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPTS = (["engine_vs_fsdp2.py", "--steps", "40", "--repeats", "2"], ["edit_overlap.py"], ["penalty.py"],
           ["penalty_defaults.py"],
           ["stragglers.py", "--repeats", "2"], ["binder_memory.py"], ["preview_vs_real.py"],
           ["virtual_race.py", "--replicas", "8", "--budget", "6", "--json", "virtual_race.json"],
           ["virtual_race.py", "--replicas", "64", "--budget", "3", "--aedit-periods", "4", "8", "--json", "virtual_race_64.json"],
           ["mkl_pin.py", "--json", "mkl_pin.json"], ["virtual_vs_real.py", "--json", "virtual_vs_real.json"],
           ["survive_costs.py", "--methods", "sync,diloco,edit", "--json", "survive_costs.json"],
           ["survive_race.py", "--json", "survive_race.json"])


def main() -> int:
    failed = 0
    for script, *args in SCRIPTS:
        print(f"\n$ python benchmarks/{script} {' '.join(args)}", flush=True)
        failed += subprocess.run([sys.executable, str(HERE / script), *args]).returncode != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
