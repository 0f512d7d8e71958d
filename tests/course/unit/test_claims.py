"""claims.py: each claim a lesson makes about its run, decided on runs whose numbers are known.

The synthetic run of viz_fake_run.py (every duration chosen), small hand-built run directories (only
the files a claim reads: config, events, metrics, syncs, summary) and the shipped sync-straggler example.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from edit_course import claims
from edit_course.verdict import FAIL, PASS, TIMING_NOTE
from edit_lab import RunConfig
from edit_lab.records.analysis import replica_table
from edit_lab.records.examples import HERE as EXAMPLES_HERE
from edit_lab.records.run import Run

from tests.unit import viz_fake_run as F

EXAMPLES = EXAMPLES_HERE


@pytest.fixture(scope="module")
def fake(tmp_path_factory):
    return Run(F.make_fake_run(tmp_path_factory.mktemp("fake") / "run"))


def write_run(path: Path, cfg: RunConfig, events: list[dict] = (), metrics: list[dict] = (), syncs: list[dict] = (),
              summary: dict | None = None) -> Run:
    """A run directory holding only what the claims read; every rank's events go to its own file."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(cfg.replace(out=str(path), progress=False).to_json())
    for rank in range(cfg.world_size):
        (path / f"events-rank{rank}.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events if e["rank"] == rank))
    (path / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    (path / "syncs.jsonl").write_text("".join(json.dumps(s) + "\n" for s in syncs))
    (path / "summary.json").write_text(json.dumps(summary or {}))
    return Run(path)


def collective(rank: int, step: int, kind: str, nbytes: int, t0: float) -> dict:
    return {"rank": rank, "replica": rank, "shard": 0, "step": step, "unit": None, "kind": kind, "t0": t0,
            "t1": t0 + 0.001, "bytes": nbytes, "group": "sync", "data": {"exposed": 0.001}}


def train_rows(losses: list[float]) -> list[dict]:
    return [{"kind": "train", "step": s, "replica": 0, "loss": v, "tokens": 1, "t": float(s), "dt": 1.0}
            for s, v in enumerate(losses)]


# ------------------------------------------------------------------------------------ the comparisons
def test_a_comparison_prints_both_numbers_named_and_a_share_only_where_it_means_something(capsys):
    assert claims.smaller("EDiT waits less", 43.0, 95.0, names=("EDiT", "DiLoCo")).ok
    assert not claims.larger("CO2 ends above DiLoCo", 2.5, 2.6, names=("CO2", "DiLoCo"), unit="", digits=3,
                             why_not=claims.SEED).ok
    assert claims.larger("units 0 and 1 are the most exposed", 5.9, 0.03, names=("units 0, 1", "units 2…"), timing=True).ok
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"{PASS} EDiT waits less: EDiT 43.0 ms against DiLoCo 95.0 ms (45%)"
    assert out[1] == (f"{FAIL} CO2 ends above DiLoCo: CO2 2.500 against DiLoCo 2.600 (96%). "
                      f"Likely reason: {claims.SEED}")
    assert out[2] == f"{PASS} units 0 and 1 are the most exposed: units 0, 1 5.9 ms against units 2… 0.0 ms"  # no 19633%


def test_close_falls_and_each_setting():
    assert claims.close("about the pause", 1.3, 1.0, names=("a", "b"), rel_tol=0.35).ok
    assert not claims.close("about the pause", 1.4, 1.0, names=("a", "b"), rel_tol=0.35).ok
    assert claims.falls("falls", [3.0, 2.0, 1.0], ["x", "y", "z"]).ok
    assert not claims.falls("falls", [3.0, 3.0], ["x", "y"]).ok and not claims.falls("falls", [1.0], ["x"]).ok
    v = claims.smaller_at_each("on below off", {"50 MB/s": (3.8, 26.3), "5 MB/s": (30.0, 170.0)}, timing=True)
    assert v.ok and v.timing and v.numbers.startswith("50 MB/s: 3.8 against 26.3 ms (14%); 5 MB/s")
    assert not claims.smaller_at_each("on below off", {"5 MB/s": (171.0, 170.0)}).ok
    assert not claims.smaller_at_each("nothing", {}).ok
    assert claims.moves_less("the loss", [2.5, 2.6], "the bytes", [1.0, 10.0]).ok
    assert not claims.moves_less("the loss", [1.0, 3.0], "the bytes", [1.0, 2.0]).ok


# ------------------------------------------------------------------------------------ what a run computed
def test_same_losses_counts_the_steps_that_differ(fake, tmp_path):
    copy = Run(shutil.copytree(fake.path, tmp_path / "copy"))
    assert claims.same_losses(copy, fake, "a straggler").ok
    rows = [json.loads(line) for line in (copy.path / "metrics.jsonl").read_text().splitlines()]
    rows[0]["loss"] += 1e-7
    (copy.path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    v = claims.same_losses(Run(copy.path), fake, "a straggler")
    assert not v.ok and v.numbers == f"{F.STEPS - 1} of {F.STEPS} steps bit-for-bit equal" and not v.timing


def test_the_loss_fell_from_about_ln_256(fake, tmp_path):
    assert claims.loss_fell(fake).ok  # 5.05 at step 0 (mean over replicas), 3.55 at step 3
    cfg = RunConfig(method="sync", shards=1, replicas=1, steps=3)
    assert not claims.loss_fell(write_run(tmp_path / "flat", cfg, metrics=train_rows([5.5, 5.6, 5.7]))).ok
    assert not claims.loss_fell(write_run(tmp_path / "far", cfg, metrics=train_rows([9.0, 4.0, 3.0]))).ok  # not ln 256


def test_never_hidden_whole_kinds_and_one_unit(fake):
    # step 0's gradient all-reduce starts after the last backward compute: nothing hides it
    v = claims.never_hidden(fake, "grad_all_reduce", 0)
    assert v.ok and v.numbers == "rank 0, steps 0: 0.00 ms hidden of 90.0 ms"
    assert not claims.never_hidden(fake, "reduce_scatter", 1).ok  # each travels 5 ms under a backward compute
    assert not claims.never_hidden(fake, "co2_reduce").ok  # a kind the run never issued is no evidence
    root = claims.never_hidden(fake, "all_gather", 1, unit=0)  # blocking: the rank waits, nothing computes
    assert root.ok and not root.timing and root.numbers == "rank 0, steps 1: 0.00 ms hidden of 10.0 ms"
    assert root.claim == "nothing computes while unit 0's all_gather travels: none of it is hidden"
    assert not claims.never_hidden(fake, "reduce_scatter", 1, unit=0).ok  # 5 ms of it under a backward
    assert not claims.never_hidden(fake, "all_gather", 1, unit=7).ok  # a unit the model does not have


def local_sgd_run(path: Path, method: str, steps: int, warmup: int, tau: int, sync_steps: list[int]) -> Run:
    """Two replicas of one shard: a 100-byte gradient all-reduce every warm-up step (every step for `sync`)
    and a 100-byte sync_reduce recorded at the step before each sync of `sync_steps`."""
    cfg = RunConfig(method=method, shards=1, replicas=2, steps=steps, warmup_steps=warmup, sync_interval=tau)
    events = []
    for rank in range(2):
        for step in range(steps):
            if method == "sync" or step < warmup:
                events.append(collective(rank, step, "grad_all_reduce", 100, float(step)))
        events += [collective(rank, s - 1, "sync_reduce", 100, s - 0.5) for s in sync_steps]
    syncs = [{"kind": "anchor", "step": warmup}] + [{"kind": "sync", "step": s} for s in sync_steps]
    return write_run(path, cfg, events, syncs=[] if method == "sync" else syncs)


def test_bytes_per_step_and_their_ratio_follow_the_syncs(tmp_path):
    sync = local_sgd_run(tmp_path / "sync", "sync", 12, 2, 5, [])
    diloco = local_sgd_run(tmp_path / "diloco", "diloco", 12, 2, 5, [7, 12])
    assert claims.sync_group_bytes_per_step(sync) == (100.0, 100.0)
    assert claims.sync_group_bytes_per_step(diloco) == (100.0, 20.0)
    assert claims.n_syncs(diloco) == 2 and claims.n_syncs(sync) == 0
    v = claims.bytes_ratio(sync, diloco)
    assert v.ok and v.numbers.startswith("5.000× = 10 local steps / 2 syncs")
    slow = local_sgd_run(tmp_path / "tau10", "diloco", 12, 2, 10, [12])
    assert claims.bytes_fall_with_tau({5: diloco, 10: slow}).ok
    same = local_sgd_run(tmp_path / "tau6", "diloco", 12, 2, 6, [8, 12])  # as many syncs as τ 5 here
    assert not claims.bytes_fall_with_tau({5: diloco, 6: same}).ok


# ------------------------------------------------------------------------------------ CO2
def co2_run(path: Path, vals: list[tuple[int, float]], landing_as_sync: bool = False) -> Run:
    """What a 1×2 CO2 run of 12 steps, W 2, τ 5 records: boundaries 7 and 12, the first mean landing at 12."""
    cfg = RunConfig(method="co2", shards=1, replicas=2, steps=12, warmup_steps=2, sync_interval=5)
    syncs = [{"kind": "anchor", "step": 2}, {"kind": "sync", "step": 7, "applied_round": None},
             {"kind": "sync", "step": 12, "applied_round": 7},
             {"kind": "sync" if landing_as_sync else "co2_landing", "step": 12, "final": True, "applied_round": 12}]
    metrics = [{"kind": "eval", "step": s, "val_loss": v, "val_loss_spread": 0.0} for s, v in vals]
    return write_run(path, cfg, metrics=metrics, syncs=syncs)


def test_co2_validates_the_warmup_model_until_its_first_mean_lands(tmp_path):
    run = co2_run(tmp_path / "co2", [(5, 5.33), (10, 5.33), (12, 4.53)])
    assert claims.first_landing(run) == 12
    v = claims.co2_waits_a_round(run)
    assert v.ok and v.numbers == "first landing at step 12; validations before it step 5: 5.3300, step 10: 5.3300"
    assert not claims.co2_waits_a_round(co2_run(tmp_path / "moved", [(5, 5.33), (10, 5.2), (12, 4.53)])).ok
    falls = claims.loss_falls_after(run, 12)
    assert falls.ok and falls.numbers == "step 10: 5.330, step 12: 4.530"
    assert not claims.loss_falls_after(co2_run(tmp_path / "up", [(10, 5.33), (12, 5.4)]), 12).ok


def test_too_few_validations_print_a_note_and_no_verdict(tmp_path, capsys):
    assert claims.loss_falls_after(co2_run(tmp_path / "final-only", [(12, 4.53)]), 12) is None
    out = capsys.readouterr().out
    assert out.startswith("(too few validations") and PASS not in out and FAIL not in out


def test_co2_counts_its_syncs_and_its_last_landing_apart(tmp_path):
    diloco = local_sgd_run(tmp_path / "diloco", "diloco", 12, 2, 5, [7, 12])
    v = claims.co2_counts_its_syncs(co2_run(tmp_path / "co2", [(12, 4.5)]), diloco)
    assert v.ok and v.numbers == "CO2 2 syncs, DiLoCo 2; co2_landing at steps [12]"
    assert not claims.co2_counts_its_syncs(co2_run(tmp_path / "double", [(12, 4.5)], landing_as_sync=True), diloco).ok


# ------------------------------------------------------------------------------------ what a clock measured
def test_the_fast_replica_waits_in_the_shipped_straggler_run(capsys):
    run = Run(EXAMPLES / "sync-straggler")
    v = claims.fast_replica_waits(run)
    b = claims.blocked_ms_per_step(run)
    assert v.ok and v.timing and b[0] > b[1]
    assert TIMING_NOTE not in capsys.readouterr().out  # the note is printed only with a ✗


def test_blocked_time_against_the_pauses_before_the_last_step(fake):
    v = claims.blocked_about_pause(fake)
    blocked = float(replica_table(fake).set_index("replica").loc[0, "blocked_s"])
    assert v.timing and v.ok == (abs(blocked - F.STRAGGLE) <= 0.35 * F.STRAGGLE)  # the pause of step 2 (< STEPS − 1)
    assert v.numbers.startswith(f"{blocked:.3f} s against {F.STRAGGLE:.3f} s of pauses")
    beyond = claims.blocked_about_pause(fake, base=fake)  # beyond itself: nothing added, against a pause
    assert not beyond.ok and beyond.numbers.startswith(f"0.000 s against {F.STRAGGLE:.3f} s")
    assert beyond.claim == "replica 0's blocked time beyond the baseline's is about replica 1's pauses"
    assert claims.straggler_pauses_s(fake) == pytest.approx(F.STRAGGLE)


def test_on_the_virtual_clock_the_blocked_time_is_no_timing(fake, tmp_path):
    virtual = Path(shutil.copytree(fake.path, tmp_path / "virtual"))
    cfg = json.loads((virtual / "config.json").read_text())
    (virtual / "config.json").write_text(json.dumps({**cfg, "clock": "virtual"}))
    v = claims.blocked_about_pause(Run(virtual))
    assert not v.timing and v.numbers == claims.blocked_about_pause(fake).numbers


def test_capacity_share_and_slowdown_ratio(fake, tmp_path):
    t = replica_table(fake)
    assert math.isclose(claims.capacity_share(fake), t["tokens_per_s"].sum() / t["own_tokens_per_s"].sum())
    slow = Run(shutil.copytree(fake.path, tmp_path / "slow"))
    summary = json.loads((slow.path / "summary.json").read_text())
    for factor, ok in ((0.6, True), (0.4, False), (1.1, False)):
        summary["tokens_per_s"] = fake.summary["tokens_per_s"] * factor
        (slow.path / "summary.json").write_text(json.dumps(summary))
        v = claims.slowdown_ratio(Run(slow.path), fake, 2.0)
        assert v.ok is ok and v.timing


def test_benchmark_rows_read_the_table_under_a_heading(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# x\n\n### What a sync step costs (`python b.py`)\n\nSome text.\n\n"
                      "| method | extra (ms) |\n|---|---:|\n| edit, prefetch on | **343.9** |\n| diloco | 996.6 |\n\n"
                      "| another | table |\n|---|---|\n| a | b |\n### Next\n")
    assert claims.benchmark_rows("What a sync step costs", readme) == [
        {"method": "edit, prefetch on", "extra (ms)": "343.9"}, {"method": "diloco", "extra (ms)": "996.6"}]
    assert claims.benchmark_rows("No such heading", readme) == []
    assert claims.benchmark_rows("What a sync step costs", tmp_path / "missing.md") == []
    shipped = {r["method"] for r in claims.benchmark_rows("What a sync step costs")}  # the box of notebook 04
    assert {"edit, prefetch on", "diloco"} <= shipped


# ------------------------------------------------------------------------------------ a timing's computed reason
def test_a_timing_reason_names_ranks_per_core_the_steps_noise_and_the_gap(tmp_path):
    cfg = RunConfig(method="edit", shards=2, replicas=2, steps=12, warmup_steps=4, sync_interval=4)
    dts = [0.010, 0.012, 0.014, 0.016, 0.018, 0.020, 0.022, 0.024]  # replica 0's steps 4..11, in seconds
    metrics = [{"kind": "train", "step": 4 + i, "replica": 0, "loss": 1.0, "tokens": 1, "t": float(i), "dt": dt}
               for i, dt in enumerate(dts)] + [{"kind": "train", "step": 0, "replica": 0, "loss": 1.0, "tokens": 1,
                                                 "t": 0.0, "dt": 9.0}]  # a warm-up step: left out
    run = write_run(tmp_path / "r", cfg, metrics=metrics)
    import statistics
    q = statistics.quantiles([1e3 * d for d in dts], n=4)
    assert claims.step_noise_ms(run) == pytest.approx(q[2] - q[0])
    shared = claims.timing_reason(run, gap=3.25, n_cores=2)
    assert shared.startswith("4 ranks on 2 cores (0.5 per rank): a rank that waits for a core")
    assert f"varied by {q[2] - q[0]:.1f} ms" in shared and shared.endswith("the claim turned on 3.2 ms")
    own = claims.timing_reason(run, n_cores=4)
    assert own.startswith("4 ranks on 4 cores (1 per rank): every rank had a core") and "turned on" not in own
    virtual = write_run(tmp_path / "v", cfg.replace(clock="virtual"), metrics=metrics)
    assert claims.timing_reason(virtual, gap=1.0).startswith("the cost model's own numbers")


def test_wall_against_blocked_puts_the_rest_of_the_gap_on_compute():
    from edit_lab.records.examples import example_runs

    runs = {r.config.method: r for r in example_runs()}
    if not {"edit", "sync"} <= set(runs):
        pytest.skip("the example runs were never made in this checkout")
    a, b = runs["edit"], runs["sync"]
    line = claims.wall_against_blocked(a, b, ("EDiT", "sync"))
    wa, wb = a.summary["wall_s"], b.summary["wall_s"]
    ba = replica_table(a, from_step=a.config.schedule.warmup_steps)["blocked_s"].max()
    bb = replica_table(b, from_step=b.config.schedule.warmup_steps)["blocked_s"].max()
    assert line.startswith(f"EDiT took {wa:.2f} s against sync's {wb:.2f} s ({wa - wb:+.2f} s)")
    assert f"the other {(wa - wb) - (ba - bb):+.2f} s is compute" in line
    assert f"a median step of {claims.median_step_ms(a):.1f} against {claims.median_step_ms(b):.1f} ms" in line


def test_a_virtual_run_calibrated_on_this_machine_makes_timing_claims(tmp_path):
    """06 races EDiT and A-EDiT on the virtual clock with costs calibrated from its own wall-clock run: those
    numbers carry this machine's timings, so its verdicts are timing claims (a ✗ is then this machine's, told with
    the run it came from); the shipped example's costs or none keep them the lesson's."""
    from types import SimpleNamespace

    from edit_course.claims import costs_measured_here, on_this_machine, timing_reason

    def run(**kw):
        return SimpleNamespace(config=RunConfig(**kw))

    here = tmp_path / "edit-run"
    here.mkdir()
    calibrated = run(clock="virtual", clock_costs=str(here))
    assert costs_measured_here(calibrated) and on_this_machine(calibrated)
    assert "edit-run, a run of this machine" in timing_reason(calibrated)
    for lesson_s in (run(clock="virtual"), run(clock="virtual", clock_costs=str(EXAMPLES / "edit-straggler"))):
        assert not costs_measured_here(lesson_s) and not on_this_machine(lesson_s)
    assert on_this_machine(run(clock="wall")) and not costs_measured_here(run(clock="wall"))
