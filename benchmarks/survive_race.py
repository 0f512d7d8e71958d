"""Survival against a restart from a checkpoint, on the virtual clock (issue 50 item 9; notebook 10 runs a smaller
one live): per seed 2 to 4 random deaths in a DiLoCo run of 16 replicas × 1 shard of nano, the tokens each way throws
away, the time each takes to the end and the validation loss at the time survival finishes. The definitions and
the restart's constant cost are in edit_course/lessons/survive_race.py.

    python benchmarks/survive_race.py [--replicas 16] [--steps 120] [--seeds 0 1 2] [--restart-s 2]
        [--checkpoint-every 2] [--json survive_race.json]   (written to benchmarks/results/)
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from edit_course.lessons import survive_race as sr


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replicas", type=int, default=16)
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--restart-s", type=float, default=2.0, help="virtual seconds from the death to the restart")
    ap.add_argument("--checkpoint-every", type=int, default=2, help="syncs between checkpoints")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        rows = sr.race(a.seeds, Path(tmp), replicas=a.replicas, steps=a.steps, restart_s=a.restart_s,
                       checkpoint_every=a.checkpoint_every)
    head = ("seed", "deaths: replica at step", "restart's checkpoints", "lost tokens: survive", "restart",
            "end s: survive", "restart", "val at survival's end: survive", "restart")
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for r in rows:
        s, x = r["survive"], r["restart"]
        val = "none yet" if x["val_at_equal_time"] is None else f"{x['val_at_equal_time']:.3f}"
        deaths = ", ".join(f"{d[0]} at {d[1]}" for d in r["deaths"])
        print(f"| {r['seed']} | {deaths} | {', '.join(map(str, r['checkpoint_steps']))} | "
              f"{s['lost_tokens']:,} | {x['lost_tokens']:,} | {s['end_s']:.2f} | {x['end_s']:.2f} | "
              f"{s['val_at_equal_time']:.3f} | {val} |")
    sr.survival_loses_less(rows)
    sr.survival_ahead_at_equal_time(rows)
    if a.json:  # with its provenance (results_io: the command, the commit, the versions, the date)
        from results_io import write_result

        write_result(a.json, {"rows": rows}, "benchmarks/survive_race.py")


if __name__ == "__main__":
    main()
