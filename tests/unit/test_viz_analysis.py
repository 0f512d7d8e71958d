"""analysis.py on a synthetic run whose every duration is known (see viz_fake_run.py)."""

from __future__ import annotations

import json
import math

import pytest

from edit_lab.records import analysis as A
from edit_lab.records.run import Run

from . import viz_fake_run as F


@pytest.fixture(scope="module")
def fake(tmp_path_factory):
    return Run(F.make_fake_run(tmp_path_factory.mktemp("fake") / "run"))


def test_events_table_has_every_event_and_the_schema(fake):
    df = A.events_table(fake)
    assert len(df) == len(fake.events)
    assert list(df.columns) == A.EVENT_COLUMNS
    assert set(df["rank"]) == {0, 1, 2, 3}
    # waits are the rank blocked, not a collective; compute has no group
    assert not df[df["kind"] == "wait"]["comm"].any()
    assert not df[df["kind"] == "compute_fwd"]["comm"].any()
    assert df[df["kind"] == "all_gather"]["comm"].all()
    assert df.loc[(df["kind"] == "compute_fwd") & (df["unit"] == 0), "part"].eq("embed").all()
    assert str(df["unit"].dtype) == "Int64" and df["unit"].isna().sum() == (df["kind"].isin(
        ["optimizer", "straggle", "sync_decisions", "eval", "all_reduce", "mystery"])).sum()


def test_filters_steps_ranks_kinds(fake):
    df = A.events_table(fake, steps=(1, 2), ranks=[0], kinds=["all_gather", "wait"])
    assert set(df["step"]) == {1, 2} and set(df["rank"]) == {0}
    assert (df["kind"] == "all_gather").sum() == 2 * F.UNITS
    assert (df["kind"] == "wait").sum() == 2 * F.UNITS  # reduce-scatter waits only (no sync in steps 1-2)
    assert len(A.events_table(fake, steps=3, ranks=[1], kinds=["sync_reduce"])) == F.UNITS


def test_exposed_is_clipped_and_legacy_events_count_as_blocking(fake):
    df = A.events_table(fake, ranks=[0])
    ag = df[df["kind"] == "all_gather"]
    assert ag["exposed"].tolist() == pytest.approx([F.AG] * len(ag))  # recorded AG + 0.1 ms, clipped
    assert ag["hidden"].abs().max() < 1e-12
    legacy = df[df["kind"] == "all_reduce"].iloc[0]
    assert legacy["exposed"] == pytest.approx(0.003) and legacy["hidden"] == pytest.approx(0.0)
    # a reduce-scatter is issued with its unit's backward compute (5 ms), then the rank idles, then waits
    rs = df[df["kind"] == "reduce_scatter"]
    assert rs["hidden"].tolist() == pytest.approx([F.BWD] * len(rs))
    assert rs["exposed"].tolist() == pytest.approx([F.RS_EXP] * len(rs))
    assert rs["other"].tolist() == pytest.approx([F.RS - F.BWD - F.RS_EXP] * len(rs))
    # the sync-group all-reduces have no compute in their window: nothing of them is hidden
    sr = df[df["kind"] == "sync_reduce"]
    assert sr["hidden"].abs().max() < 1e-12 and sr["exposed"].tolist() == pytest.approx([F.SR_EXP] * len(sr))
    assert rs["overlapped"].all() and not ag["overlapped"].any()


def test_comm_split_adds_up(fake):
    split = A.comm_split(fake, by=("rank", "kind"))
    assert (split["hidden_s"] + split["exposed_s"] + split["other_s"]).tolist() == pytest.approx(
        split["total_s"].tolist())
    r0 = split[split["rank"] == 0].set_index("kind")
    n_steps = F.STEPS
    assert r0.loc["all_gather", "count"] == F.UNITS * n_steps
    assert r0.loc["reduce_scatter", "hidden_s"] == pytest.approx(F.UNITS * n_steps * F.BWD)
    assert r0.loc["reduce_scatter", "hidden_frac"] == pytest.approx(F.BWD / F.RS)
    assert r0.loc["sync_reduce", "exposed_s"] == pytest.approx(len(F.SYNC_STEPS) * F.UNITS * F.SR_EXP)
    assert r0.loc["grad_all_reduce", "bytes"] == F.UNITS * 1000
    # the exposed part of async collectives is what the `wait` events measure
    df = A.events_table(fake, ranks=[0])
    waits = df[df["kind"] == "wait"].groupby("on")["duration"].sum()
    for kind in ("reduce_scatter", "grad_all_reduce", "sync_reduce"):
        assert waits[kind] == pytest.approx(r0.loc[kind, "exposed_s"])
    # the fake's collectives of one rank never overlap one another, so rank totals equal the span sums
    tot = A.comm_totals(fake)
    assert tot["total_s"] == pytest.approx(split["total_s"].sum())
    assert tot["hidden_s"] + tot["exposed_s"] + tot["other_s"] == pytest.approx(tot["total_s"])
    assert tot["hidden_s"] == pytest.approx(split["hidden_s"].sum())


def test_comm_split_of_nothing_is_an_empty_table(fake):
    empty = A.comm_split(fake, steps=(100, 200))
    assert empty.empty and "hidden_s" in empty.columns


def test_replica_table_and_capacity_bound(fake):
    t = A.replica_table(fake).set_index("replica")
    blocked = F.UNITS * F.GAR_EXP + F.DEC + F.UNITS * F.SR_EXP  # step 0 all-reduce + the sync at step 3
    tokens = F.TOKENS * F.S * F.STEPS
    for rep in range(F.R):
        end = F.step_end(F.STEPS - 1, rep)
        assert t.loc[rep, "tokens"] == tokens
        assert t.loc[rep, "blocked_s"] == pytest.approx(blocked)
        assert t.loc[rep, "tokens_per_s"] == pytest.approx(tokens / end)
        assert t.loc[rep, "own_tokens_per_s"] == pytest.approx(tokens / (end - blocked))
    assert t.loc[1, "straggle_s"] == pytest.approx(F.STRAGGLE) and t.loc[0, "straggle_s"] == 0
    bound = A.capacity_bound(fake)
    assert bound == pytest.approx(sum(tokens / (F.step_end(F.STEPS - 1, r) - blocked) for r in range(F.R)))
    assert bound > fake.summary["tokens_per_s"]  # nobody can beat the bound


def test_rounds_from_the_run_and_from_method_info(fake, tmp_path):
    rt = A.rounds_table(fake)
    for rep in range(F.R):
        d = rt[rt["replica"] == rep]
        # step 0 synchronous (round of 1), anchor at 1, sync at 3, final sync at 4
        assert d["local_steps"].tolist() == [1, 2, 1]
        assert d["start_step"].tolist() == [0, 1, 3]
    # A-EDiT reports its rounds (per round, per replica), counted from the end of warm-up (W = 1 here)
    other = Run(F.make_fake_run(tmp_path / "info", method_info={"local_steps_per_round": [[2, 3], [1, 1]]}))
    rt2 = A.rounds_table(other)
    assert rt2[rt2["replica"] == 1]["local_steps"].tolist() == [3, 1]
    assert rt2[rt2["replica"] == 0]["end_step"].tolist() == [3, 4]


def test_penalty_table(fake):
    p = A.penalty_table(fake)
    assert len(p) == len(F.SYNC_STEPS) * F.UNITS * F.R
    assert p["sync"].tolist()[:F.UNITS * F.R] == [0] * (F.UNITS * F.R)
    assert p["threshold"][p["step"] == 3].isna().all()  # null in JSON (a non-finite threshold) -> NaN
    out = p[p["outlier"]]
    assert out[["step", "unit", "replica"]].values.tolist() == [[4, 1, 1]]
    w = p.groupby(["step", "unit"])["weight"].sum()
    assert w.tolist() == pytest.approx([1.0] * len(w))


def test_eval_table_matches_eval_spans_by_order(fake):
    ev = A.eval_table(fake)
    assert ev["step"].tolist() == [2, 4]
    assert ev["t"].tolist() == pytest.approx([1.7, 4.0 + F.DEC + F.UNITS * (F.SR + F.OUTER) + 0.1])


def test_metrics_and_memory_tables(fake):
    m = A.metrics_table(fake)
    assert len(m) == F.STEPS * F.R and m["tokens"].sum() == fake.summary["tokens"]
    mem = A.memory_table(fake)
    assert mem["rank"].tolist() == [0, 1, 2, 3] and mem["replica"].tolist() == [0, 0, 1, 1]
    assert mem["params"].tolist() == [1000] * 4


def test_sync_window(fake):
    assert A.sync_window(fake) == (2, 3)


def test_compare_and_labels(fake, tmp_path):
    twin = Run(F.make_fake_run(tmp_path / "twin"))
    table = A.compare([fake, twin])
    assert len(table) == 2 and table["label"].nunique() == 2  # clashing labels get the directory name
    row = table.iloc[0]
    assert row["method"] == "edit" and row["syncs"] == len(F.SYNC_STEPS)
    assert row["hidden_s"] + row["exposed_s"] + row["other_s"] == pytest.approx(row["comm_s"])
    assert 0 < row["efficiency"] < 1
    assert A.run_labels([fake], ["mine"]) == ["mine"]
    with pytest.raises(ValueError):
        A.run_labels([fake], ["a", "b"])
    assert A.run_label(fake) == "edit 2×2"
    assert not math.isnan(A.compare(str(fake.path))["capacity_tokens_per_s"].iloc[0])


def test_budget_table(fake):
    row = A.budget_table({"fake": fake}).loc["fake"]
    assert row["steps"] == [F.STEPS, F.STEPS] and row["fast_step_share"] == pytest.approx(0.5)
    assert row["tokens"] == fake.summary["tokens"]
    # replica 0's weights: 0.5 on every unit at step 3; at step 4 0.5, 1.0 (replica 1 flagged on unit 1), 0.5
    assert row["fast_weight"] == pytest.approx((6 * 0.5 + 0.5) / 6)
    # replica 1's round that ended at step 4 (one step), rejected on one unit of three
    ended = A.rounds_table(fake)
    k = int(ended[(ended["replica"] == 1) & (ended["end_step"] == 4)]["local_steps"].iloc[0])
    assert row["discarded_tokens"] == pytest.approx(k * F.S * fake.config.data.batch_size * fake.config.data.seq_len / F.UNITS)


# ---------------------------------------------------------------- time-budget runs: the steps they trained (issue 23)


def _budget_run(path) -> Run:
    """The fake run as a time-budget run whose config says `steps=2` (ignored with a budget): it trained 4
    steps on replica 1 and 3 on replica 0 (replica 0's step 3 row dropped: it stopped mid-round)."""
    path = F.make_fake_run(path)
    cfg = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**cfg, "time_budget": 1.0, "steps": 2}))
    rows = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]
    rows = [m for m in rows if not (m["kind"] == "train" and m["replica"] == 0 and m["step"] == 3)]
    (path / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in rows))
    return Run(path)


def test_time_budget_rounds_reach_each_replicas_own_end(tmp_path):
    run = _budget_run(tmp_path / "budget")
    assert A.trained_steps(run) == {0: 3, 1: 4}
    rt = A.rounds_table(run)
    # the closing sync ends each replica's last round at its own end, not at cfg.steps = 2
    assert rt[rt["replica"] == 0]["local_steps"].tolist() == [1, 2]
    assert rt[rt["replica"] == 1]["local_steps"].tolist() == [1, 2, 1]
    assert A.sync_window(run) == (2, 3)  # the first sync (step 3) lies beyond cfg.steps
    by_steps = Run(F.make_fake_run(tmp_path / "steps"))  # without a budget: cfg.steps for every replica
    assert A.trained_steps(by_steps) == {0: F.STEPS, 1: F.STEPS}
    assert A.rounds_table(by_steps)["end_step"].max() == F.STEPS


@pytest.mark.parametrize("name", ["edit-straggler", "aedit-straggler"])
def test_shipped_time_budget_rounds_hold_every_step_trained(name):
    """Notebook 06's "local steps per round" ended EDiT at cfg.steps though it ran twice as many. (The
    shipped runs whose replicas trained a step count other than cfg.steps: the A-EDiT one, one replica
    above it and one below.)"""
    from edit_lab.records.examples import HERE

    run = Run(HERE / name)
    per = run.summary["per_replica"]
    assert run.config.time_budget > 0 and any(v["steps"] != run.config.steps for v in per.values())
    rt = A.rounds_table(run)
    for rep in range(run.config.replicas):
        mine = rt[rt["replica"] == rep]
        assert mine["end_step"].max() == per[str(rep)]["steps"]
        # every step in exactly one round, from the first round's start (0, or the end of warm-up for
        # A-EDiT, whose rounds begin with the anchors)
        assert mine["local_steps"].sum() == per[str(rep)]["steps"] - mine["start_step"].min()
