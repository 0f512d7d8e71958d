"""What a replica's death costs a run that survives it (issue 50, edit-method.md §16), measured on real processes.

One episode per row: nano, 60 steps, W 10, τ 5; replica 1 dies at the start of step 20 (SIGKILL, or a hang that
its peers see after `timeout_s`) and a replacement joins at the first sync at or after step 40. Each phase's cost
comes from the run's own records (`summary.json`'s `survival.costs_ms`, means over the ranks that paid it):

- *launcher confirms* (kill): from the dead replica's last step start to the launcher seeing its exit (waitpid);
- *blocked in the failed sync*: how long a survivor waited in the collective that failed (ms for a kill, timeout_s
  for a hang; none where the survivors saw the new view at the start of their next sync and never failed);
- *rollback*: draining the prefetched transfers and restoring the snapshot;
- *view change*: to the new view's gloo group built: after a failed sync (from the failure: the launcher's
  confirmation and, for a hang, its settle included), at a sync's start (a death's view seen before any failure),
  and the one that admits the replacement (from the members' request: the donor's hand-over included);
- *transfer*: the donor's serialisation onto the store, the replacement's read and load;
- *retried sync*: the survivors' sync again, in the new view.

    python benchmarks/survive_costs.py [--meshes 1x3,2x3] [--methods diloco,edit] [--kinds kill,hang]
        [--timeout-s 3] [--json survive_costs.json]   (written to benchmarks/results/)
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from edit_lab import RunConfig, launch

PHASES = ("launcher_detect_kill_ms", "survivor_blocked_in_failed_sync_ms", "rollback_ms",
          "view_change_after_failure_ms", "view_change_at_sync_start_ms", "view_change_join_ms", "transfer_donor_ms",
          "transfer_joiner_ms", "retried_sync_ms")


def episode(method: str, shards: int, kind: str, timeout_s: float, out: Path) -> dict:
    cfg = RunConfig(method=method, shards=shards, replicas=3, steps=60, warmup_steps=10, sync_interval=5,
                    model="nano", seq_len=32, batch_size=4, eval_every=0, eval_batches=2, progress=False,
                    survive=True, fault_replica=1, fault_replica_step=20, fault_replica_kind=kind, rejoin_step=40,
                    timeout_s=timeout_s, out=str(out))
    t0 = time.monotonic()
    run = launch(cfg)
    s = run.summary["survival"]
    row = {"method": method, "mesh": f"{shards}x3", "kind": kind, "wall_s": time.monotonic() - t0,
           "views": [v["members"] for v in s["views"]], "lost_replica_steps": s["lost_replica_steps"]}
    for phase in PHASES:
        st = s["costs_ms"].get(phase)
        row[phase] = None if st is None else round(st["mean"], 1)
    row["transfer_bytes"] = next((r["bytes"] for r in run.syncs if r.get("kind") == "transfer"), None)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--meshes", default="1x3,2x3")
    ap.add_argument("--methods", default="diloco,edit")
    ap.add_argument("--kinds", default="kill,hang")
    ap.add_argument("--timeout-s", type=float, default=3.0)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for mesh in a.meshes.split(","):
            for method in a.methods.split(","):
                for kind in a.kinds.split(","):
                    out = Path(tmp) / f"{method}-{mesh}-{kind}"
                    rows.append(episode(method, int(mesh.split("x")[0]), kind, a.timeout_s, out))
                    print(json.dumps(rows[-1]), flush=True)
    head = ("method", "mesh", "kind") + PHASES
    print("\n| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for r in rows:
        print("| " + " | ".join("–" if r[k] is None else str(r[k]) for k in head) + " |")
    if a.json:  # with its provenance (results_io: the command, the commit, the versions, the date)
        from results_io import write_result

        write_result(a.json, {"runs": rows}, "benchmarks/survive_costs.py")


if __name__ == "__main__":
    main()
