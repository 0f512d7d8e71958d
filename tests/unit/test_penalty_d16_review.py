"""An independent review of D16 (edit-method.md §4, §7): the pseudo-gradient penalty's edges, probed as an adversary.

Every series goes through the engine's own `judge_replicas` (directly, or through `penalty.replay_units`). Three probes
failed on the rule as first written (a stale flag beside non-finite peers froze every unit; an unarmed memory
vetoed a stay at a sync judging three; a replica with a NaN unit was released on its others): fixed, they pass.
"""

from __future__ import annotations

import math
import random

import pytest

from edit_lab.core.penalty import (
    Judged,
    PenaltyConfig,
    judge_replicas,
    needs_memory,
    outer_step_skipped,
    peer_ratios,
    readmitted_replicas,
    replay_units,
)

D = PenaltyConfig()
WIDTHS = [2, 3, 4, 5, 8]


def _noisy(seed: str, n: int, level: float = 5.0, noise: float = 0.05) -> list[float]:
    rng = random.Random(seed)
    return [level * (1.0 + noise * rng.gauss(0.0, 1.0)) for _ in range(n)]


def _healthy(R: int, U: int, n: int, tag: str = "") -> list[list[list[float]]]:
    return [[_noisy(f"{tag}{R}/{r}/{u}", n) for u in range(U)] for r in range(R)]


def _skipped(got, steps, u: int, i: int) -> bool:
    R = len(got)
    return outer_step_skipped([got[r][u][i].outlier for r in range(R)], [steps[r][i] for r in range(R)])


def _out(got, r: int, i: int) -> bool:
    return any(got[r][u][i].outlier for u in range(len(got[r])))


class Run:
    """judge_replicas sync by sync (as replay_units does), keeping the detectors to look at after each sync."""

    def __init__(self, config: PenaltyConfig, R: int, U: int) -> None:
        self.config = config
        self.dets = [[config.new_detector() for _ in range(U)] for _ in range(R)]
        self.memory = [[config.new_detector() for _ in range(U)] for _ in range(R)]

    def sync(self, norms, steps, judge=True, whole_replica=True) -> list[list[Judged]]:
        return judge_replicas(self.config, self.dets, norms, steps, judge=judge, whole_replica=whole_replica,
                           memory=self.memory)

    def states(self):
        return ([[d.state_dict() for d in row] for row in self.dets],
                [[d.state_dict() for d in row] for row in self.memory])


# ---------------------------------------------------------------------------------------------------------- healthy


@pytest.mark.parametrize("R", WIDTHS)
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("U", [1, 3])
def test_a_long_healthy_replay_flags_nobody_under_the_defaults(R, U, seed):
    n = 100
    norms = _healthy(R, U, n, tag=f"h{seed}")
    steps = [[5] * n for _ in range(R)]
    got = replay_units(D, norms, steps, closing=[False] * (n - 1) + [True])
    assert not any(got[r][u][i].outlier or got[r][u][i].readmitted for r in range(R) for u in range(U)
                   for i in range(n))


@pytest.mark.parametrize("R", WIDTHS)
def test_a_long_healthy_replay_with_rounds_of_unequal_length_flags_nobody(R):
    """A-EDiT-like: k varies 1..6 per replica and round, G ∝ k (G/k healthy with 5 % noise)."""
    n, U = 100, 2
    rng = random.Random(f"k{R}")
    steps = [[rng.randint(1, 6) for _ in range(n)] for _ in range(R)]
    base = _healthy(R, U, n, tag="k")
    norms = [[[base[r][u][i] * steps[r][i] for i in range(n)] for u in range(U)] for r in range(R)]
    got = replay_units(D, norms, steps)
    assert not any(got[r][u][i].outlier for r in range(R) for u in range(U) for i in range(n))


# ---------------------------------------------------------------------------------------------- every one flagged


@pytest.mark.parametrize("R", WIDTHS)
def test_every_replica_flagged_each_is_out_only_of_its_own_unit_and_nothing_is_learnt(R):
    """Replica r's unit r ×3 from sync 6 to 13, healed from 14. Released cells are `readmitted`, no unit is skipped,
    no detector or memory learns anything while its replica is flagged (D1), and all are back once healed."""
    U, n, on, off = R, 24, 6, 14
    norms = _healthy(R, U, n, tag="own")
    for r in range(R):
        for i in range(on, off):
            norms[r][r][i] *= 3.0
    run = Run(D, R, U)
    steps = [5] * R
    for i in range(n):
        before = run.states()
        got = run.sync([[norms[r][u][i] for u in range(U)] for r in range(R)], steps)
        after = run.states()
        for u in range(U):
            assert not outer_step_skipped([got[r][u].outlier for r in range(R)], steps), (i, u)
        for r in range(R):
            for u in range(U):
                j = got[r][u]
                if on <= i < off:
                    assert j.outlier == (u == r), (i, r, u)
                    assert j.readmitted == (u != r), (i, r, u)
                    for kind in (0, 1):  # detectors, memory: nothing learnt (streak aside)
                        b, a = dict(before[kind][r][u]), dict(after[kind][r][u])
                        b.pop("streak"), a.pop("streak")
                        assert a == b, (i, r, u, kind)
                elif i >= off + 1:
                    assert not j.outlier and not j.readmitted, (i, r, u)


@pytest.mark.parametrize("R", WIDTHS)
def test_the_closing_sync_after_an_all_flagged_sync_keeps_the_released_verdicts_and_freezes_no_unit(R):
    U, n = R, 12
    norms = _healthy(R, U, n, tag="close")
    for r in range(R):
        for i in range(6, n):
            norms[r][r][i] *= 3.0
    steps = [[5] * (n - 1) + [2] for _ in range(R)]  # a short closing round (not judged)
    got = replay_units(D, norms, steps, closing=[False] * (n - 1) + [True])
    for r in range(R):
        for u in range(U):
            assert got[r][u][-1].outlier == got[r][u][-2].outlier == (u == r), (r, u)
    for u in range(U):
        assert not _skipped(got, steps, u, n - 1)


@pytest.mark.parametrize("R", WIDTHS)
def test_a_nan_unit_on_every_replica_freezes_every_unit_for_that_sync_only(R):
    """Every replica's training broke (a NaN on unit 0 of each): none is released (`_release` never frees a replica
    with a non-finite norm on any unit), so every unit's anchor waits one sync; θ ← a, and everyone is back at
    the next sync."""
    n, U = 10, 2
    norms = _healthy(R, U, n, tag="nanall")
    for r in range(R):
        norms[r][0][7] = math.nan
    steps = [[5] * n for _ in range(R)]
    got = replay_units(D, norms, steps)
    assert _skipped(got, steps, 0, 7) and _skipped(got, steps, 1, 7)
    assert not any(got[r][u][7].readmitted for r in range(R) for u in range(U))
    assert not any(got[r][u][i].outlier for r in range(R) for u in range(U) for i in (8, 9))  # back at once


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("R", WIDTHS)
def test_a_non_finite_norm_on_one_replica_excludes_it_for_that_sync_only_and_is_never_learnt(R, value):
    n, U = 12, 3
    norms = _healthy(R, U, n, tag="nf")
    norms[0][1][8] = value
    run = Run(D, R, U)
    for i in range(n):
        before = run.states()
        got = run.sync([[norms[r][u][i] for u in range(U)] for r in range(R)], [5] * R)
        if i == 8:
            assert [got[0][u].outlier for u in range(U)] == [True] * U
            assert not any(got[0][u].readmitted for u in range(U))
            assert not any(got[r][u].outlier for r in range(1, R) for u in range(U))
            assert run.states()[0][0][1]["count"] == before[0][0][1]["count"]
        else:
            assert not any(got[r][u].outlier for r in range(R) for u in range(U)), i
    assert all(math.isfinite(d.mean) and math.isfinite(d.m2) for row in run.dets + run.memory for d in row)


def test_a_non_finite_norm_on_every_unit_of_every_replica_freezes_that_sync_only():
    R, U, n = 4, 2, 10
    norms = _healthy(R, U, n, tag="allnan")
    for r in range(R):
        for u in range(U):
            norms[r][u][6] = math.nan if r % 2 else math.inf
    steps = [[5] * n for _ in range(R)]
    got = replay_units(D, norms, steps)
    assert all(_skipped(got, steps, u, 6) for u in range(U))
    assert not any(got[r][u][6].readmitted for r in range(R) for u in range(U))
    assert not any(got[r][u][i].outlier for r in range(R) for u in range(U) for i in range(n) if i != 6)


@pytest.mark.parametrize("R", [2, 4])
def test_a_replica_whose_only_finite_peers_are_gone_is_not_locked_out_by_a_stale_flag(R):
    n, U = 16, 2
    norms = _healthy(R, U, n, tag="stale")
    for u in range(U):
        norms[R - 1][u][8] *= 10.0  # a spike: caught at sync 8
        for r in range(R - 1):
            for i in range(9, n):
                norms[r][u][i] = math.nan  # every other replica's norm non-finite from sync 9 on
    steps = [[5] * n for _ in range(R)]
    got = replay_units(D, norms, steps)
    assert _out(got, R - 1, 8)
    frozen = [i for i in range(9, n) if all(_skipped(got, steps, u, i) for u in range(U))]
    assert len(frozen) <= 1, frozen


# ---------------------------------------------------------------------------------------------------------- k = 0


@pytest.mark.parametrize("R", [3, 4, 5, 8])
def test_finished_replicas_leave_the_rest_judged_by_the_width_judged(R):
    """Every replica but the first two (R = 3: the first) trained no step at the last sync: nobody flagged, the
    memory asked on the unit (2 or 3 judged), a replica with k = 0 never readmitted nor counted."""
    n, U = 14, 2
    norms = _healthy(R, U, n, tag="k0")
    steps = [[5] * n for _ in range(R)]
    for r in range(2, R):
        steps[r][-1] = 0
        for u in range(U):
            norms[r][u][-1] = 0.0
    got = replay_units(D, norms, steps)
    assert not any(got[r][u][i].outlier or got[r][u][i].readmitted for r in range(R) for u in range(U)
                   for i in range(n))
    assert all(got[r][u][-1].judged is None for r in range(2, R) for u in range(U))
    assert needs_memory(D, 2) and needs_memory(D, 3) and not needs_memory(D, 4)


@pytest.mark.parametrize("R", [2, 4, 8])
@pytest.mark.parametrize("was_out", [False, True])
def test_all_but_one_finished_the_one_left_keeps_its_verdict_and_learns_nothing(R, was_out):
    n, U = 10, 2
    norms = _healthy(R, U, n, tag="one")
    if was_out:
        for u in range(U):
            norms[0][u][8] *= 10.0
    run = Run(D, R, U)
    for i in range(9):
        got = run.sync([[norms[r][u][i] for u in range(U)] for r in range(R)], [5] * R)
    assert _out([[[j] for j in row] for row in got], 0, 0) == was_out
    before = run.states()
    got = run.sync([[norms[0][u][9] for u in range(U)]] + [[0.0] * U] * (R - 1), [5] + [0] * (R - 1))
    assert [got[0][u].outlier for u in range(U)] == [was_out] * U
    assert not any(got[r][u].outlier or got[r][u].readmitted for r in range(R) for u in range(U) if r or not was_out)
    after = run.states()
    assert [[d["count"] for d in row] for row in after[0]] == [[d["count"] for d in row] for row in before[0]]
    assert [[d["count"] for d in row] for row in after[1]] == [[d["count"] for d in row] for row in before[1]]


def test_every_replica_finished_nobody_is_judged():
    R, U = 4, 2
    run = Run(D, R, U)
    got = run.sync([[0.0] * U] * R, [0] * R)
    assert not any(j.outlier or j.readmitted or j.judged is not None for row in got for j in row)


def test_a_flagged_replica_whose_peers_all_finished_for_several_syncs_keeps_the_anchor_frozen_as_documented():
    """Documented (a replica with no peer to compare with keeps its last verdict, never released): the anchor of
    every unit is then frozen while only the flagged replica trains. In A-EDiT this is one closing meeting; a
    replay with k = 0 on several syncs freezes it for each of them."""
    n, U = 14, 2
    norms = _healthy(2, U, n, tag="fin")
    steps = [[5] * n, [5] * 10 + [0] * 4]
    for u in range(U):
        norms[0][u][9] *= 10.0
    got = replay_units(D, norms, steps)
    assert _out(got, 0, 9)
    assert all(_skipped(got, steps, u, i) for u in range(U) for i in range(10, n))
    assert not any(got[0][u][i].readmitted for u in range(U) for i in range(10, n))


# -------------------------------------------------------------------------------------------- bad from sync 0


@pytest.mark.parametrize("factor", [2.0, 3.0])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_replica_bad_from_sync_0_at_r4_is_out_while_bad_and_back_once_healed(factor, seed):
    R, U, n, heal = 4, 2, 40, 20
    norms = _healthy(R, U, n, tag=f"b{seed}")
    for u in range(U):
        for i in range(heal):
            norms[0][u][i] *= factor
    got = replay_units(D, norms, [[5] * n for _ in range(R)])
    assert [_out(got, 0, i) for i in range(n)] == [True] * heal + [False] * (n - heal)
    assert not any(_out(got, r, i) for r in range(1, R) for i in range(n))


@pytest.mark.parametrize("narrow", ["finished", "nan"])
def test_a_replica_bad_from_sync_0_stays_out_at_a_sync_that_judges_only_three(narrow):
    R, U, n = 4, 2, 20
    norms = _healthy(R, U, n, tag="narrow")
    steps = [[5] * n for _ in range(R)]
    for u in range(U):
        for i in range(n):
            norms[0][u][i] *= 2.0
        if narrow == "finished":
            norms[3][u][-1], steps[3][-1] = 0.0, 0
        else:
            norms[3][u][-1] = math.nan
    got = replay_units(D, norms, steps)
    assert all(_out(got, 0, i) for i in range(n - 1))  # out while 4 are judged (κ_m)
    assert not any(_out(got, r, i) for r in range(1, R) for i in range(n) if (r, i) != (3, n - 1))
    assert _out(got, 0, n - 1)  # fails: admitted at the sync that judges three


# ------------------------------------------------------------------------------------------------- R = 1, units


def test_a_single_replica_uses_d10_and_freezes_at_most_k_minus_1_syncs():
    """R = 1: no peers, D10's own-history rule; a lasting ×2 is flagged 2 syncs (anchor frozen) and re-admitted at
    the K-th (every replica flagged); a NaN is flagged and never re-admitted. No memory needed."""
    n = 16
    g = _noisy("single", n)
    norms = [[[v * (2.0 if i >= 8 else 1.0) for i, v in enumerate(g)]]]
    got = replay_units(D, norms, [[5] * n])
    out = [got[0][0][i].outlier for i in range(n)]
    assert out == [False] * 8 + [True, True] + [False] * 6
    assert got[0][0][10].readmitted
    got = replay_units(D, [[[5.0] * 6 + [math.nan] * 4]], [[5] * 10])
    assert [j.outlier for j in got[0][0]] == [False] * 6 + [True] * 4 and not any(j.readmitted for j in got[0][0])
    dets = [[D.new_detector()]]
    judge_replicas(D, dets, [[1.0]], [1], memory=None)


@pytest.mark.parametrize("R", WIDTHS)
def test_judged_alone_each_unit_decides_as_if_it_were_the_only_unit(R):
    """whole_replica=False with finite norms and every replica trained: unit u's verdicts over U units equal those of
    a replay of unit u alone (nothing crosses units)."""
    n, U = 30, 3
    norms = _healthy(R, U, n, tag="sep")
    rng = random.Random(f"sep{R}")
    for _ in range(12):
        r, u, i = rng.randrange(R), rng.randrange(U), rng.randrange(n)
        norms[r][u][i] *= rng.choice([0.3, 1.7, 2.5, 10.0])
    steps = [[5] * n for _ in range(R)]
    together = replay_units(D, norms, steps, whole_replica=False)
    for u in range(U):
        alone = replay_units(D, [[norms[r][u]] for r in range(R)], steps, whole_replica=False)
        assert [[j.outlier for j in alone[r][0]] for r in range(R)] == \
               [[j.outlier for j in together[r][u]] for r in range(R)], u


@pytest.mark.parametrize("R", [2, 4, 8])
def test_judged_alone_a_bad_unit_is_out_alone_and_a_whole_replica_is_out_everywhere(R):
    n, U = 20, 3
    norms = _healthy(R, U, n, tag="wr")
    for i in range(10, 14):
        norms[0][2][i] *= 4.0
    steps = [[5] * n for _ in range(R)]
    alone = replay_units(D, norms, steps, whole_replica=False)
    whole = replay_units(D, norms, steps)
    assert [alone[0][2][i].outlier for i in range(10, 14)] == [True] * 4
    assert not any(alone[0][u][i].outlier for u in (0, 1) for i in range(n))
    assert all(whole[0][u][i].outlier for u in range(U) for i in range(10, 14))
    assert not any(_out(alone, r, i) or _out(whole, r, i) for r in range(1, R) for i in range(n))


# ------------------------------------------------------------------------------------------------- peers off (D10)


def _d10_reference(config, dets, norms, steps):
    """D10 as edit-method.md §4 states it: each unit alone, observe G/k, count flags, re-admit after K."""
    R, U = len(norms), len(norms[0])
    x = [[config.judged_norm(float(norms[r][u]), int(steps[r])) for u in range(U)] for r in range(R)]
    out = [[None] * U for _ in range(R)]
    for u in range(U):
        ratios = peer_ratios([x[r][u] for r in range(R)])
        cells = []
        for r in range(R):
            d, v = dets[r][u], x[r][u]
            if v is None:
                cells.append([False, False, None, 0.0, math.inf, math.inf, math.nan, math.nan, ratios[r], d.streak])
                continue
            limit, mean, std = d.flag_limit(), d.mu(), d.std()
            o, z, thr = d.observe(v)
            cells.append([o, False, v, z, thr, limit, mean, std, ratios[r], d.count_flag(o)])
        due = readmitted_replicas([c[0] for c in cells], [c[9] if c[2] is not None else 0 for c in cells],
                                  [c[2] for c in cells], config.readmit_after, config.min_rel_std)
        for r in range(R):
            if due[r]:
                dets[r][u].restart(cells[r][2])
                cells[r][0], cells[r][1], cells[r][9] = False, True, 0
            out[r][u] = Judged(*cells[r])
    return out


@pytest.mark.parametrize("R", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("whole", [True, False])
def test_peers_off_is_d10_unchanged_and_ignores_memory_and_whole_replica(R, whole):
    config = PenaltyConfig(peers=False)
    n, U = 40, 2
    rng = random.Random(f"d10{R}")
    norms = _healthy(R, U, n, tag="d10")
    steps = [[rng.choice([0, 3, 5, 5, 5]) for _ in range(n)] for _ in range(R)]
    for i in range(20, n):  # a shared ×1.5 rise, one replica ×2 for good, a few NaNs
        for r in range(R):
            for u in range(U):
                norms[r][u][i] *= 1.5 * (2.0 if r == 0 and i > 30 else 1.0)
    for _ in range(3):
        norms[rng.randrange(R)][rng.randrange(U)][rng.randrange(n)] = math.nan
    mine = [[config.new_detector() for _ in range(U)] for _ in range(R)]
    run = Run(config, R, U)
    memory_before = [[d.state_dict() for d in row] for row in run.memory]
    for i in range(n):
        g = [[norms[r][u][i] * max(steps[r][i], 1) for u in range(U)] for r in range(R)]
        k = [steps[r][i] for r in range(R)]
        assert repr(run.sync(g, k, whole_replica=whole)) == repr(_d10_reference(config, mine, g, k)), i
    assert [[d.state_dict() for d in row] for row in run.memory] == memory_before


# ------------------------------------------------------------------------------------------------- config edges


@pytest.mark.parametrize("R", [4, 8])
def test_majority_ratio_0_disables_the_majority_and_an_onset_before_arming_is_learnt(R):
    n, U = 20, 2
    norms = _healthy(R, U, n, tag="m0")
    for u in range(U):
        for i in range(n):
            norms[0][u][i] *= 2.0
    steps = [[5] * n for _ in range(R)]
    assert all(_out(replay_units(D, norms, steps), 0, i) for i in range(n))
    off = replay_units(PenaltyConfig(majority_ratio=0.0), norms, steps)
    assert not any(_out(off, r, i) for r in range(R) for i in range(n))


def test_memory_threshold_0_keeps_no_memory_and_needs_none():
    c = PenaltyConfig(memory_threshold=0.0)
    c.validate()
    assert not needs_memory(c, 2) and not needs_memory(c, 3)
    for R in (2, 3, 4):
        dets = [[c.new_detector()] for _ in range(R)]
        for i in range(6):
            judge_replicas(c, dets, [[5.0 + r * 0.1] for r in range(R)], [5] * R, memory=None)
    run = Run(c, 2, 1)
    for i in range(6):
        run.sync([[5.0], [5.2]], [5, 5])
    assert all(d.count == 0 for row in run.memory for d in row)


@pytest.mark.parametrize("R", WIDTHS)
def test_enter_ratio_0_still_freezes_no_unit_when_every_replica_is_flagged(R):
    """enter_ratio 0 (a detector's flag enters below q = 1: the only way, with finite norms, that every replica
    stands out on one unit and the least is admitted). Fuzzed: no unit with a finite norm is ever skipped."""
    for config in (PenaltyConfig(enter_ratio=0.0), PenaltyConfig(enter_ratio=0.0, memory_threshold=0.0,
                                                                 majority_ratio=0.0, min_rel_std=0.0)):
        config.validate()
        for seed in range(4):
            rng = random.Random(f"e0{R}/{seed}")
            n, U = 40, 2
            norms = [[[5.0 * rng.choice([1.0, 1.0, 1.0, 0.5, 2.0, 3.0]) * (1 + 0.01 * rng.random()) for _ in range(n)]
                      for _ in range(U)] for _ in range(R)]
            steps = [[5] * n for _ in range(R)]
            got = replay_units(config, norms, steps)
            for i in range(n):
                for u in range(U):
                    assert not _skipped(got, steps, u, i), (config, seed, i, u)


# ------------------------------------------------------------------------------------------------- fuzz: invariants


def _fuzz_case(seed: int):
    rng = random.Random(f"fuzz{seed}")
    R, U, n = rng.choice(WIDTHS), rng.choice([1, 2, 3]), 40
    norms = _healthy(R, U, n, tag=f"f{seed}")
    steps = [[5] * n for _ in range(R)]
    for _ in range(rng.randint(0, 8)):  # episodes of ×1.5..×10 on a replica's unit
        r, u, a = rng.randrange(R), rng.randrange(U), rng.randrange(n)
        f = rng.choice([1.5, 2.0, 3.0, 10.0])
        for i in range(a, min(n, a + rng.randint(1, 12))):
            norms[r][u][i] *= f
    for _ in range(rng.randint(0, 4)):
        norms[rng.randrange(R)][rng.randrange(U)][rng.randrange(n)] = rng.choice([math.nan, math.inf])
    for _ in range(rng.randint(0, 4)):
        r, i = rng.randrange(R), rng.randrange(n)
        steps[r][i] = 0
        for u in range(U):
            norms[r][u][i] = 0.0
    config = rng.choice([D, PenaltyConfig(enter_ratio=0.0), PenaltyConfig(majority_ratio=0.0),
                         PenaltyConfig(memory_threshold=0.0), PenaltyConfig(stay_ratio=0.0)])
    return config, norms, steps, rng.random() < 0.5


@pytest.mark.parametrize("seed", range(40))
def test_fuzzed_runs_keep_the_d16_invariants(seed):
    """On random runs: the same inputs give the same decisions and detector states; a released cell is never a
    non-finite norm nor flagged; no detector or memory learns a flagged or released value (D1); a unit where two
    replicas or more have a finite norm is never skipped at a judged sync; whole_replica leaves a flagged replica
    out of every unit unless every replica that trained was flagged."""
    config, norms, steps, whole = _fuzz_case(seed)
    R, U, n = len(norms), len(norms[0]), len(norms[0][0])
    runs = [Run(config, R, U), Run(config, R, U)]
    for i in range(n):
        g = [[norms[r][u][i] for u in range(U)] for r in range(R)]
        k = [steps[r][i] for r in range(R)]
        before = runs[0].states()
        got, again = (run.sync(g, k, whole_replica=whole) for run in runs)
        assert repr(got) == repr(again) and runs[0].states() == runs[1].states(), i
        after = runs[0].states()
        finite = [[k[r] > 0 and math.isfinite(g[r][u]) for u in range(U)] for r in range(R)]
        for r in range(R):
            for u in range(U):
                j = got[r][u]
                if j.readmitted:
                    assert not j.outlier and finite[r][u], (i, r, u)
                learnt = [after[kind][r][u]["count"] - before[kind][r][u]["count"] for kind in (0, 1)]
                if j.outlier or j.readmitted or not finite[r][u]:
                    assert learnt == [0, 0], (i, r, u, j)
        for u in range(U):
            if sum(finite[r][u] for r in range(R)) >= 2:
                assert not outer_step_skipped([got[r][u].outlier for r in range(R)], k), (i, u)
        trained = [r for r in range(R) if k[r] > 0]
        if whole and not all(_out([[[c] for c in row] for row in got], r, 0) for r in trained):
            for r in trained:
                assert len({got[r][u].outlier for u in range(U)}) == 1, (i, r)


def test_without_an_entry_ratio_a_unit_every_replica_stands_out_on_waits_and_nothing_is_learnt():
    """With enter_ratio 0 (D11 as first chosen) the detector alone enters: replica 0 (q learnt 0.3) enters on unit 0
    at q 0.667 while replica 1, out at sync 10, stays there at q 1.5. Every replica stands out on unit 0 itself:
    nobody is released there (its anchor waits this sync), unit 1 admits both (neither stands out on it), and
    replica 0's detector learns nothing at this sync (D1)."""
    config, n = PenaltyConfig(enter_ratio=0.0), 14
    x0 = [[1.5 * (1 + 0.01 * (i % 3)) for i in range(n)] for _ in range(2)]
    x1 = [[5.0 * (1 + 0.01 * (i % 4)) for i in range(n)] for _ in range(2)]
    x1[1][10] = 50.0
    x0[0][11], x1[0][11] = 5.0, 7.5
    run = Run(config, 2, 2)
    for i in range(n):
        before = run.states()
        got = run.sync([[x0[u][i] for u in range(2)], [x1[u][i] for u in range(2)]], [1, 1])
        if i == 11:
            assert [(got[r][u].outlier, got[r][u].readmitted) for r in range(2) for u in range(2)] == \
                [(True, False), (False, True), (True, False), (False, True)]
            assert run.states()[0][0][0]["count"] == before[0][0][0]["count"]
        elif i != 10:
            assert not any(j.outlier or j.readmitted for row in got for j in row), i


# ------------------------------------------------------------------------------------------------- decided (F3)


def test_a_replica_with_a_non_finite_unit_is_not_released_on_its_other_units():
    R, U, n = 2, 2, 12
    norms = _healthy(R, U, n, tag="nanrel")
    norms[1][1][8] *= 10.0
    norms[1][1][9] *= 10.0  # replica 1 out at 8, stays at 9 (its memory says it moved)
    norms[0][0][9] = math.nan  # replica 0 non-finite on unit 0 at 9: every replica flagged
    got = replay_units(D, norms, [[5] * n for _ in range(R)])
    assert _out(got, 1, 9)
    assert got[0][0][9].outlier and got[0][1][9].outlier, (got[0][1][9].readmitted,)
