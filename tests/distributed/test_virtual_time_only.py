"""The virtual clock's time-only mode (`virtual_compute="charged"`, edit_lab/clock/time_only.py).

Its promise: the real virtual clock's timeline, exactly, without the model. So each case below trains the
same configuration twice on the same costs (a costs JSON: the virtual clock's default costs for the mesh),
once computing and once charged, and asserts that every rank's event stream is the same, event by event:
every span's kind, unit, step, bytes and virtual start and end (the syncs, the waits, the straggler pauses,
the shard group's all-gathers and reduce-scatters), every metrics row's time, every sync record (budget
meetings, A-EDiT's meetings and their step counts, so its N_min decisions) and the summary's throughput.
Then the simulator (sim/crosscheck.py) on a charged run, as tests/distributed/test_sim_matches_virtual.py
does on a real one; that the stand-in holds no tensor of the model's size, builds no model and reads no
corpus; what a time-only run does not report (losses, the penalty's records, memory); the config's refusals.
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import pytest

from edit_lab import launch
from edit_lab.config import ConfigError, RunConfig
from edit_lab.records.events import read_jsonl
from edit_lab.records.run import Run
from tests.helpers import small

STRAGGLER = dict(straggler_replicas=(1,), straggler_factor=2.0)
SLOW_LINK = dict(link_latency_ms=5.0, link_bandwidth_mb_s=50.0)
PAUSES = dict(random_pause_prob=0.3, random_pause_ms=20.0)

#: Every method, each with a kind of slowness; A-EDiT and EDiT under a time budget (meetings, N_min, stop checks).
CASES: dict[str, dict[str, Any]] = {
    "sync-2x2-straggler": dict(method="sync", shards=2, **STRAGGLER),
    "diloco-1x2-slow-link-int8": dict(method="diloco", shards=1, sync_interval=2, wire_format="int8", **SLOW_LINK),
    "edit-2x2-straggler-slow-link": dict(method="edit", shards=2, sync_interval=2, **STRAGGLER, **SLOW_LINK),
    "edit-noprefetch-2x2-pauses-no-reshard": dict(method="edit", shards=2, prefetch=False,
                                                  reshard_after_forward=False, **PAUSES),
    "aedit-2x2-budget-straggler-slow-link": dict(method="aedit", shards=2, time_budget=0.4, sync_period=0.08,
                                                 min_sync_steps=5, eval_every_s=0.15, **STRAGGLER, **SLOW_LINK),
    "edit-1x2-budget-straggler": dict(method="edit", shards=1, time_budget=0.4, sync_interval=4, **STRAGGLER),
    "co2-2x2-int4-feedback-pauses": dict(method="co2", shards=2, sync_interval=2, wire_format="int4",
                                         error_feedback=True, eval_every=4, **PAUSES),
    "streaming-2x2-int4-overlap-slow-link": dict(method="streaming_diloco", shards=2, sync_interval=4, fragments=2,
                                                 fragment_sync_delay=1, wire_format="int4", **STRAGGLER, **SLOW_LINK),
    "post_local_sgd-2x3-bf16": dict(method="post_local_sgd", shards=2, replicas=3, sync_interval=2,
                                    wire_format="bf16", **SLOW_LINK),
    # tiny's 5 units over 3 shards (padded shards), 3 fragments: the packed sets of units are read back
    "streaming-tiny-3x2-int8-three-fragments": dict(model="tiny", shards=3, method="streaming_diloco", steps=10,
                                                    sync_interval=6, fragments=3, fragment_sync_delay=1,
                                                    wire_format="int8"),
    # the real run's penalty leaves replicas out (a corrupted one, a spiked one); the stand-in's zeros leave
    # none out: the same timeline all the same (PENALTY_EXCLUDES)
    "edit-2x3-penalty-excludes": dict(method="edit", shards=2, replicas=3, corrupt_replica=1, corrupt_from_step=3,
                                      exclude_trouble=True, spike_step=4, spike_replica=2, spike_scale=100.0),
}
PENALTY_EXCLUDES = "edit-2x3-penalty-excludes"

#: Event data that is the penalty's verdict on the model's numbers, not timing: a time-only run decides on zeros.
NOT_TIMING = {"skipped"}


class CostsFiles(dict):
    """(model, shards) -> the virtual clock's default costs for them as a costs JSON, written on first use (no
    calibration per run); an int key is nano's."""

    def __init__(self, root: Any) -> None:
        super().__init__()
        self.root = root

    def __missing__(self, key: Any) -> str:
        from edit_lab.clock.virtual import costs_for

        model, shards = ("nano", key) if isinstance(key, int) else key
        path = self.root / f"costs-{model}-{shards}.json"
        path.write_text(costs_for(small(clock="virtual", model=model, shards=shards, replicas=2)).to_json())
        self[key] = str(path)
        return self[key]


@pytest.fixture(scope="module")
def costs_files(tmp_path_factory) -> CostsFiles:
    return CostsFiles(tmp_path_factory.mktemp("costs"))


@pytest.fixture
def pair(tmp_path, costs_files):
    """(real, charged): the same configuration on the virtual clock, computing and time only."""
    def make(**kw: Any) -> tuple[Run, Run]:
        kw = {**dict(replicas=2, steps=8, warmup_steps=2), **kw}
        cfg = small(clock="virtual", clock_costs=costs_files[(kw.get("model", "nano"), kw["shards"])], **kw)
        return (launch(cfg.replace(out=str(tmp_path / "real"))),
                launch(cfg.replace(out=str(tmp_path / "charged"), virtual_compute="charged")))
    return make


def timing(ev: dict[str, Any]) -> dict[str, Any]:
    return {**ev, "data": {k: v for k, v in ev["data"].items() if k not in NOT_TIMING}}


@pytest.mark.parametrize("case", CASES)
def test_the_timeline_is_the_virtual_clocks(pair, case):
    real, charged = pair(**CASES[case])
    for rank in range(real.config.world_size):
        a, b = (read_jsonl(run.path / f"events-rank{rank}.jsonl") for run in (real, charged))
        assert len(a) == len(b) > 0
        for i, (x, y) in enumerate(zip(a, b)):
            assert timing(x) == timing(y), f"rank {rank}, event #{i}"
    keys = ("kind", "step", "replica", "t", "tokens", "at_s", "final")
    assert [{k: m.get(k) for k in keys} for m in real.metrics] == [{k: m.get(k) for k in keys} for m in charged.metrics]
    assert read_jsonl(real.path / "syncs.jsonl") == read_jsonl(charged.path / "syncs.jsonl")
    for key in ("wall_s", "train_end_s", "tokens_per_s", "steps"):
        assert real.summary[key] == charged.summary[key], key
    for r, v in real.summary["per_replica"].items():
        w = charged.summary["per_replica"][r]
        assert (v["steps"], v["tokens_per_s"], v["sync_wait_s"]) == (w["steps"], w["tokens_per_s"], w["sync_wait_s"])
    if case == PENALTY_EXCLUDES:  # the real penalty did decide something the time-only run cannot
        assert any(p["outlier"] and p["weight"] == 0.0 for p in read_jsonl(real.path / "penalty.jsonl"))
    if real.config.method == "aedit":  # the meetings, their step counts and N_min's decisions, one by one
        assert real.summary["method_info"]["meetings"] == charged.summary["method_info"]["meetings"]
        assert any(m["synced"] for m in charged.summary["method_info"]["meetings"])
        assert any(not m["synced"] for m in charged.summary["method_info"]["meetings"])  # N_min = 5 said no once


def test_the_simulator_agrees_with_a_time_only_run(tmp_path, costs_files):
    """sim/crosscheck.py on a charged run, as test_sim_matches_virtual does on a real one: the same collectives
    per rank and the same timeline, to float rounding (A-EDiT with a budget, a straggler and a slow link)."""
    from tests.distributed.sim_crosscheck import compare, steps_per_replica

    run = launch(small(clock="virtual", virtual_compute="charged", out=str(tmp_path / "run"), replicas=2, warmup_steps=2,
                       clock_costs=costs_files[2], **CASES["aedit-2x2-budget-straggler-slow-link"]))
    check = compare(run)
    assert check.same_collectives, check.first_difference()
    assert steps_per_replica(run, check.prediction)[0] == steps_per_replica(run, check.prediction)[1]
    assert check.timeline_error <= 1e-9, check.worst_time()


def test_the_preview_from_a_time_only_run_is_the_simulators(costs_files):
    """`virtual.predict_time_only` (the preview's time-only path, kept in memory) against `sim.simulate` on the same costs."""
    from edit_lab.clock.sim import Costs, simulate
    from edit_lab.clock.virtual import predict_time_only as predict

    costs = Costs.from_dict(__import__("json").loads(open(costs_files[2]).read()))
    for kw in (dict(method="edit", **STRAGGLER, **SLOW_LINK), dict(method="aedit", time_budget=0.5, sync_period=0.1),
               dict(method="diloco", sync_interval=2, **PAUSES)):
        cfg = small(shards=2, replicas=2, warmup_steps=2, **kw)
        a, b = predict(cfg, costs).summary, simulate(cfg, costs).summary
        assert a["steps"] == b["steps"]
        for key in ("wall_s", "tokens_per_s", "train_end_s"):
            assert a[key] == pytest.approx(b[key], rel=1e-9), key
        for r, v in b["per_replica"].items():
            assert a["per_replica"][r]["steps"] == v["steps"]
            assert a["per_replica"][r]["sync_wait_s"] == pytest.approx(v["sync_wait_s"], rel=1e-9, abs=1e-12)


def test_no_model_no_corpus_no_tensor_of_model_size(tmp_path, costs_files, monkeypatch):
    """A charged run builds no model and reads no corpus; its stand-in holds 2^U − 1 values per rank (7 for nano's
    3 units, against 20,816 in a real rank's shards), × 256 in an integer wire format."""
    from edit_lab.clock.time_only import ChargedModel, shard_numel
    from edit_lab.train import trainer as worker

    def refuse(*_a: Any, **_k: Any) -> None:
        raise AssertionError("a time-only run built the model or read the corpus")

    monkeypatch.setattr(worker, "build_model", refuse)
    monkeypatch.setattr(worker, "load_corpus", refuse)
    run = launch(small(clock="virtual", virtual_compute="charged", out=str(tmp_path / "run"), method="edit",
                       shards=2, replicas=2, clock_costs=costs_files[2]))
    assert run.summary["steps"] == 8

    log = SimpleNamespace(clock=None)
    comm = SimpleNamespace(log=log, mesh=SimpleNamespace(shards=2))
    for model, fmt, values in (("nano", "none", 7), ("small", "none", 127), ("nano", "int8", 7 * 256)):
        cfg = RunConfig(model=model, shards=2, replicas=2, method="diloco", wire_format=fmt)
        stand_in = ChargedModel(cfg, comm)
        assert stand_in.n_units == len(shard_numel(cfg))
        assert sum(p.numel() for p in stand_in.shards) == values < sum(shard_numel(cfg))
    assert sum(shard_numel(RunConfig(model="nano", shards=2))) == 20816


def test_declared_sizes_are_the_real_engines():
    """`shard_numel` (from sizes.py, no model) is the real engine's shard size; a packed set of units is read back."""
    import torch

    from edit_lab.clock.time_only import DeclaredSizes, shard_numel
    from edit_lab.core.sharding import UnitLayout
    from edit_lab.core.model import build_model

    for model, shards in (("nano", 2), ("tiny", 4), ("nano", 3)):
        real = [UnitLayout.of(u, shards).shard_size for u in build_model(model, 0).units()]
        assert shard_numel(RunConfig(model=model, shards=shards)) == real
    sizes = DeclaredSizes(RunConfig(model="tiny", shards=2, method="streaming_diloco", wire_format="int4"))
    assert sizes.units_of(256 * (2 + 4)) == [1, 2]
    t = torch.zeros(256 * (1 + 8 + 16))
    # issue 48: the declared size is the whole tensor (`Comm` applies the ring rule); in int4 the R encoded chunks of
    # the quantised reduce-scatter, the packed units padded to R chunks of whole blocks (was: R payloads)
    blocks = sum(-(-sizes.shard[u] // 256) for u in (0, 3, 4))
    assert sizes.nbytes("sync_reduce", "sync", None, t, "int4") == 2 * (-(-blocks // 2) * (128 + 4))
    assert sizes.nbytes("stop_check", "sync", None, t, "int4") is None  # a small exchange: its own bytes


def test_what_a_time_only_run_does_not_report(tmp_path, costs_files):
    """Losses are NaN, the penalty's records and re-admissions are not written, memory is not reported."""
    run = launch(small(clock="virtual", virtual_compute="charged", out=str(tmp_path / "run"), method="edit",
                       shards=2, replicas=2, eval_every=4, clock_costs=costs_files[2]))
    train = [m for m in run.metrics if m["kind"] == "train"]
    evals = [m for m in run.metrics if m["kind"] == "eval"]
    assert train and evals
    assert all(math.isnan(m["loss"]) for m in train) and all(math.isnan(m["val_loss"]) for m in evals)
    assert math.isnan(run.summary["final_train_loss"]) and math.isnan(run.summary["final_val_loss"])
    assert read_jsonl(run.path / "penalty.jsonl") == []
    assert run.summary["memory"] == {str(r): {} for r in range(4)}
    assert run.summary["method_info"]["penalty_readmissions"] == []
    assert [r["kind"] for r in read_jsonl(run.path / "syncs.jsonl")].count("sync") == 2


@pytest.mark.parametrize("fields, name, allowed", [
    (dict(virtual_compute="fast"), "virtual_compute", "one of real, charged"),
    (dict(clock="wall", virtual_compute="charged"), "virtual_compute", "real with clock='wall'"),
    (dict(clock="virtual", virtual_compute="charged", checkpoint_every=2), "checkpoint_every", "0 with"),
    (dict(clock="virtual", virtual_compute="charged", grad_all_reduce_rule="def f(g, rs, ag):\n    return g\n"),
     "grad_all_reduce_rule", "None with"),
])
def test_the_config_refuses(fields, name, allowed):
    with pytest.raises(ConfigError) as e:
        RunConfig(**fields).validate()
    assert str(e.value).startswith(f"{name}=") and allowed in str(e.value)
