"""The pseudo-gradient penalty in real runs: a spiked replica, a NaN replica, a tight clip, a replica fed bad data.

The spike runs use 2 shards × 3 replicas (six gloo ranks, above our usual four, because the issue
asks for three replicas: with two, "the others' weights sum to 1" is a single weight of 1). To keep
them to seconds they use the nano model and 16 steps: W = 2, τ = 2, so syncs happen at the forwards
of steps 4, 6, …, 14 and at the end (16, the closing sync of `finalize`, not judged).

The detector runs with the lab's defaults (edit-method.md D10 and D11: bias-corrected, α = 0.3, E = 4,
noise floor ε = 0.15, judging each replica's norm per step over the median of its peers', the whole
replica at once, a flagged replica kept out while a unit of it is above κ_s = 1.3 times its peers'):
armed after four syncs, i.e. from the sync of step W + 5τ = 12, the spike's. (The lab's former E = 3 with
the reference's uncorrected α = 0.02 would have judged with a mean still near 0 and taken healthy norms
for outliers.)

A 1 × 4 run feeds one replica random bytes: it must be left out of every unit at every judged sync from
the second after the onset, and at the closing sync. A resumed run with a larger τ makes every replica's
norm of a round rise for good: the per-unit rule of D10 (`penalty_peers` off) re-admits them, checked in
the engine against `penalty.replay` of the same norms.
"""

from __future__ import annotations

import math
from collections import defaultdict

import pytest
import torch

from edit_lab import launch
from tests.helpers import small

SPIKE_STEP = 11  # after its optimizer step; the next forward (step 12) syncs, so no step computes with it
SPIKE_SYNC = 12
SPIKE_STEPS = 16  # so the sync after the spike's (14) is judged; 16 is the closing one
SPIKE_REPLICA = 1
SPIKE_UNITS = (1,)  # block 0 only: nano has units root, block0, block1
OFF = dict(penalty_anomaly=False, penalty_weighting=False, penalty_clip=False)


def _spike_cfg(out, **kw):
    base = dict(method="edit", shards=2, replicas=3, steps=SPIKE_STEPS, warmup_steps=2, sync_interval=2,
                spike_replica=SPIKE_REPLICA, spike_step=SPIKE_STEP,
                spike_scale=10.0, spike_units=SPIKE_UNITS, checksums=True, threads=1, out=str(out))
    base.update(kw)
    return small(**base)


@pytest.fixture(scope="module")
def spike_on(tmp_path_factory):
    return launch(_spike_cfg(tmp_path_factory.mktemp("spike_on") / "run"))


@pytest.fixture(scope="module")
def spike_off(tmp_path_factory):
    return launch(_spike_cfg(tmp_path_factory.mktemp("spike_off") / "run", **OFF))


def _by_sync_unit(run):
    """{(sync step, unit): [record of replica 0, 1, …]}."""
    out = defaultdict(list)
    for p in sorted(run.penalty, key=lambda p: (p["step"], p["unit"], p["replica"])):
        out[(p["step"], p["unit"])].append(p)
    return dict(out)


def _anchor_checksums(run):
    """{(step, unit, shard): {replica: (theta crc, anchor crc)}} from the per-rank checksum events."""
    out = defaultdict(dict)
    for e in run.events_of("checksum"):
        out[(e["step"], e["unit"], e["shard"])][e["replica"]] = (e["data"]["theta"], e["data"]["anchor"])
    return dict(out)


def _assert_replicas_agree(run):
    sums = _anchor_checksums(run)
    cfg = run.config
    n_units = 1 + (len(run.penalty) and max(p["unit"] for p in run.penalty))
    syncs = sorted({p["step"] for p in run.penalty})
    assert set(sums) == {(s, u, sh) for s in syncs for u in range(n_units) for sh in range(cfg.shards)}
    for key, per_replica in sums.items():
        assert sorted(per_replica) == list(range(cfg.replicas)), key
        assert len(set(per_replica.values())) == 1, (key, per_replica)  # same θ and anchor in every replica
        theta, anchor = next(iter(per_replica.values()))
        assert theta == anchor, key  # θ ← a after the sync


def test_a_spike_on_one_unit_leaves_the_whole_replica_out_at_that_sync(spike_on):
    groups = _by_sync_unit(spike_on)
    syncs = sorted({s for s, _ in groups})
    assert syncs == [4, 6, 8, 10, 12, 14, 16]
    # 16 closes a full τ round: judged like the others (D15's note on the closing sync)
    assert not any(p["closing"] for s in (14, 16) for p in groups[(s, 0)]) and groups[(16, 0)][0]["threshold"] is not None
    flagged = {(p["step"], p["unit"], p["replica"]) for recs in groups.values() for p in recs if p["outlier"]}
    assert flagged == {(SPIKE_SYNC, u, SPIKE_REPLICA) for u in range(3)}  # D11: the replica is judged as a whole
    for u in range(3):
        recs = groups[(SPIKE_SYNC, u)]
        spiked, others = recs[SPIKE_REPLICA], [p for p in recs if p["replica"] != SPIKE_REPLICA]
        assert all(p["z"] <= p["threshold"] for p in others)
        if u in SPIKE_UNITS:
            # θ ← 10θ makes G = ‖a − 10θ‖ ≈ 9‖a‖, orders of magnitude above a normal round's drift
            assert spiked["G"] > 50 * max(p["G"] for p in others)
            assert spiked["peer"] > 50 and spiked["z"] > spiked["threshold"] >= 3.0
        else:  # the units it did not strike are in line with its peers', but the replica is out
            assert spiked["z"] <= spiked["threshold"] and spiked["weight"] == 0.0
    # the per-unit rule (D10, `penalty_peers` off) on the same norms flags the struck unit alone
    from edit_lab.core.penalty import PenaltyConfig, replay

    for u in range(3):
        recs = [groups[(s, u)] for s in syncs]
        got = replay(PenaltyConfig(peers=False), [[g[r]["G"] for g in recs] for r in range(3)],
                     [[g[r]["steps"] for g in recs] for r in range(3)], [g[0]["closing"] for g in recs])
        assert [i for i, j in enumerate(got[SPIKE_REPLICA]) if j.outlier] == ([syncs.index(SPIKE_SYNC)]
                                                                              if u in SPIKE_UNITS else [])


def test_spiked_replica_weight_zero_and_softmax_over_the_others(spike_on):
    for (step, unit), recs in _by_sync_unit(spike_on).items():
        assert len(recs) == 3
        kept = [p for p in recs if not p["outlier"]]
        assert all(p["weight"] == 0.0 for p in recs if p["outlier"])
        assert math.fsum(p["weight"] for p in kept) == pytest.approx(1.0, abs=1e-12)
        # T = 1: w_r ∝ exp(−G_r), so the ratio of two kept weights is exp(G_s − G_r)
        a, b = kept[0], kept[-1]
        assert a["weight"] / b["weight"] == pytest.approx(math.exp(b["G"] - a["G"]), rel=1e-9)
        assert not any(p["skipped"] for p in recs) and all(p["clip"] == 1.0 for p in recs)
    spiked = _by_sync_unit(spike_on)[(SPIKE_SYNC, SPIKE_UNITS[0])]
    assert [p["weight"] > 0 for p in spiked] == [True, False, True]
    # the following sync restarted from the anchor: the replica is healthy again and weighs in, at the last
    # judged sync (14) and at the closing one (16), which keeps that verdict
    for step in (SPIKE_SYNC + 2, SPIKE_STEPS):
        after = _by_sync_unit(spike_on)[(step, SPIKE_UNITS[0])][SPIKE_REPLICA]
        assert not after["outlier"] and after["weight"] > 0.3, step


def test_anchors_stay_bit_identical_across_replicas(spike_on):
    _assert_replicas_agree(spike_on)


def test_without_the_penalty_the_spike_reaches_the_anchor(spike_on, spike_off):
    groups = _by_sync_unit(spike_off)
    assert not any(p["outlier"] for recs in groups.values() for p in recs)
    assert all(p["weight"] == pytest.approx(1 / 3, abs=1e-15) for recs in groups.values() for p in recs)
    struck = groups[(SPIKE_SYNC, SPIKE_UNITS[0])][SPIKE_REPLICA]
    assert struck["G"] == pytest.approx(_by_sync_unit(spike_on)[(SPIKE_SYNC, SPIKE_UNITS[0])][SPIKE_REPLICA]["G"],
                                        rel=1e-3)  # same spike, same size, both runs
    _assert_replicas_agree(spike_off)  # the damage is consistent: every replica inherits it
    # mean Δ ≈ (a − 10a)/3 = −3a and Nesterov moves the anchor by −1.26·Δ̄ (then momentum carries it on):
    # the struck block of the final model is about six times larger; with the penalty it is not
    on, off = spike_on.state_dict(), spike_off.state_dict()

    def norm(sd, prefix):
        keys = [k for k in sd if k.startswith(prefix)]
        assert keys, sorted(sd)
        return math.sqrt(math.fsum(float(sd[k].double().pow(2).sum()) for k in keys))

    assert norm(off, "blocks.0.") > 4.0 * norm(on, "blocks.0.")
    for prefix in ("root.", "blocks.1."):  # units the spike did not touch end up (nearly) the same
        assert norm(off, prefix) == pytest.approx(norm(on, prefix), rel=0.02)


@pytest.fixture(scope="module")
def nan_run(tmp_path_factory):
    """2×2: replica 1's parameters become inf after step 6, so step 7 computes a NaN loss; a tight φ. 16 steps:
    syncs at 4, 6, …, 14 and the closing one at 16."""
    cfg = small(method="edit", shards=2, replicas=2, steps=16, warmup_steps=2, sync_interval=2,
                penalty_clip_norm=0.1, spike_replica=1, spike_step=6,
                spike_scale=float("inf"), checksums=True, out=str(tmp_path_factory.mktemp("nan") / "run"))
    return launch(cfg)


def test_nan_replica_is_excluded_and_recovers(nan_run):
    groups = _by_sync_unit(nan_run)
    assert sorted({s for s, _ in groups}) == [4, 6, 8, 10, 12, 14, 16]
    for (step, unit), (r0, r1) in groups.items():
        assert not r0["outlier"]
        if step == 8:  # the first sync after the blow-up: an outlier even though E = 3 syncs had not passed
            assert r1["G"] is None and r1["z"] is None and r1["outlier"]  # non-finite → null in JSON
            assert (r0["weight"], r1["weight"], r0["skipped"]) == (1.0, 0.0, False)
        elif step < 8:
            assert not r1["outlier"]
        elif r1["outlier"]:  # kept out while its norm still stands out from its peer's (D11: above κ_s)
            assert max(p[1]["peer"] for (s, _), p in groups.items() if s == step) > nan_run.config.penalty.stay_ratio
    # back in: its inner optimizer restarted from scratch takes large steps for a few syncs (measured: 1.3–1.5×
    # its peer's norm at 10 and 12), then it is in line again and weighs in, at the closing sync too
    assert all(not groups[(step, u)][1]["outlier"] and groups[(step, u)][1]["weight"] > 0.3
               for step in (14, 16) for u in range(3))
    losses = dict(nan_run.train_losses(1))
    assert math.isnan(losses[7])  # the step computed with inf parameters
    # θ ← a at step 8 and the inner optimizer state forgotten: the replica trains normally again
    assert all(math.isfinite(losses[s]) for s in range(8, 16))
    assert losses[15] < losses[6]
    assert math.isfinite(nan_run.summary["final_val_loss"]) and math.isfinite(nan_run.summary["final_train_loss"])
    assert all(torch.isfinite(v).all() for v in nan_run.state_dict().values())
    _assert_replicas_agree(nan_run)


def test_tight_clip_norm_scales_the_aggregate(nan_run):
    phi = nan_run.config.penalty.clip_norm
    for (step, unit), recs in _by_sync_unit(nan_run).items():
        assert recs[0]["clip"] == recs[1]["clip"]  # one aggregate per unit, one factor
        clip = recs[0]["clip"]
        assert 0.0 < clip < 1.0
        if step == 8:  # only replica 0 contributes, with weight 1: the aggregate norm is exactly its G
            assert clip == pytest.approx(phi / (recs[0]["G"] + 1e-6), rel=1e-9)
        else:  # ‖Σ w_r Δ_r‖ ≤ Σ w_r G_r, so the factor is at least φ / Σ w_r G_r
            bound = phi / (math.fsum(p["weight"] * p["G"] for p in recs) + 1e-6)
            assert bound * (1 - 1e-9) <= clip


def test_spike_settings_are_validated():
    from edit_lab import ConfigError

    small(spike_units=(0, 2)).validate()
    for bad in ((3,), (-1,), (1, 1)):  # nano has units 0 (root), 1, 2
        with pytest.raises(ConfigError, match="spike_units"):
            small(spike_units=bad).validate()
    # a spike during warm-up would give the replicas different anchors at step W (here W = 2)
    small(method="edit", spike_replica=1, spike_step=2).validate()
    with pytest.raises(ConfigError, match="spike_step"):
        small(method="edit", spike_replica=1, spike_step=1).validate()


# ---------------------------------------------------------------- re-admission after a shared rise (D10)


@pytest.fixture(scope="module")
def resumed_with_larger_tau(tmp_path_factory):
    """1×2, τ = 2 for 20 steps (checkpointed), then resumed with τ = 6 up to step 44: every round holds three
    times the steps, so every replica's G rises for good. The per-unit rule of D10 (`penalty_peers` off)
    judging G itself (per_step off), as the reference does; the defaults would see no change at all: G/k
    does not rise, and G over the peer's G neither (checked offline below). The syncs at steps 26, 32 and 38
    are judged, and so is the closing sync of `finalize` (44), which ends a full τ round."""
    root = tmp_path_factory.mktemp("readmit")
    base = dict(method="edit", shards=1, replicas=2, warmup_steps=2, penalty_per_step=False, penalty_peers=False)
    first = launch(small(**base, steps=20, sync_interval=2, checkpoint_every=1, out=str(root / "a")))
    with pytest.warns(UserWarning, match="re-admitted") as caught:
        resumed = launch(small(**base, steps=44, sync_interval=6, resume=str(root / "a"), out=str(root / "b")))
    return first, resumed, [str(w.message) for w in caught if "re-admitted" in str(w.message)]


def test_a_rise_of_every_replica_is_readmitted_at_the_kth_sync(resumed_with_larger_tau):
    first, resumed, warned = resumed_with_larger_tau
    K = resumed.config.penalty.readmit_after
    assert K == 3 and not any(p["outlier"] for p in first.penalty)
    groups = _by_sync_unit(resumed)
    assert sorted({s for s, _ in groups}) == [26, 32, 38, 44]
    # 44 closes a full round of τ = 6: judged, as every full round's closing sync is
    assert all(p["threshold"] is not None and not p["closing"] for u in range(3) for p in groups[(44, u)])
    readmitted_units = set()
    for unit in range(3):
        flagged = [step for step in (26, 32, 38) if all(p["outlier"] for p in groups[(step, unit)])]
        assert all(p["steps"] == 6 for step in (26, 32, 38) for p in groups[(step, unit)])
        for step in flagged:  # every replica flagged: the unit is not updated
            assert all(not p["readmitted"] and p["skipped"] and p["weight"] == 0.0 for p in groups[(step, unit)])
        if flagged != [26, 32]:
            continue  # this unit's rise stayed under the noise floor at one of the syncs: nothing to re-admit
        last = groups[(38, unit)]  # the K-th flag in a row: accepted, though still above the threshold
        assert all(p["readmitted"] and not p["outlier"] and not p["skipped"] for p in last)
        assert all(p["z"] > p["threshold"] for p in last)
        assert math.fsum(p["weight"] for p in last) == pytest.approx(1.0, abs=1e-12)
        readmitted_units.add(unit)
    assert readmitted_units  # at least one unit was still flagged at the third sync (units 1 and 2 here)
    listed = resumed.summary["method_info"]["penalty_readmissions"]
    assert listed == [{"step": 38, "unit": u, "replica": r} for u in sorted(readmitted_units) for r in (0, 1)]
    assert len(warned) == 1 and f"re-admitted {len(listed)} outlier(s)" in warned[0]


def test_engine_decisions_are_the_replay_of_their_norms(resumed_with_larger_tau):
    from edit_lab.core.penalty import PenaltyConfig, replay

    first, resumed, _ = resumed_with_larger_tau
    # the resumed detectors start from the checkpoint of step 20; the closing syncs of `finalize` (steps 20
    # and 44) were not judged (threshold null): the replay leaves them out too
    records = [p for p in first.penalty + resumed.penalty if p["threshold"] is not None]
    for unit in range(3):
        mine = [[p for p in records if p["unit"] == unit and p["replica"] == r] for r in (0, 1)]
        norms = [[p["G"] for p in m] for m in mine]
        steps = [[p["steps"] for p in m] for m in mine]
        got = replay(resumed.config.penalty, norms, steps)
        for r in (0, 1):
            assert [(j.outlier, j.readmitted) for j in got[r]] == [(p["outlier"], p["readmitted"]) for p in mine[r]]
            assert [j.z for j in got[r]] == pytest.approx([p["z"] for p in mine[r]], rel=1e-9, abs=1e-12)
        # without re-admission the units flagged at the third sync would stay flagged for good; with the
        # defaults' per-step norms G/k the longer rounds are not even a rise
        locked = replay(PenaltyConfig(per_step=False, readmit_after=0, peers=False), norms, steps)
        if mine[0][-1]["readmitted"]:  # re-admitted at the third sync (38): without K, flagged there too
            assert [j.outlier for j in locked[0]][-3:] == [True, True, True]
        assert not any(j.outlier for r in (0, 1) for j in replay(PenaltyConfig(), norms, steps)[r])
        assert not any(j.outlier for r in (0, 1) for j in replay(PenaltyConfig(per_step=False), norms, steps)[r])



# ---------------------------------------------------------------- a finished replica beside flagged ones (issue 23)


@pytest.fixture(scope="module")
def finished_replica(tmp_path_factory):
    """A-EDiT 1×2 with replica 1 four times as slow: replica 0 runs its 40 steps first, then meets (flagged
    done) and takes part in replica 1's remaining syncs with k = 0 (never judged, so never flagged). Replica
    1's block 0 is spiked after its step 30, when replica 0 has long finished and with several syncs still to
    come, so the spike is judged. On the virtual clock: A-EDiT's rounds follow the cost model, not this machine
    (on the wall clock a loaded CI machine once gave replica 1 rounds of 25 steps and the spike's round was
    never judged alone). Judged by the
    per-unit rule (`penalty_peers` off, D10): against its peers (D11) a replica whose every peer trained no step
    in the round has no one to be compared with and keeps its last verdict, so the spike would not be judged."""
    cfg = small(method="aedit", shards=1, replicas=2, steps=40, warmup_steps=2, sync_period=0.15, min_sync_steps=1,
                penalty_peers=False,
                straggler_replicas=(1,), straggler_factor=4.0, spike_replica=1, spike_step=30,
                spike_units=SPIKE_UNITS, checksums=True, threads=1, clock="virtual",
                out=str(tmp_path_factory.mktemp("finished_replica") / "run"))
    return launch(cfg)


def _syncs_of_unit(run, unit):
    """[[record of replica 0, 1, …] per sync, in the order of the syncs]: the records of one sync, not of one
    step (a finished replica's records all carry its last step, and rank 0 writes them)."""
    recs = [p for p in run.penalty if p["unit"] == unit]
    R = run.config.replicas
    return [sorted(recs[i:i + R], key=lambda p: p["replica"]) for i in range(0, len(recs), R)]


def test_a_unit_whose_trained_replicas_are_all_flagged_is_skipped_beside_a_finished_one(finished_replica):
    run, unit = finished_replica, SPIKE_UNITS[0]
    syncs = _syncs_of_unit(run, unit)
    alone = [i for i, (r0, r1) in enumerate(syncs) if r0["steps"] == 0 and r1["steps"] > 0 and r1["outlier"]]
    assert alone, ("the spike was not judged while replica 0 had finished (the machine did not make replica 1 "
                   f"slow enough?): {[(p['steps'], p['outlier']) for recs in syncs for p in recs]}")
    for recs in syncs:  # skipped exactly when no replica that trained is admitted
        admitted = any(not p["outlier"] and p["steps"] > 0 for p in recs)
        assert all(p["skipped"] == (not admitted) for p in recs), recs
        if not admitted:
            assert all(p["weight"] == 0.0 for p in recs)
    # the skipped sync left the anchor where the previous sync put it: no momentum-only outer step
    # (checksums by sync, not by step: the replicas are at different steps; 1 shard, so rank = replica)
    sums = [[(e["data"]["theta"], e["data"]["anchor"]) for e in run.events_of("checksum", rank=r) if e["unit"] == unit]
            for r in (0, 1)]
    assert sums[0] == sums[1] and len(sums[1]) == len(syncs)  # both replicas agree at every sync
    assert all(theta == anchor for theta, anchor in sums[1])  # θ ← a
    for i in alone:
        assert sums[1][i] == sums[1][i - 1], i


# ---------------------------------------------------------------- a replica fed bad data (D11)

BAD_REPLICA, BAD_FROM = 0, 24


def _bad_cfg(out, **kw):
    """The capstone's 1 × 4 run (nano, τ 4, W 4, 44 steps, random pauses) at twice the learning rate, replica 0
    reading random bytes from step 24: the first sync whose round holds bad data is 28's, the closing one 44's
    (benchmarks/penalty_rule.py's `1x4-lr-double-bad`)."""
    from edit_course.lessons.capstone import base_config

    return base_config().replace(lr=0.006, corrupt_replica=BAD_REPLICA, corrupt_from_step=BAD_FROM,
                                 corrupt_mode="random", threads=1, out=str(out), **kw)


@pytest.fixture(scope="module")
def bad_data(tmp_path_factory):
    return launch(_bad_cfg(tmp_path_factory.mktemp("bad_data") / "run"))


def test_a_bad_replica_is_out_of_every_unit_from_the_second_sync_after_the_onset_and_at_the_closing_one(bad_data):
    groups = _by_sync_unit(bad_data)
    syncs = sorted({s for s, _ in groups})
    assert syncs == [8, 12, 16, 20, 24, 28, 32, 36, 40, 44]
    assert [groups[(s, 0)][0]["closing"] for s in syncs] == [False] * 10  # 44 ends a full τ round: judged
    onset = next(s for s in syncs if s > BAD_FROM)
    for (step, unit), recs in groups.items():
        bad = recs[BAD_REPLICA]
        if step > onset:  # every judged sync from the second after the onset, and the closing one (44)
            assert bad["outlier"] and bad["weight"] == 0.0, (step, unit)
            assert math.fsum(p["weight"] for p in recs) == pytest.approx(1.0, abs=1e-12)
        if step < onset:
            assert not any(p["outlier"] for p in recs), (step, unit)
    # the healthy replicas are never left out, and nothing needed re-admitting
    assert not any(p["outlier"] for p in bad_data.penalty if p["replica"] != BAD_REPLICA)
    assert not any(p["readmitted"] for p in bad_data.penalty)
    # what got it out: its norm per step stood out from its peers' in some unit at every judged sync
    for step in syncs[syncs.index(onset) + 1:-1]:
        assert max(groups[(step, u)][BAD_REPLICA]["peer"] for u in range(3)) > bad_data.config.penalty.stay_ratio


def test_engine_decisions_are_the_replay_of_their_norms_against_the_peers(bad_data):
    from edit_lab.core.penalty import PenaltyConfig, replay_units

    groups = _by_sync_unit(bad_data)
    syncs = sorted({s for s, _ in groups})
    R, U = 4, 3
    norms = [[[groups[(s, u)][r]["G"] for s in syncs] for u in range(U)] for r in range(R)]
    steps = [[groups[(s, 0)][r]["steps"] for s in syncs] for r in range(R)]
    got = replay_units(bad_data.config.penalty, norms, steps, [groups[(s, 0)][0]["closing"] for s in syncs])
    for r in range(R):
        for u in range(U):
            recs = [groups[(s, u)][r] for s in syncs]
            assert [j.outlier for j in got[r][u]] == [p["outlier"] for p in recs], (r, u)
            assert [j.peer for j in got[r][u]] == pytest.approx([p["peer"] for p in recs], rel=1e-12)
            assert [j.z for j in got[r][u]] == pytest.approx([p["z"] for p in recs], rel=1e-9, abs=1e-12)


def test_exclude_trouble_leaves_the_bad_replica_out_from_the_onset_whatever_the_detector_says(tmp_path):
    """The perfect detector benchmarks/penalty_rule.py measures against: anomaly filter off, the bad replica's
    weight is 0 from the first sync whose round holds bad data (28), the closing one included, and only there."""
    run = launch(_bad_cfg(tmp_path / "run", penalty_anomaly=False, exclude_trouble=True))
    for p in run.penalty:
        out = p["replica"] == BAD_REPLICA and p["step"] > BAD_FROM
        assert p["outlier"] == out and (p["weight"] == 0.0) == out, p


# ---------------------------------------------------------------- two replicas: a memory, not a majority (D15)


def _pair_cfg(out, **kw):
    """The capstone's run on 1 × 2 (nano, τ 4, W 4, 44 steps, random pauses): two ranks. With two replicas q_0 = 1/q_1, so only each replica's own memory of G/k says which one moved."""
    from edit_course.lessons.capstone import base_config

    return base_config().replace(replicas=2, threads=1, out=str(out), **kw)


@pytest.fixture(scope="module")
def pair_bad_data(tmp_path_factory):
    return launch(_pair_cfg(tmp_path_factory.mktemp("pair_bad") / "run", corrupt_replica=1,
                            corrupt_from_step=BAD_FROM, corrupt_mode="random"))


@pytest.fixture(scope="module")
def pair_spike(tmp_path_factory):
    return launch(_pair_cfg(tmp_path_factory.mktemp("pair_spike") / "run", spike_replica=1, spike_step=27,
                            spike_scale=10.0, spike_units=SPIKE_UNITS))


def _replayed(run):
    """The verdicts `penalty.replay_units` predicts from the run's own recorded norms, [r][u][sync]."""
    from edit_lab.core.penalty import PenaltyConfig, replay_units

    groups = _by_sync_unit(run)
    syncs = sorted({s for s, _ in groups})
    R, U = run.config.replicas, 3
    norms = [[[groups[(s, u)][r]["G"] for s in syncs] for u in range(U)] for r in range(R)]
    steps = [[groups[(s, 0)][r]["steps"] for s in syncs] for r in range(R)]
    closing = [groups[(s, 0)][0]["closing"] for s in syncs]
    return groups, syncs, replay_units(run.config.penalty, norms, steps, closing)


@pytest.mark.parametrize("which", ["pair_bad_data", "pair_spike"])
def test_a_1x2_run_takes_the_verdicts_the_replay_predicts_and_ends_with_the_healthy_replica(which, request):
    run = request.getfixturevalue(which)
    groups, syncs, got = _replayed(run)
    assert syncs == [8, 12, 16, 20, 24, 28, 32, 36, 40, 44]
    # the closing sync (44) ends a full τ round: judged like the others
    assert not any(groups[(44, u)][0]["closing"] for u in range(3)) and groups[(44, 0)][0]["threshold"] is not None
    for r in range(2):
        for u in range(3):
            recs = [groups[(s, u)][r] for s in syncs]
            assert [j.outlier for j in got[r][u]] == [p["outlier"] for p in recs], (which, r, u)
            assert [j.peer for j in got[r][u]] == pytest.approx([p["peer"] for p in recs], rel=1e-12)
    bad, healthy = 1, 0
    # the healthy replica is never left out, and the final model holds it in every unit
    assert not any(p["outlier"] for p in run.penalty if p["replica"] == healthy)
    assert all(groups[(44, u)][healthy]["weight"] > 0.0 for u in range(3))
    out = [s for s in syncs if groups[(s, 0)][bad]["outlier"]]
    if which == "pair_spike":  # out at the sync after its spike (28) and back at the next one
        assert out == [28]
        assert groups[(28, SPIKE_UNITS[0])][bad]["peer"] > 5.0
    else:
        # fed random bytes from step 24: its norm per step stands 1.3–1.8 × its peer's, but its own G/k never
        # rises δ_m σ above its own memory, so at two replicas D15 does not tell it apart (the replay says so
        # too) and keeps both: a limit, measured, of a rule that will not blame a replica it cannot single out
        assert out == []
        assert max(groups[(s, u)][bad]["peer"] for s in syncs[6:] for u in range(3)) > 1.3
