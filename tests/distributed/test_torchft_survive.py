"""The lab's `survive_on_failure="discard"` against torchft's `DiLoCo` on the same death (issue 50; edit-method.md §16).

The episode, R = 3 replicas of 1 shard, nano, DiLoCo with H = 3, W = 0 (torchft has no warm-up), 12 steps, outer
Nesterov (lr 0.7, μ 0.8), the same seed, data, AdamW and clipping on both sides:

- both: syncs after steps 3, 6, 9, 12. Replica 1 is gone before it sends its pseudo-gradient of the sync after
  step 6, so the survivors' (0 and 2) sync there fails and they discard the round: θ ← a, no outer step, the
  anchor and the outer momentum those of step 3. They train steps 6 … 11 from there on, syncing as two after
  steps 9 and 12 (the mean of two Δ).
- the lab (real processes, `survive=True, survive_on_failure="discard", fault_replica=1, fault_replica_step=5`):
  replica 1 is SIGKILLed at the start of step 5, the last step of the round; the survivors' sync after step 5 (at
  step 6) fails on the dead peer or meets the view that its death made, and discards either way.
- torchft (`tests/oracles/torchft_diloco.py`, `leave=(1, 5)`; threads, which cannot be SIGKILLed): replica 1
  trains steps 0 … 4, joins the quorum of the sync after step 5 and then aborts its process group and shuts its
  manager down; the survivors' all-reduce fails ("Connection closed by peer", as after a kill),
  `should_commit()` is False, `DiLoCo` restores the anchor and skips the outer step; the next quorum is {0, 2}.

The survivors' θ and anchors after each of the four sync attempts are compared, replica by replica, to `TOL` (as
the no-death oracle test). The lab's are read from its real ranks by a tap (`tests/oracles/lab_tap`: the
checkpoints are refused with survival, and the CRC checksums are bit-for-bit only).

What differs by design (asserted, not compared):
- torchft counts only committed outer steps (`Manager.current_step()`: 1, 1, 2, 3 after the four attempts); the
  lab numbers its syncs by the training step (3, 6, 9, 12), the discard recorded at step 6.
- the leaver's last act: torchft's joins the failed sync's quorum (so that the failure is a failed commit); the
  lab's dies one step earlier, at the start of its step 5. Neither survivor ever receives its Δ of that round, so
  the survivors' numbers are the same. (A torchft replica that leaves *before* the quorum is not in it: the others
  commit as two, no round is discarded; that is the lab's `retry`, not its `discard`: §16.)
- the lab ends with every replica on the agreed model; torchft's leaver keeps what it had. Only survivors are
  compared.

Measured (torch 2.13 CPU, torchft 0.2.0): printed by the test (`pytest -s`), max |Δθ| over θ and anchors of both
survivors per sync attempt; see the docstring of `test_discard_equals_torchft_after_a_death`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch

from edit_lab import launch
from edit_lab.core.sharding import UnitLayout
from edit_lab.core.model import build_model
from edit_lab.records.events import read_jsonl
from tests.helpers import small

torchft = pytest.importorskip("torchft", reason="torchft is the oracle (the test extra)")

pytestmark = pytest.mark.slow

TOL = 2e-6  # float32 rounding of a dozen AdamW steps and three outer steps, taken in another order (as the oracle's)
TAP = Path(__file__).resolve().parents[1] / "oracles" / "lab_tap"
SURVIVORS = (0, 2)


def unit_prefixes(model: str) -> list[str]:
    """The lab's full parameter names of each sync unit begin with these: the root unit, then the blocks."""
    return ["root."] + [f"blocks.{i}." for i in range(len(build_model(model, 0).units()) - 1)]


def named(model: str, shards: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    """One replica's unit shards (1 shard: the whole unit, flat) as {full parameter name: tensor}."""
    out = {}
    for unit, pre, flat in zip(build_model(model, 0).units(), unit_prefixes(model), shards):
        out.update({pre + n: v for n, v in UnitLayout.of(unit, 1).views(flat).items()})
    return out


def lab_records(tap: Path, model: str) -> dict[int, list[dict[str, Any]]]:
    """replica -> its tap records in order: {"kind", "step", "members", "theta", "anchors"} (names → tensors)."""
    out: dict[int, list[dict[str, Any]]] = {}
    for path in sorted(tap.glob("r*s0-*.pt")):
        rec = torch.load(path, weights_only=False)
        rec["theta"], rec["anchors"] = named(model, rec["theta"]), named(model, rec["anchors"])
        out.setdefault(rec["replica"], []).append(rec)
    return out


def torchft_named(model: str, state: dict[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """A torchft record's θ (the model's state dict, the lab's names) and anchors (one fragment: the ModuleList of
    every unit, "i.name" → the lab's full name)."""
    units, prefixes = build_model(model, 0).units(), unit_prefixes(model)
    names = {f"{i}.{n}": prefixes[i] + n for i, u in enumerate(units) for n, _ in u.named_parameters()}
    return state["theta"], {names[k]: v for k, v in state["anchors"][0].items()}


def max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    """Over b's names, every one of which a holds."""
    assert set(b) <= set(a) and b
    return max(float((a[k] - b[k]).abs().max()) for k in b)


def lab_run(mode: str, tmp_path: Path, monkeypatch) -> tuple[Any, dict[int, list[dict[str, Any]]]]:
    """The lab's episode on real processes, tapped: the run, and per replica its records after each sync/discard."""
    cfg = small(method="diloco", shards=1, replicas=3, warmup_steps=0, steps=12, sync_interval=3, survive=True,
                survive_on_failure=mode, fault_replica=1, fault_replica_step=5, timeout_s=20,
                out=str(tmp_path / "lab"))
    tap = tmp_path / "tap"
    monkeypatch.setenv("EDIT_LAB_WARM_WORKERS", "0")  # fresh ranks, which import the tap at their start
    monkeypatch.setenv("EDIT_LAB_ANCHOR_TAP", str(tap))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TAP)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    run = launch(cfg)
    monkeypatch.delenv("EDIT_LAB_ANCHOR_TAP")
    assert [v["members"] for v in run.summary["survival"]["views"]] == [[0, 1, 2], [0, 2]]
    ours = lab_records(tap, cfg.data.model)
    assert [(x["kind"], x["step"]) for x in ours[1]] == [("sync", 3)]  # the dead replica's only sync
    return run, ours


def lab_path(run: Any) -> list[str]:
    """How the lab's replica 0 met the death at the sync of step 6 (its record kinds there): a failed collective
    ("detection", "rollback", …) or the new view at the sync's start ("view", …)."""
    return [r["kind"] for r in read_jsonl(run.path / "syncs.jsonl") if r["step"] == 6]


def compare(run: Any, ours: dict[int, list[dict[str, Any]]], ref: list[dict[str, Any]]) -> tuple[list[float], float]:
    """Max |Δθ| over θ and anchors of both survivors after each sync attempt, and of the lab's final model against
    the survivors' last anchors."""
    model = run.config.data.model
    worst = []
    for k in range(len(ref[0]["rounds"])):
        diff = 0.0
        for r in SURVIVORS:
            theta, anchors = torchft_named(model, ref[r]["rounds"][k])
            mine = ours[r][k]
            diff = max(diff, max_diff(mine["theta"], theta), max_diff(mine["anchors"], anchors))
        worst.append(diff)
    end = run.state_dict()  # the lab's final model: the survivors' anchors after step 12
    end_diff = max(max_diff(end, torchft_named(model, ref[r]["rounds"][-1])[1]) for r in SURVIVORS)
    return worst, end_diff


def test_discard_equals_torchft_after_a_death(tmp_path, monkeypatch):
    """Replica 1 of 3 gone in the round ending at step 6; the survivors 0 and 2 discard it and go on as two.

    Measured (torch 2.13 CPU, torchft 0.2.0, 2 cores): max |Δθ| over θ and anchors of both survivors, per sync
    attempt after steps 3, 6 (discarded), 9, 12: 1.6e-7, 1.6e-7, 2.2e-7, 2.6e-7, the final model 2.6e-7; the test
    in about 15 s (20 s when a torchft survivor waits out gloo's 5 s timeout)."""
    from tests.oracles.torchft_diloco import torchft_diloco

    run, ours = lab_run("discard", tmp_path, monkeypatch)
    ref = torchft_diloco(run.config, 1, leave=(1, 5), leave_in_quorum=True)
    # the episode, on both sides: a commit as three, the failed round, two commits as two
    for r in SURVIVORS:
        assert [(x["step"], x["committed"], x["participants"]) for x in ref[r]["rounds"]] == \
            [(3, True, 3), (6, False, 3), (9, True, 2), (12, True, 2)]
        assert len(ref[r]["snapshots"]) == 3  # torchft's outer steps: the committed ones
        assert [(x["kind"], x["step"], x["members"]) for x in ours[r]] == \
            [("sync", 3, [0, 1, 2]), ("discard", 6, [0, 2]), ("sync", 9, [0, 2]), ("sync", 12, [0, 2])]
    # the discarded round: θ and anchors are step 3's anchors, exactly, on both sides (no outer step, θ ← a)
    for r in SURVIVORS:
        for side in (ours[r], [dict(zip(("theta", "anchors"), torchft_named(run.config.data.model, x)))
                               for x in ref[r]["rounds"]]):
            assert all(torch.equal(side[1]["anchors"][n], side[0]["anchors"][n]) for n in side[0]["anchors"])
            assert all(torch.equal(side[1]["theta"][n], side[1]["anchors"][n]) for n in side[1]["anchors"])
    worst, end = compare(run, ours, ref)
    print("discard vs torchft (the leaver in the failed sync's quorum): max |dtheta| per sync attempt "
          "(3, 6 discarded, 9, 12)", [f"{w:.2e}" for w in worst], f"final model {end:.2e}; the lab at 6:",
          lab_path(run))
    assert max(worst + [end]) < TOL


def test_retry_equals_torchft_when_the_dead_is_in_no_quorum(tmp_path, monkeypatch):
    """The same death under the lab's default, `retry`, against torchft where the leaver leaves at the start of
    its step 5 as the lab's dies, in no quorum: torchft's survivors form a quorum of two for the sync after step 5
    and commit the mean of their two pseudo-gradients, nothing discarded; the lab's survivors' sync fails (or
    meets the new view at its start) and is run again by the two of them with their local steps kept. So torchft
    discards only a round whose commit failed, the death after the quorum formed (the test above); a death
    earlier in the round costs it only the dead replica's work.

    Measured (torch 2.13 CPU, torchft 0.2.0, 2 cores): max |Δθ| per sync after steps 3, 6, 9, 12: see the
    module docstring."""
    from tests.oracles.torchft_diloco import torchft_diloco

    run, ours = lab_run("retry", tmp_path, monkeypatch)
    ref = torchft_diloco(run.config, 1, leave=(1, 5), leave_in_quorum=False)
    for r in SURVIVORS:
        assert [(x["step"], x["committed"], x["participants"]) for x in ref[r]["rounds"]] == \
            [(3, True, 3), (6, True, 2), (9, True, 2), (12, True, 2)]
        assert [(x["kind"], x["step"], x["members"]) for x in ours[r]] == \
            [("sync", 3, [0, 1, 2]), ("sync", 6, [0, 2]), ("sync", 9, [0, 2]), ("sync", 12, [0, 2])]
    worst, end = compare(run, ours, ref)
    print("retry vs torchft (the leaver in no quorum): max |dtheta| per sync (3, 6, 9, 12)",
          [f"{w:.2e}" for w in worst], f"final model {end:.2e}; the lab at 6:", lab_path(run))
    assert max(worst + [end]) < TOL
