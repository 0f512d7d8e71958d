"""The lab's `diloco` and `streaming_diloco` against torchft's `DiLoCo` (issue 38, item 3).

On 1 shard × 2 replicas, nano model, the same data, seed, AdamW, clipping and outer Nesterov (lr 0.7, momentum
0.8), W = 0 (torchft has no warm-up): after every outer step, every replica's parameters θ and every anchor
must be the same in both, to float rounding. The lab runs on the virtual clock (its methods' own code, every
rank a thread, real numerics) and saves a checkpoint at each outer step (`checkpoint_every=1`: θ as it is, the
anchors, the momenta); torchft runs in `tests/oracles/torchft_diloco.py`, two threads with a `Manager` each.

- DiLoCo: H = 3, one fragment, 12 steps: outer steps after steps 3, 6, 9, 12.
- Streaming DiLoCo: H = 6, P = 3 fragments (root unit, block 0, block 1), τ = 1 step of overlap, α = 0.5:
  a fragment lands every 2 steps (after steps 2, 4, …, 12), its pseudo-gradient measured one step before.

Measured (torch 2.13 CPU, torchft 0.2.0): max |Δθ| over every outer step and every value, printed by the test.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from edit_lab import launch
from edit_lab.core.sharding import UnitLayout
from edit_lab.model import build_model
from tests.helpers import small

torchft = pytest.importorskip("torchft", reason="torchft is the oracle (the test extra)")

TOL = 2e-6  # float32 rounding of a few dozen AdamW steps and outer steps, taken in another order


def lab_states(run_dir: Path, n_syncs: int, replicas: int) -> list[list[dict[str, Any]]]:
    """[sync][replica] -> {"theta": {name: tensor}, "anchors": {name: tensor}} from the lab's checkpoints."""
    units = build_model("nano", 0).units()
    prefixes = ["root."] + [f"blocks.{i}." for i in range(len(units) - 1)]
    layouts = [UnitLayout.of(u, 1) for u in units]
    out = []
    for k in range(1, n_syncs + 1):
        per = []
        for r in range(replicas):
            st = torch.load(run_dir / "checkpoints" / f"sync-{k:06d}" / f"rank{r}.pt", weights_only=False)
            theta, anchors = {}, {}
            for lay, pre, shard, anchor in zip(layouts, prefixes, st["shards"], st["method"]["outer"]["anchors"]):
                theta.update({pre + n: v for n, v in lay.views(shard).items()})
                anchors.update({pre + n: v for n, v in lay.views(anchor).items()})
            per.append({"step": st["step"], "theta": theta, "anchors": anchors})
        out.append(per)
    return out


def torchft_anchor_names(fragments: list[list[int]], n_units: int) -> list[dict[str, str]]:
    """torchft names a fragment's parameters inside its ModuleList ("0.tok_emb.weight"); the lab's full names."""
    prefixes = ["root."] + [f"blocks.{i}." for i in range(n_units - 1)]
    return [{f"{i}.{n}": prefixes[u] + n for i, u in enumerate(units)
             for n, _ in build_model("nano", 0).units()[u].named_parameters()} for units in fragments]


def compare(cfg_kw: dict[str, Any], fragments: int, tmp_path: Path) -> list[float]:
    """Max |Δθ| (θ and anchors) per outer step between the lab and torchft; asserts the schedule agrees."""
    from tests.oracles.torchft_diloco import torchft_diloco

    cfg = small(clock="virtual", shards=1, replicas=2, warmup_steps=0, steps=12, checkpoint_every=1,
                out=str(tmp_path / "lab"), **cfg_kw)
    run = launch(cfg)
    ref = torchft_diloco(cfg, fragments)
    n = len(ref[0]["snapshots"])
    ours = lab_states(Path(cfg.out), n, cfg.replicas)
    names = torchft_anchor_names(ref[0]["fragments"], 3)
    worst = []
    for k in range(n):
        diff = 0.0
        for r in range(cfg.replicas):
            snap, mine = ref[r]["snapshots"][k], ours[k][r]
            assert mine["step"] == snap["step"], "the same outer steps, after the same inner steps"
            assert set(snap["theta"]) == set(mine["theta"])
            for name, v in snap["theta"].items():
                diff = max(diff, float((mine["theta"][name] - v).abs().max()))
            for frag, anchors in zip(names, snap["anchors"]):
                for tname, v in anchors.items():
                    diff = max(diff, float((mine["anchors"][frag[tname]] - v).abs().max()))
        worst.append(diff)
    assert [s["step"] for s in run.syncs if s["kind"] == "sync"][:n] == [s["step"] for s in ref[0]["snapshots"]]
    return worst


def test_diloco_equals_torchft(tmp_path):
    worst = compare(dict(method="diloco", sync_interval=3), 1, tmp_path)
    print("diloco vs torchft, max |dtheta| per outer step:", [f"{w:.2e}" for w in worst])
    assert len(worst) == 4 and max(worst) < TOL


def test_streaming_diloco_equals_torchft(tmp_path):
    worst = compare(dict(method="streaming_diloco", sync_interval=6, fragments=3, fragment_sync_delay=1,
                         fragment_update_alpha=0.5), 3, tmp_path)
    print("streaming_diloco vs torchft, max |dtheta| per outer step:", [f"{w:.2e}" for w in worst])
    assert len(worst) == 6 and max(worst) < TOL
