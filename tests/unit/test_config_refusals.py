"""One configuration, one validator: every field declares its section, help and bounds; `validate()`
refuses what a worker would, from those declarations and the cross-field rules; the CLI refuses in one
line, before torch is imported or anything is created; the corpus check agrees with the real
train/validation split."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import typing
from pathlib import Path

import pytest

from edit_lab.config import FLAT, RENAMED, SECTIONS, ConfigError, PenaltyConfig, RunConfig, field_hint, knobs
from edit_lab.corpus import CHUNK, check_corpus_file, corpus_problem, split_sizes
from edit_lab.train.data import Corpus, train_batch, val_batches
from tests.unit.cli_run import cli_run

ROOT = Path(__file__).resolve().parents[2]


def refusal(**kw) -> str:
    with pytest.raises(ConfigError) as info:
        RunConfig(**kw).validate()
    return str(info.value)


# ------------------------------------------------------------------------------------ the declarations
def test_every_field_declares_a_section_and_help():
    ks = knobs()
    assert list(ks) == list(FLAT) and len(set(ks)) == len(ks)  # every knob once, by its flag
    assert all(k.section in SECTIONS and len(k.help) > 5 and k.flag == name for name, k in ks.items())
    used = {k.section for k in ks.values()}
    assert used == set(SECTIONS)  # no empty section in --help


def test_runconfig_is_six_fields_and_its_sections_none_holding_source():
    """The front door: at most 20 top-level fields, each a value or a section; the rules' source is in one section."""
    top = dataclasses.fields(RunConfig)
    assert len(top) <= 20
    hints = typing.get_type_hints(RunConfig)
    assert [f.name for f in top if not dataclasses.is_dataclass(hints[f.name])] == [
        "method", "shards", "replicas", "steps", "time_budget", "seed"]
    assert all(hints[f.name] in (str, int, float) for f in top if not dataclasses.is_dataclass(hints[f.name]))
    assert {name for name, (section, _) in FLAT.items() if name.endswith("_rule")} == {
        name for name, (section, _) in FLAT.items() if section == "rules"}


def test_flat_flags_and_section_paths_are_one_knob():
    """`RunConfig(outer_lr=…)` sets `cfg.outer.lr`; replace keeps the other sections; an old name is pointed to
    its path; a section and a flag of it combine (the flag last); an unknown keyword names the closest flag."""
    cfg = RunConfig(method="edit", outer_lr=0.5, penalty_alpha=0.2, data=None, clock="virtual")
    assert (cfg.outer.lr, cfg.penalty.alpha, cfg.data.corpus, cfg.clock.kind) == (0.5, 0.2, None, "virtual")
    assert cfg.get("outer_lr") == 0.5 and cfg.flat()["penalty_alpha"] == 0.2
    again = cfg.replace(lr=1e-3)
    assert (again.inner.lr, again.outer.lr, again.penalty.alpha, again.clock.kind) == (1e-3, 0.5, 0.2, "virtual")
    assert cfg.replace(penalty=PenaltyConfig(alpha=0.4)).penalty.alpha == 0.4
    assert RunConfig(penalty=PenaltyConfig(alpha=0.4), penalty_arming=7).penalty == PenaltyConfig(alpha=0.4, arming=7)
    with pytest.raises(AttributeError, match=r"it is cfg\.outer\.lr \(the flag --outer-lr"):
        cfg.outer_lr
    with pytest.raises(TypeError, match="unexpected keyword 'outer_lrr' \\(did you mean 'outer_lr'"):
        RunConfig(outer_lrr=0.5)


def test_config_json_in_sections_and_the_old_flat_form_both_load():
    cfg = RunConfig(method="edit", outer_lr=0.5, spike_units=(1, 2), betas=(0.8, 0.9))
    d = json.loads(cfg.to_json())
    assert d["outer"]["lr"] == 0.5 and d["penalty"]["alpha"] == cfg.penalty.alpha and "outer_lr" not in d
    assert RunConfig.from_dict(d) == cfg
    assert RunConfig.from_dict(json.loads(json.dumps(cfg.flat()))) == cfg  # a flat config.json of older runs
    with pytest.raises(ConfigError, match="unknown config field.*outer.lrr"):
        RunConfig.from_dict({"outer": {"lrr": 1.0}})


def _outside(name: str) -> list[float]:
    """Values just outside the declared bounds of numeric field `name`."""
    k, hint = knobs()[name], field_hint(name)
    step = 1 if hint is int else 0.5
    out = []
    if k.ge is not None:
        out.append(k.ge - step)
    if k.gt is not None:
        out.append(k.gt)
    if k.le is not None:
        out.append(k.le + step)
    if k.lt is not None:
        out.append(k.lt)
    return out


BOUNDED = [(n, v) for n in knobs() if field_hint(n) in (int, float) for v in _outside(n)]


@pytest.mark.parametrize("name, value", BOUNDED)
def test_each_declared_bound_is_refused_naming_the_field(name, value):
    msg = refusal(**{name: value})
    assert msg == f"{name}={value!r} is not allowed: {knobs()[name].allowed(field_hint(name))}"


def test_bound_words_and_edges():
    assert refusal(steps=0) == "steps=0 is not allowed: an integer >= 1"
    assert refusal(outer_momentum=1.0) == "outer_momentum=1.0 is not allowed: a number in [0, 1)"
    assert refusal(random_pause_prob=1.5) == "random_pause_prob=1.5 is not allowed: a number in [0, 1]"
    assert refusal(lr=0.0) == "lr=0.0 is not allowed: a finite number > 0"
    RunConfig(outer_momentum=0.0, random_pause_prob=1.0, step_weight_mix=1.0, straggler_factor=1.0).validate()


def test_types_nan_and_infinity():
    assert "an integer" in refusal(steps=2.0)  # a float where an int is declared
    assert refusal(prefetch=1) == "prefetch=1 is not allowed: true or false"
    assert refusal(steps=True).startswith("steps=True")  # a bool is no integer here
    assert refusal(lr=math.nan).startswith("lr=nan")
    assert refusal(timeout_s=math.inf).startswith("timeout_s=inf")  # the launcher's store needs a finite timeout
    assert refusal(time_budget=math.inf).startswith("time_budget=inf")
    assert refusal(grad_clip=math.nan).startswith("grad_clip=nan")
    RunConfig(spike_scale=math.nan).validate()  # declared: a non-finite spike is a lesson, not a typo
    RunConfig(link_bandwidth_mb_s=math.inf).validate()
    assert refusal(method="fedavg") == ("method='fedavg' is not allowed: one of sync, backup, post_local_sgd, diloco, co2, "
                                        "edit, aedit, streaming_diloco")
    assert refusal(model="huge").startswith("model='huge' is not allowed: one of nano, tiny")
    assert refusal(out=3) == "out=3 is not allowed: a path (text), or None"


def test_cross_field_rules_each_once():
    assert refusal(model="nano", seq_len=65) == "seq_len=65 is not allowed: at most 64 for model 'nano'"
    assert refusal(replicas=2, corrupt_replica=2).startswith("corrupt_replica=2 is not allowed: -1 (none) or a "
                                                            "replica index in 0..1")
    assert refusal(straggler_replicas=(1.0,)).startswith("straggler_replicas=")
    assert refusal(model="nano", spike_units=(3,)).startswith("spike_units=(3,) is not allowed: distinct unit "
                                                             "indices in 0..2")
    assert refusal(betas=(0.9, 1.0)) == "betas=(0.9, 1.0) is not allowed: two numbers in [0, 1)"
    assert refusal(shards=2, replicas=2, fault_rank=4).startswith("fault_rank=4")
    assert refusal(penalty_alpha=1.0).startswith("penalty_alpha=1.0 is not allowed: a number with 0 < alpha < 1")
    assert refusal(method="aedit", sync_period=30.0, timeout_s=45.0).startswith("sync_period=30.0")
    assert refusal(method="co2", checkpoint_every=1).startswith("checkpoint_every=1")


# ------------------------------------------------------------------------------------ the corpus file
@pytest.mark.parametrize("seq_len", [1, 32, 64, 1000, 1024])
def test_corpus_check_agrees_with_the_real_split(seq_len):
    """The smallest size the pure check accepts is exactly the smallest the real Corpus and batches take."""
    msg = corpus_problem(10, seq_len)
    need = int(msg.split("at least ")[1].split()[0])
    assert corpus_problem(need, seq_len) is None and corpus_problem(need - 1, seq_len) is not None
    corpus = Corpus.from_bytes((b"ab" * need)[:need])
    assert (len(corpus.train), len(corpus.val)) == split_sizes(need)
    train_batch(corpus, 0, 0, 0, 4, seq_len, 0)
    val_batches(corpus, 2, 4, seq_len, 0)
    one_less = (b"ab" * need)[:need - 1]
    if split_sizes(need - 1) is None:
        with pytest.raises(ValueError, match="too small"):
            Corpus.from_bytes(one_less)
        return
    small = Corpus.from_bytes(one_less)  # big enough for the split, but one split cannot hold a window
    failures = 0
    for draw in (lambda: train_batch(small, 0, 0, 0, 4, seq_len, 0), lambda: val_batches(small, 2, 4, seq_len, 0)):
        try:
            draw()
        except ValueError as e:
            assert "split has" in str(e)
            failures += 1
    assert failures == 1


def test_split_sizes_match_corpus_for_many_sizes():
    for n in (19 * CHUNK + 1, 20 * CHUNK - 1, 20 * CHUNK, 20 * CHUNK + 7, 40 * CHUNK - 3, 41 * CHUNK):
        c = Corpus.from_bytes(b"x" * n)
        assert split_sizes(n) == (len(c.train), len(c.val)), n
    assert split_sizes(19 * CHUNK) is None


def test_data_file_refusals(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    tiny = tmp_path / "tiny.txt"
    tiny.write_bytes(b"hello " * 100)
    fine = tmp_path / "fine.txt"
    fine.write_bytes(b"some text. " * 3000)
    assert "there is no such file" in refusal(data=str(tmp_path / "nope.txt"))
    assert "not a regular file" in refusal(data=str(tmp_path))
    assert refusal(data=str(empty)).endswith("this one is empty")
    assert refusal(data=str(tiny), seq_len=32).startswith(
        f"data={str(tiny)!r} is not allowed: a corpus of at least 19489 bytes for seq_len=32 (this one has 600")
    RunConfig(data=str(fine), seq_len=32).validate()
    assert "at least" in refusal(data=str(fine), model="base100m", seq_len=1024)  # 33 kB: too small for 1024
    if os.geteuid() != 0:  # root reads anything
        locked = tmp_path / "locked.txt"
        locked.write_bytes(b"x" * 30000)
        locked.chmod(0)
        assert "cannot be read" in check_corpus_file(locked, 32)


# ------------------------------------------------------------------------------------ the old field name
def test_old_bandwidth_name_still_loads(tmp_path):
    assert RENAMED == {"link_bandwidth_mbps": "link_bandwidth_mb_s"}
    assert RunConfig.from_dict({"link_bandwidth_mbps": 20.0}).link.bandwidth_mb_s == 20.0
    assert RunConfig().replace(link_bandwidth_mbps=5.0).link.bandwidth_mb_s == 5.0
    with pytest.raises(ConfigError, match="the same field"):
        RunConfig.from_dict({"link_bandwidth_mbps": 1.0, "link_bandwidth_mb_s": 2.0})
    for example in sorted((ROOT / "edit_lab" / "records" / "examples").glob("*/config.json")):
        old = json.loads(example.read_text())
        cfg = RunConfig.load(example)
        assert cfg.link.bandwidth_mb_s == old.get("link_bandwidth_mbps", old.get("link_bandwidth_mb_s"))
    assert "link_bandwidth_mbps" not in RunConfig().to_dict()
    from edit_lab.__main__ import build_parser, config_from_args

    args = build_parser().parse_args(["run", "--link-bandwidth-mbps", "20"])
    assert config_from_args(args).link.bandwidth_mb_s == 20.0


# ------------------------------------------------------------------------------------ the command line
@pytest.mark.parametrize("flags, field", [
    (["--steps", "0"], "steps"),
    (["--outer-momentum", "1"], "outer_momentum"),
    (["--data", "EMPTY"], "data"),
    (["--model", "nano", "--seq-len", "100"], "seq_len"),
])
def test_cli_refuses_in_one_line_before_anything_starts(tmp_path, flags, field):
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    out = tmp_path / "never"
    res, heavy = cli_run(*[str(empty) if f == "EMPTY" else f for f in flags], "--out", str(out))
    assert res.returncode == 2, res.stderr
    assert not heavy, f"the refusal imported {sorted(heavy)}"  # so it is quick, however busy the machine
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"edit_lab: config error: {field}=")
    assert "Traceback" not in res.stderr and res.stdout == ""
    assert not out.exists()  # nothing was created, so no process was started


def _aedit_run_dir(tmp_path: Path, replicas: int = 2) -> Path:
    """A run directory as an A-EDiT run leaves it, as far as a replayed schedule reads it (summary.json)."""
    meetings = [{"at_steps": [5, 4][:replicas] + [4] * (replicas - 2), "done": [False] * replicas},
                {"at_steps": [9, 6][:replicas] + [6] * (replicas - 2), "done": [True, False] + [False] * (replicas - 2)},
                {"at_steps": [9, 8][:replicas] + [8] * (replicas - 2), "done": [True] * replicas}]
    d = tmp_path / f"aedit-{replicas}"
    d.mkdir()
    (d / "summary.json").write_text(json.dumps({"method_info": {"meetings": meetings}}))
    (d / "config.json").write_text(RunConfig(method="aedit", replicas=replicas, time_budget=2.0).to_json())
    return d


def test_a_replayed_aedit_schedule_is_refused_where_it_cannot_apply(tmp_path):
    from edit_lab.protocol import ScheduleReplay

    run = str(_aedit_run_dir(tmp_path))
    ok = dict(method="aedit", shards=1, replicas=2, time_budget=2.0, aedit_schedule=run)
    RunConfig(**ok).validate()
    assert "aedit_schedule=" in refusal(**{**ok, "method": "edit"}) and "only A-EDiT" in refusal(**{**ok, "method": "edit"})
    assert "without a time_budget" in refusal(**{**ok, "time_budget": 0.0})
    assert "finished A-EDiT run" in refusal(**{**ok, "aedit_schedule": str(tmp_path / "missing")})
    assert "a run of 4 replicas (that run had 2)" in refusal(**{**ok, "replicas": 4})
    # a replay under another W, N_min or period would run another schedule than the one it names: refused,
    # naming the field and the replayed run's value
    theirs = RunConfig()
    for name, other in (("warmup_steps", theirs.schedule.warmup_steps + 2), ("min_sync_steps", 5),
                        ("sync_period", theirs.aedit.sync_period * 2)):
        why = refusal(**{**ok, name: other})
        assert why.startswith(f"{name}={other!r} is not allowed: {theirs.get(name)!r}, the value of the run")
    (Path(run) / "config.json").unlink()
    assert "no readable config.json" in refusal(**ok)
    # what each replica replays: its timed meetings, and the step of its first meeting flagged done
    r0, r1 = ScheduleReplay.of_run(run, 0), ScheduleReplay.of_run(run, 1)
    assert (r0.meet_at, r0.stop_at, r1.meet_at, r1.stop_at) == ((5,), 9, (4, 6), 8)
    assert r1.meets(6) and not r1.meets(5) and r1.stops(8) and not r1.stops(7)
