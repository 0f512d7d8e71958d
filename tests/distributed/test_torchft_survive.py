"""The lab's surviving DiLoCo against torchft's `DiLoCo` on the same death (issue 50; edit-method.md §16).

The episode, R = 3 replicas of 1 shard, nano, DiLoCo with H = 3, W = 0 (torchft has no warm-up), 12 steps, outer
Nesterov (lr 0.7, μ 0.8), the same seed, data, AdamW and clipping on both sides; syncs after steps 3, 6, 9, 12;
replica 1 gone in the round that ends at step 6, survivors 0 and 2, no replacement:

- the lab (real processes, `survive=True, fault_replica=1, fault_replica_step=5`): replica 1 is SIGKILLed at the
  start of its step 5, the round's last; the survivors' sync after step 5 fails on the dead peer (or meets, at its
  start, the view its death made) and, with `survive_on_failure="discard"`, drops the round: θ ← a; with the
  default `retry` the two of them run that sync again, their local steps kept.
- torchft (`edit_oracles/torchft_diloco.py`, threads, which cannot be SIGKILLed): replica 1 leaves at the start of
  its step 5 by torchft's own calls (its process group aborted, its manager shut down: a peer's collective with it
  fails with "Connection closed by peer", as after a kill). For `discard` it first joins the quorum of the sync
  after step 5 (`leave_in_quorum=True`): the survivors' all-reduce fails, `should_commit()` is False, `DiLoCo`'s
  perform restores θ to the anchor and skips the outer step. For `retry` it leaves in no quorum: the survivors'
  quorum is the two of them and they commit the mean of their two pseudo-gradients.

After each of the four sync attempts the survivors' θ, anchors and outer momenta are compared, replica by replica,
to `TOL` (as the no-death oracle test), and the lab's final model to their last anchors. The lab's are read from
its real ranks by a tap (`tests/oracles/lab_tap`: checkpoints are refused with survival, and the CRC checksums are
bit-for-bit only). The two episodes' anchors are 1.5e-2 … 2.5e-2 apart after steps 6 … 12 (torchft's discard
against its commit as two): the tolerance tells them apart by four orders of magnitude.

Where the two meet and where they differ by design:
- *When a round is discarded.* torchft discards only a round whose commit failed: the dead replica was in that
  sync's quorum (the first test). A death earlier in the round leaves it out of the next quorum, and the survivors
  commit as two: the lab's `retry`, not its `discard` (the second test). The lab's `discard` drops every round a
  death interrupted, also where a survivor meets the new view at the sync's start: it has no quorum per sync to
  agree on who syncs, so every survivor of the round must act alike whichever way it learnt of the death (§16).
  So the two agree for a death between the quorum and the commit, which is the first test's.
- *The step count.* Both count committed outer steps only: torchft's `Manager.current_step()` and the lab's
  `n_syncs` are 1, 1, 2, 3 after the four attempts (asserted equal); the lab's records name the discard by its
  training step (6). Both start the next round there: torchft's `_local_step` is reset to 0 after the failed
  perform, the lab's syncs stay on the grid W + kH.
- *The outer momentum* is that of step 3 after the discard on both sides, bit for bit: torchft's failed perform
  never steps the outer SGD (`zero_grad` only); the lab restores its snapshot, then sets θ ← a.
- *The inner optimizer* (AdamW's moments and step count) is not rolled back by either: the survivors keep what the
  discarded round's three steps made of it (torchft's `DiLoCo` never touches it; the lab's snapshot holds the
  method's state and θ). θ after steps 9 and 12 checks it.
- *The data after a discard*: the survivors train steps 6 … on those steps' batches, the discarded round's batches
  (3 … 5) not revisited. The lab's streams are keyed by (step, replica); torchft leaves the data to its user
  ("We'll skip over some data", `DiLoCo._step_post_hook`), and the oracle feeds the lab's `train_batch(step)`.
- *Timing only*: a torchft survivor whose gloo ring neighbour was the other survivor (which failed first and moved
  on) waits out gloo's timeout (5 s here), as torchft leaves a failed group open until the next quorum; the lab
  closes the old view's group at once (§16). The leaver's own state differs (torchft's keeps what it had; the lab's
  is gone): only survivors are compared.

Measured (torch 2.13 CPU, torchft 0.2.0, 2 cores; `pytest -s` prints them): max |Δ| over θ and anchors of both
survivors after the syncs of steps 3, 6, 9, 12 — discard: 1.6e-7, 1.6e-7 (the round dropped), 2.2e-7, 2.6e-7,
final model 2.6e-7; retry: 1.6e-7, 2.2e-7, 2.6e-7, 3.0e-7, final model 3.0e-7; the outer momenta at most 1.3e-7.
Each test 6 … 14 s.
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
    """replica -> its tap records in order: {"kind", "step", "members", "n_syncs", "theta", "anchors", "momenta"}
    (names → tensors)."""
    out: dict[int, list[dict[str, Any]]] = {}
    for path in sorted(tap.glob("r*s0-*.pt")):
        rec = torch.load(path, weights_only=False)
        rec["theta"], rec["anchors"] = named(model, rec["theta"]), named(model, rec["anchors"])
        rec["momenta"] = named(model, rec.pop("momentum"))
        out.setdefault(rec["replica"], []).append(rec)
    return out


def torchft_named(model: str, state: dict[str, Any]) -> tuple[dict[str, torch.Tensor], ...]:
    """A torchft record's θ (the model's state dict, the lab's names), anchors and outer momenta (one fragment: the
    ModuleList of every unit, "i.name" → the lab's full name)."""
    units, prefixes = build_model(model, 0).units(), unit_prefixes(model)
    names = {f"{i}.{n}": prefixes[i] + n for i, u in enumerate(units) for n, _ in u.named_parameters()}
    return (state["theta"], {names[k]: v for k, v in state["anchors"][0].items()},
            {names[k]: v for k, v in state["momenta"][0].items()})


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
    """Max |Δθ| over θ and anchors of both survivors after each sync attempt (and the outer momenta's max |Δ|), and
    of the lab's final model against the survivors' last anchors; asserts the outer steps are counted alike."""
    model = run.config.data.model
    worst, momenta = [], []
    for r in SURVIVORS:  # torchft's manager counts committed outer steps, the lab its completed syncs
        assert [x["manager_step"] for x in ref[r]["rounds"]] == [x["n_syncs"] for x in ours[r]]
    for k in range(len(ref[0]["rounds"])):
        diff, mom = 0.0, 0.0
        for r in SURVIVORS:
            theta, anchors, momentum = torchft_named(model, ref[r]["rounds"][k])
            mine = ours[r][k]
            diff = max(diff, max_diff(mine["theta"], theta), max_diff(mine["anchors"], anchors))
            mom = max(mom, max_diff(mine["momenta"], momentum))
        worst.append(diff)
        momenta.append(mom)
    print("max |dmomentum| per sync attempt", [f"{m:.2e}" for m in momenta])
    assert max(momenta) < TOL
    end = run.state_dict()  # the lab's final model: the survivors' anchors after step 12
    end_diff = max(max_diff(end, torchft_named(model, ref[r]["rounds"][-1])[1]) for r in SURVIVORS)
    return worst, end_diff


def test_discard_equals_torchft_after_a_death(tmp_path, monkeypatch):
    """Replica 1 of 3 gone in the round ending at step 6, after (torchft) that sync's quorum formed; the survivors 0
    and 2 discard the round and go on as two. Measured: the module docstring."""
    from edit_oracles.torchft_diloco import torchft_diloco

    run, ours = lab_run("discard", tmp_path, monkeypatch)
    ref = torchft_diloco(run.config, 1, leave=(1, 5), leave_in_quorum=True)
    # the episode, on both sides: a commit as three, the failed round, two commits as two
    for r in SURVIVORS:
        assert [(x["step"], x["committed"], x["participants"]) for x in ref[r]["rounds"]] == \
            [(3, True, 3), (6, False, 3), (9, True, 2), (12, True, 2)]
        assert len(ref[r]["snapshots"]) == 3  # torchft's outer steps: the committed ones
        assert [(x["kind"], x["step"], x["members"]) for x in ours[r]] == \
            [("sync", 3, [0, 1, 2]), ("discard", 6, [0, 2]), ("sync", 9, [0, 2]), ("sync", 12, [0, 2])]
        assert [x["manager_step"] for x in ref[r]["rounds"]] == [1, 1, 2, 3]  # the failed round is no outer step
    # the discarded round: the anchors and the outer momenta are step 3's, exactly, and θ = a, on both sides
    for r in SURVIVORS:
        for side in (ours[r], [dict(zip(("theta", "anchors", "momenta"), torchft_named(run.config.data.model, x)))
                               for x in ref[r]["rounds"]]):
            for what in ("anchors", "momenta"):
                assert all(torch.equal(side[1][what][n], side[0][what][n]) for n in side[0][what])
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
    earlier in the round costs it only the dead replica's work. Measured: the module docstring."""
    from edit_oracles.torchft_diloco import torchft_diloco

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
