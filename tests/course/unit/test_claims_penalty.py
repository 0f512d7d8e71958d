"""The penalty's claims (edit_course/claims/penalty.py) on hand-built decisions and on the shipped runs.

Each hand-built run is an EDiT run directory holding only what the claims read: config.json, the penalty
decisions, the losses and summary.json. A decision is judged when it records a threshold; the closing sync
of `finalize` records none.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from edit_course.claims import penalty as cp
from edit_lab import RunConfig
from edit_lab.core.penalty import softmax_weights
from edit_lab.records.run import Run

UNITS, REPLICAS = 2, 2


def write_run(path: Path, flagged: set[tuple[int, int, int]] = frozenset(), sync_steps=range(6, 22, 2),
              closing: int | None = 22, vals: list[tuple[int, float]] = (), final: float = 3.0,
              late_loss: dict[int, float] | None = None, big: dict[tuple[int, int], float] | None = None) -> Run:
    """An EDiT run whose replica r is flagged in unit u at the sync of step s for every (s, u, r) in `flagged`;
    `big[(s, r)]`: replica r's G at step s in every unit (otherwise 0.5); `late_loss`: each replica's training
    loss (every step)."""
    path.mkdir(parents=True)
    steps = closing or max(sync_steps)
    (path / "config.json").write_text(RunConfig(method="edit", shards=1, replicas=REPLICAS, steps=steps,
                                                model="nano").to_json())
    rows = []
    for s in [*sync_steps, *([closing] if closing else [])]:
        g = [(big or {}).get((s, r), 0.5) for r in range(REPLICAS)]
        clip = 0.5 if max(g) > 1 else 1.0  # one clip factor per unit: the aggregate's
        for u in range(UNITS):
            out = [(s, u, r) in flagged for r in range(REPLICAS)]
            w = softmax_weights(g, 1.0, out)  # the weights EDiT takes (T = 1)
            for r in range(REPLICAS):
                rows.append({"kind": "penalty", "step": s, "unit": u, "replica": r, "G": g[r],
                             "z": 9.0 if out[r] else 0.1, "threshold": None if s == closing else 3.0,
                             "outlier": out[r], "readmitted": False, "steps": 2, "weight": w[r], "clip": clip,
                             "skipped": False})
    (path / "penalty.jsonl").write_text("".join(json.dumps(p) + "\n" for p in rows))
    metrics = [{"kind": "train", "step": s, "replica": r, "loss": (late_loss or {}).get(r, 3.0), "tokens": 128,
                "t": 0.1 * s, "dt": 0.1} for s in range(steps) for r in range(REPLICAS)]
    metrics += [{"kind": "eval", "step": s, "val_loss": v} for s, v in vals]
    (path / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    (path / "summary.json").write_text(json.dumps({"final_val_loss": final}))
    return Run(path)


def test_a_healthy_replica_flagged_once_is_reported_with_its_step(tmp_path):
    assert cp.healthy_never_flagged(write_run(tmp_path / "a"), [0]).ok
    v = cp.healthy_never_flagged(write_run(tmp_path / "b", flagged={(10, 1, 0)}), [0])
    assert not v.ok and "1 of" in v.numbers and "[10]" in v.numbers


def test_a_spike_is_caught_only_when_every_unit_flags_it_at_the_first_sync_after_it(tmp_path):
    every = write_run(tmp_path / "a", flagged={(14, 0, 1), (14, 1, 1)})
    one = write_run(tmp_path / "b", flagged={(14, 1, 1)})
    assert cp.spike_caught(every, 1, spike_step=13).ok
    v = cp.spike_caught(one, 1, spike_step=13)
    assert not v.ok and "1 of 2 units" in v.numbers


def test_caught_waits_for_enough_judged_syncs_then_counts_units(tmp_path, capsys):
    run = write_run(tmp_path / "a", flagged={(16, 1, 1), (18, 1, 1)})
    assert cp.caught(run, 1, from_step=18) is None  # not flagged at 20, the only judged sync after 18: too early
    assert "too few" in capsys.readouterr().out
    assert cp.caught(run, 1, from_step=17).ok  # flagged at 18: caught, however few syncs it took
    v = cp.caught(run, 1, from_step=9)  # judged syncs 10 … 20
    assert v.ok and "1 of 2 units (units 1), first at step 16" in v.numbers
    assert not cp.caught(write_run(tmp_path / "b"), 1, from_step=9).ok


def test_stays_out_names_the_units_a_caught_replica_was_let_back_into(tmp_path):
    released = write_run(tmp_path / "a", flagged={(16, 0, 1), (16, 1, 1), (18, 1, 1), (20, 1, 1)})
    v = cp.stays_out(released, 1, from_step=9)
    assert not v.ok and "let back in units [0]" in v.numbers
    kept = write_run(tmp_path / "b", flagged={(18, 1, 1), (20, 1, 1)})
    assert cp.stays_out(kept, 1, from_step=9).ok
    assert cp.stays_out(write_run(tmp_path / "c"), 1, from_step=9) is None  # never caught: nothing to ask


def test_the_closing_sync_is_described_as_recorded(tmp_path):
    text = cp.closing_sync(write_run(tmp_path / "a", flagged={(20, 1, 1)}), 1)
    assert text == ("the closing sync (step 22) judged no norm and let replica 1's last round into the final model "
                    "with weight 0.50–0.50 over the units")
    out = cp.closing_sync(write_run(tmp_path / "b", flagged={(22, 0, 1), (22, 1, 1)}), 1)
    assert out.endswith("kept replica 1's last round out of the final model (weight 0 in every unit)")


def test_the_spike_and_bad_data_losses(tmp_path):
    on = write_run(tmp_path / "on", vals=[(12, 4.0), (16, 3.5), (22, 3.2)], final=3.2)
    off = write_run(tmp_path / "off", vals=[(12, 4.0), (16, 60.0), (22, 40.0)], final=40.0)
    assert cp.max_val_after(off, 13) == 60.0 and math.isnan(cp.max_val_after(off, 22))
    assert cp.bounds_spike(on, off, 13).ok and not cp.bounds_spike(off, on, 13).ok
    bad_on, bad_off = write_run(tmp_path / "b1", final=3.06), write_run(tmp_path / "b2", final=3.01)
    v = cp.smaller_than_spike(bad_on, bad_off, on, off)
    assert v.ok and "+0.050" in v.numbers


def test_weighting_and_clipping_alone_on_a_spike(tmp_path):
    run = write_run(tmp_path / "a", big={(14, 1): 120.0})
    v = cp.softmax_silences_spike(run, 1, spike_step=13)  # e^−119.5
    assert v.ok and "e-52" in v.numbers
    assert cp.clip_bounds_spike(run, spike_step=13).ok  # the spiked mean's norm > φ: clip 0.5 in every unit
    calm = write_run(tmp_path / "b", big={(14, 1): 3.0})  # e^−2.5 ≈ 0.08 is a weight, not nothing
    assert not cp.softmax_silences_spike(calm, 1, spike_step=13).ok


def test_flag_counts_keep_the_bad_replica_apart(tmp_path):
    a = write_run(tmp_path / "a", flagged={(10, 0, 0)})
    b = write_run(tmp_path / "b", flagged={(12, 0, 1), (12, 1, 1)})
    judged = 8 * UNITS  # 8 judged syncs, the closing one is not
    assert cp.flag_counts({"a": a, "b": b}, {"a": None, "b": 1}) == (1, judged * REPLICAS + judged, 2, judged)
    assert "healthy replicas flagged in 1 of 48" in cp.shipped_flags({"a": a, "b": b}, {"a": None, "b": 1})


def test_the_bad_replicas_own_loss_is_a_witness_the_flags_may_not_be(tmp_path):
    run = write_run(tmp_path / "a", late_loss={0: 3.1, 1: 5.6}, flagged={(10, 0, 0)})
    v, flags = cp.bad_data_witnesses(run, 1)
    assert v.ok and "5.60 against at most 3.10" in v.numbers
    assert flags.endswith("would not have named it")


def test_the_benchmarks_verification(tmp_path):
    shipped = Path(__file__).resolve().parents[3] / "benchmarks" / "results" / "penalty_defaults.json"
    if shipped.is_file():
        assert cp.benchmark_healthy_flags(shipped).ok
    bad = tmp_path / "p.json"
    bad.write_text(json.dumps({"verify": [{"config": "nb05-spike", "bad_flagged": 5, "bad_records": 5,
                                           "healthy_flagged": 1, "healthy_records": 100}]}))
    v = cp.benchmark_healthy_flags(bad)
    assert not v.ok and "flagged 1 of 100" in v.numbers
    assert cp.benchmark_healthy_flags(tmp_path / "missing.json") is None


def test_the_shipped_examples_closing_sync_is_described():
    from edit_lab.records.examples import HERE

    if not (HERE / "edit-straggler" / "config.json").exists():
        pytest.skip("the example runs were never made in this checkout")
    text = cp.closing_sync(Run(HERE / "edit-straggler"), 1)
    assert text.startswith("the closing sync (step ") and "final model" in text


def test_weighting_alone_is_judged_at_the_first_sync_after_the_spike_even_with_no_threshold(tmp_path):
    """With the anomaly filter off no norm is judged (no threshold recorded): the sync after the spike still counts."""
    write_run(tmp_path / "a", big={(14, 1): 120.0})
    rows = [json.loads(line) for line in (tmp_path / "a" / "penalty.jsonl").read_text().splitlines()]
    (tmp_path / "a" / "penalty.jsonl").write_text("".join(json.dumps({**p, "threshold": None}) + "\n" for p in rows))
    v = cp.softmax_silences_spike(Run(tmp_path / "a"), 1, spike_step=13)
    assert v.ok and "step 14" in v.numbers


def test_the_paper_box_labels_whose_numbers_each_row_holds(tmp_path):
    on = write_run(tmp_path / "on", flagged={(14, 0, 1), (14, 1, 1)}, vals=[(16, 3.5)], final=3.2)
    off = write_run(tmp_path / "off", vals=[(16, 60.0)], final=40.0)
    bad_on = write_run(tmp_path / "b1", flagged={(18, 1, 1), (20, 1, 1)}, final=3.1)
    bad_off = write_run(tmp_path / "b2", final=3.0)
    bench = tmp_path / "p.json"
    bench.write_text(json.dumps({"verify": [
        {"config": "nb05-spike", "bad_flagged": 5, "bad_records": 5, "healthy_flagged": 0, "healthy_records": 10},
        {"config": "nb05-corrupt", "bad_flagged": 3, "bad_records": 8, "healthy_flagged": 1, "healthy_records": 10,
         "final_val_loss": 2.9}]}))
    box = cp.paper_box(on, off, bad_on, bad_off, 13, 13, bench)
    assert list(box.index) == ["the paper's (Cheng et al., ICLR 2025)",
                               "this notebook's runs (one seed; with: the lab's rules)",
                               "the benchmark's (p.json: this notebook's settings, the detector of its commit)"]
    assert box.iloc[1, 0] == "highest val loss after it 3.500 with, 60.000 without; flagged in 2 of 2 units at once"
    assert box.iloc[1, 1].startswith("flagged in 2 of 8 judged (sync, unit) records; final val loss 3.100 with")
    assert box.iloc[2].tolist() == ["flagged in every unit at once in 1 of 1 seeds",
                                    "flagged in 3 of 8 records over 1 seeds; final val loss with the penalty 2.900",
                                    "flagged in 1 of 20 records"]
    assert cp.paper_box(on, off, bad_on, bad_off, 13, 13, tmp_path / "none.json").iloc[2, 0] == "not in this checkout"


# ---------------------------------------------------------------- why each verdict: the replay of the run's norms (D15)


def replayed_run(path: Path, norms, replicas: int = 2, **penalty) -> Run:
    """An EDiT run whose penalty.jsonl is what the library decides on `norms[r][u][i]` (G of replica r, unit u at
    sync i; τ = 2 local steps each, syncs at steps 6, 8, …; the last one a full round, judged)."""
    from edit_lab.core.penalty import PenaltyConfig, replay_units

    path.mkdir(parents=True)
    n = len(norms[0][0])
    cfg = RunConfig(method="edit", shards=1, replicas=replicas, steps=4 + 2 * n, warmup_steps=4, sync_interval=2,
                    model="nano", **{f"penalty_{k}": v for k, v in penalty.items()})
    (path / "config.json").write_text(cfg.to_json())
    got = replay_units(cfg.penalty, norms, [[2] * n for _ in range(replicas)])
    rows = []
    for i in range(n):
        for u in range(len(norms[0])):
            out = [got[r][u][i].outlier for r in range(replicas)]
            w = softmax_weights([norms[r][u][i] for r in range(replicas)], 1.0, out)
            for r in range(replicas):
                j = got[r][u][i]
                rows.append({"kind": "penalty", "step": 6 + 2 * i, "unit": u, "replica": r, "G": norms[r][u][i],
                             "z": j.z, "threshold": j.threshold, "outlier": j.outlier, "readmitted": j.readmitted,
                             "steps": 2, "weight": w[r], "clip": 1.0, "skipped": False, "peer": j.peer,
                             "closing": False})
    (path / "penalty.jsonl").write_text("".join(json.dumps(p) + "\n" for p in rows))
    (path / "metrics.jsonl").write_text("")
    (path / "summary.json").write_text(json.dumps({"final_val_loss": 3.0}))
    return Run(path)


def _series(n=14, at=7, factor=1.0, units=(0, 1), replicas=2, bad=1):
    """G 0.5 everywhere; replica `bad`'s G times `factor` on `units` from sync `at` on."""
    return [[[0.5 * (factor if r == bad and u in units and i >= at else 1.0) for i in range(n)] for u in range(2)]
            for r in range(replicas)]


def test_a_rise_on_one_unit_enters_there_and_takes_the_whole_replica_out(tmp_path, capsys):
    run = replayed_run(tmp_path / "a", _series(factor=2.0, units=(1,)))
    d = cp.decisions(run).set_index(["step", "unit", "replica"])
    assert d["replayed"].all()
    # sync 7 is step 20: unit 1 of replica 1 enters (z > δ·f, q 2 > κ_e, its own G/k 6.7 σ above its memory)
    assert d.loc[(20, 1, 1), "reason"] == cp.ENTERS and d.loc[(20, 1, 1), "q"] == pytest.approx(2.0)
    assert d.loc[(20, 1, 1), "own_z"] == pytest.approx(0.5 / 0.075, rel=1e-6)
    assert d.loc[(20, 0, 1), "reason"] == "whole replica (unit 1)" and d.loc[(20, 0, 1), "outlier"]
    assert d.loc[(22, 1, 1), "reason"] == cp.STAYS
    assert set(d.xs(0, level="replica")["reason"]) <= {cp.IN_LINE, cp.UNARMED}
    r = cp.replica_reasons(run, 1, after=18)
    assert list(r["flagged"]) == [True] * 7
    assert r["reason"].iloc[0].startswith("enters on unit(s) 1: z > δ·f, q > κ_e 1.6 and own G/k")
    assert r["reason"].iloc[1].startswith("stays: q > κ_s 1.3 on unit(s) 1")
    v, said = cp.two_replicas(run, bad=1, after=19)
    assert v.ok and "the memory names replica 1" in said and "up to 6.67 σ" in said
    assert cp.caught(run, 1, from_step=19).ok and cp.healthy_never_flagged(run, [0]).ok


def test_with_two_replicas_the_one_whose_norm_fell_leaves_its_peer_standing_out_and_the_memory_keeps_it_in(tmp_path):
    fell = _series(factor=0.5)  # replica 1's G halves: replica 0's q doubles, its own G/k does not move
    run = replayed_run(tmp_path / "d15", fell)
    d = cp.decisions(run)
    healthy = d[(d["replica"] == 0) & (d["step"] >= 20)]
    # its detector flags q = 2 at first (then learns it: q is admitted), the memory keeps it in
    assert not d["outlier"].any() and healthy["reason"].iloc[0] == cp.MEMORY
    assert set(healthy["reason"]) == {cp.MEMORY, cp.IN_LINE}
    assert healthy["q"].tolist() == pytest.approx([2.0] * len(healthy)) and (healthy["own_z"].abs() < 1e-9).all()
    assert "own G/k is within δ_m 1.5 σ of its memory" in cp.replica_reasons(run, 0, after=18)["reason"].iloc[0]
    v, said = cp.two_replicas(run, bad=1, after=19)
    assert v.ok and "the memory names neither" in said
    assert "never stood δ_m 1.5 σ above its memory" in cp.why_not_caught(run, 0, after=19)
    # without the memory (δ_m = 0) the healthy replica is the one flagged, and the verdict says why
    d11 = replayed_run(tmp_path / "d11", fell, memory_threshold=0.0)
    v = cp.healthy_never_flagged(d11, [0])
    assert not v.ok and "replica 0: at step 20 (q 2) it enters on unit(s) 0, 1: z > δ·f, q > κ_e 1.6;" in v.why_not
    assert (cp.decisions(d11)["own_z"].isna()).all()


def test_at_four_replicas_the_median_of_the_peers_is_a_majority_and_no_memory_is_asked(tmp_path):
    run = replayed_run(tmp_path / "a", _series(factor=2.0, replicas=4, bad=3), replicas=4)
    d = cp.decisions(run)
    assert d["own_z"].isna().all() and d["replayed"].all()
    assert set(d.loc[d["outlier"], "replica"]) == {3} and d.loc[d["step"] == 20, "reason"].tolist().count(cp.ENTERS) == 2
    v, said = cp.two_replicas(run, bad=3, after=19)
    assert v is None and "median of 3 others" in said


def test_a_caught_replica_let_back_in_is_told_why_and_records_not_the_replays_are_named(tmp_path, capsys):
    episode = _series(factor=2.0)
    for u in range(2):
        episode[1][u][10:] = [0.5] * 4  # the episode ends at sync 10 (step 26)
    run = replayed_run(tmp_path / "a", episode)
    v = cp.stays_out(run, 1, from_step=19)
    assert not v.ok and v.why_not.startswith("at step 26 (q 1) back: no unit stays")
    assert cp.decisions(write_run(tmp_path / "b", flagged={(10, 1, 0)}))["replayed"].tolist().count(False) == 1
    v = cp.healthy_never_flagged(write_run(tmp_path / "c", flagged={(10, 1, 0)}), [0])
    assert "not what the replay of the run's norms decides" in v.why_not


def _weights_run(path: Path, weights: dict[tuple[int, int, int], float], g: dict[tuple[int, int, int], float] = None,
                 clip: float = 1.0, final: float = 3.0, flagged=frozenset()) -> Run:
    """A run whose penalty records hold `weights[(step, unit, replica)]` (and G, clip, flags) as given."""
    path.mkdir(parents=True)
    (path / "config.json").write_text(RunConfig(method="edit", shards=1, replicas=2, steps=12, model="nano").to_json())
    rows = [{"kind": "penalty", "step": s, "unit": u, "replica": r, "G": (g or {}).get((s, u, r), 0.5), "z": 0.1,
             "threshold": 3.0, "outlier": (s, u, r) in flagged, "readmitted": False, "steps": 2, "weight": w,
             "clip": clip, "skipped": False} for (s, u, r), w in sorted(weights.items())]
    (path / "penalty.jsonl").write_text("".join(json.dumps(p) + "\n" for p in rows))
    (path / "metrics.jsonl").write_text("")
    (path / "summary.json").write_text(json.dumps({"final_val_loss": final}))
    return Run(path)


def test_each_defence_alone_against_all_three_is_told_from_weights_and_norms(tmp_path, capsys):
    """Item 11 of the course review: 'only weighting' equals all three bit for bit (its spike weight is nothing,
    the rest the same), 'only anomaly' gives the spike 0 too but a plain 1/2 elsewhere: another mean, another run."""
    keys = [(s, u, r) for s in (6, 8, 10) for u in (0, 1) for r in (0, 1)]
    soft = {k: (0.0 if k[0] == 8 and k[2] == 1 else 1.0 if k[0] == 8 else 0.49 if k[2] == 0 else 0.51) for k in keys}
    all3 = _weights_run(tmp_path / "all", soft, flagged={(8, u, 1) for u in (0, 1)}, final=2.88)
    weighting = _weights_run(tmp_path / "w", {k: (1e-53 if k[0] == 8 and k[2] == 1 else v) for k, v in soft.items()},
                             final=2.88)
    anomaly = _weights_run(tmp_path / "a", {k: (0.0 if k[0] == 8 and k[2] == 1 else 1.0 if k[0] == 8 else 0.5)
                                            for k in keys}, g={(10, 0, 0): 0.6}, final=2.83,
                           flagged={(8, u, 1) for u in (0, 1)})
    table = cp.alone_against_all(all3, {"anomaly": anomaly, "weighting": weighting}, spike_step=7)
    out = capsys.readouterr().out
    assert out.count("✓ ") == 2 and "✗" not in out
    assert table.loc["only anomaly", "healthy weights elsewhere (min)"] == 0.5
    assert table.loc["only anomaly", "largest |G − all three's|"] == pytest.approx(0.1)
    assert table.loc["only weighting", "largest |G − all three's|"] == 0.0
    # weighting alone that ends elsewhere (a clip acted): ✗ with the reason, which the records show
    clipped = _weights_run(tmp_path / "c", soft, clip=0.5, g={(6, 0, 0): 0.7}, final=2.9)
    cp.alone_against_all(all3, {"weighting": clipped}, spike_step=7)
    out = capsys.readouterr().out
    assert out.startswith("✗ only weighting") and "records clipped 12 and 0" in out and "clip acted" in out
    # anomaly alone whose weights elsewhere are the softmax's (all norms equal): nothing to tell them apart, ✗
    same = _weights_run(tmp_path / "s", soft, flagged={(8, u, 1) for u in (0, 1)})
    cp.alone_against_all(all3, {"anomaly": same}, spike_step=7)
    assert capsys.readouterr().out.startswith("✗ only anomaly")


def test_the_papers_per_unit_detector_leaves_a_bad_replica_in_the_units_it_does_not_flag(tmp_path, capsys):
    keys = [(s, u, r) for s in (8, 10, 12, 14, 16) for u in (0, 1, 2) for r in (0, 1)]
    part = {(s, 2, 1) for s in (12, 14, 16)}  # unit 2 only, from step 12
    w = {k: (0.0 if k in part else 0.48 if k[2] == 1 else 0.52) for k in keys}
    v = cp.per_unit_leaves_in(_weights_run(tmp_path / "p", w, flagged=part), 1, from_step=7)
    assert v.ok and "unit(s) 2 at 3 of 5" in v.numbers and "unit(s) 0, 1 let its Δ in with weight 0.48–0.48" in v.numbers
    whole = {(s, u, 1) for s in (12, 14, 16) for u in (0, 1, 2)}  # the lab's whole replica: out of every unit
    v = cp.per_unit_leaves_in(_weights_run(tmp_path / "w", {k: (0.0 if k in whole else 1.0) for k in keys},
                                           flagged=whole), 1, from_step=7)
    assert not v.ok and "every unit" in v.numbers and "every unit at once" in v.why_not
    v = cp.per_unit_leaves_in(_weights_run(tmp_path / "n", {k: 0.5 for k in keys}), 1, from_step=7)
    assert not v.ok and "never flagged over 5" in v.numbers and "α 0.02" in v.why_not
    capsys.readouterr()
    assert cp.per_unit_leaves_in(_weights_run(tmp_path / "short", {k: 0.5 for k in keys}), 1, from_step=13) is None
    assert "too few to tell" in capsys.readouterr().out
