"""A tap on a real run's ranks: every local-SGD rank writes its θ and anchors after each sync and each discard.

The lab's checkpoints are refused with `survive=True` (a checkpoint's barrier spans every replica), and its
`checksums` are CRCs: bit-for-bit only. A comparison with torchft to float tolerance needs the values, on the
real processes of a surviving run. Python imports `sitecustomize` at the start of every interpreter that finds it
on its path, so a test puts this folder on `PYTHONPATH`, names a folder in `EDIT_LAB_ANCHOR_TAP`, and starts fresh
rank processes (`EDIT_LAB_WARM_WORKERS=0`: a warm fork server started earlier would not have imported it). Each
rank then wraps, in its own process, two methods of `LocalSGDMethod` (the lab's code runs unchanged inside them):

- `sync_finished` (the end of a completed sync): writes {"kind": "sync", "step", "replica", "shard", "members",
  "n_syncs", "theta": [unit shards], "anchors": [unit shards], "momentum": [the outer SGD's momentum buffer of
  each unit's anchor shard, None before its first step]};
- `discard_round` (`survive_on_failure="discard"`: θ ← a): the same with "kind": "discard".

One file per record, `{folder}/r{replica}s{shard}-{n:03d}.pt`, n counting that rank's records. Without the
variable (every other interpreter that happens to find this folder) it does nothing.
"""

import os

if os.environ.get("EDIT_LAB_ANCHOR_TAP"):
    import functools
    from pathlib import Path

    import torch

    from edit_lab.core.methods.local_sgd import LocalSGDMethod

    _count = [0]

    def _write(method, kind: str, step: int) -> None:
        mesh = method.mesh
        rec = {"kind": kind, "step": step, "replica": mesh.replica, "shard": mesh.shard,
               "members": list(mesh.sync_replicas),
               "theta": [t.detach().clone() for t in method.engine.shards],
               "anchors": [a.detach().clone() for a in method.outer.anchors], "n_syncs": method.n_syncs,
               "momentum": [method.outer.optimizer.state[a]["momentum_buffer"].clone()
                            if "momentum_buffer" in method.outer.optimizer.state[a] else None
                            for a in method.outer.anchors]}
        folder = Path(os.environ["EDIT_LAB_ANCHOR_TAP"])
        folder.mkdir(parents=True, exist_ok=True)
        torch.save(rec, folder / f"r{mesh.replica}s{mesh.shard}-{_count[0]:03d}.pt")
        _count[0] += 1

    def _tapped(original, kind: str):
        @functools.wraps(original)
        def wrapper(self, step, *args, **kwargs):
            out = original(self, step, *args, **kwargs)
            _write(self, kind, step)
            return out

        return wrapper

    LocalSGDMethod.sync_finished = _tapped(LocalSGDMethod.sync_finished, "sync")
    LocalSGDMethod.discard_round = _tapped(LocalSGDMethod.discard_round, "discard")
