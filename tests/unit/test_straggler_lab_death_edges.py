"""Edges of the StragglerLab's death controls (edit_lab/ui/death.py), driven through the panel's widgets on the
virtual clock (issue 50's edge review): replica 0 and the last replica, R = 2 and R = 8, a kill at step 0, 1 and
the last step, a replacement at the kill's step, at the last step or none, a method that cannot survive chosen
after a kill, shards > 1 and the sliders after the run's length changes. Values asserted, never timings."""

from __future__ import annotations

import pytest

from edit_lab.config import ConfigError, RunConfig
from edit_lab.ui.death import NOBODY, death_window, deaths
from edit_lab.ui.lab import StragglerLab


def base(**kw) -> RunConfig:
    return RunConfig(method="diloco", shards=1, replicas=3, steps=20, warmup_steps=4, sync_interval=4, model="nano",
                     seq_len=32, batch_size=4, eval_every=0, eval_batches=1, progress=False).replace(**kw)


def _last(run) -> dict[int, int]:
    last: dict[int, int] = {}
    for m in run.metrics:
        if m.get("kind") == "train":
            last[int(m["replica"])] = max(last.get(int(m["replica"]), -1), int(m["step"]))
    return last


def _run(tmp_path, b: RunConfig, **controls):
    lab = StragglerLab(b, out_dir=tmp_path, initial=[]).set(clock="virtual", **controls)
    return lab, lab.run()


def test_a_kill_at_the_last_step_names_the_survivors_in_the_title(tmp_path):
    """The survivors train the last step alone: the title named nobody ('survivors []') before the fix."""
    lab, run = _run(tmp_path, base(), kill_replica=1, kill_step=19, rejoin_step=-1)
    assert [v["members"] for v in run.summary["survival"]["views"]] == [[0, 1, 2], [0, 2]]
    assert _last(run) == {0: 19, 2: 19}  # the dead life's rows are lost with it (edit-method.md §16, Records)
    assert "replica 1 killed at step 19; survivors [0, 2] trained on to step 19" in lab.figures["loss"].layout.title.text
    assert death_window(run) == (18, 20)  # the closing sync, after step 19, is where the survivors meet the death


def test_a_kill_at_step_0_is_offered_and_sync_survives_it(tmp_path):
    """The slider started at 1, so a reader's 0 became 1 silently; sync has no warm-up and survives a step-0 death."""
    lab, run = _run(tmp_path, base(method="sync", replicas=2), kill_replica=0, kill_step=0, rejoin_step=-1)
    assert lab.config().trouble.fault_replica_step == 0
    assert [v["members"] for v in run.summary["survival"]["views"]] == [[0, 1], [1]]
    assert _last(run) == {1: 19}
    assert "replica 0 killed at step 0; survivors [1] trained on to step 19" in lab.figures["loss"].layout.title.text


def test_a_base_s_death_at_step_0_is_kept_by_the_slider():
    lab = StragglerLab(base(method="sync", survive=True, fault_replica=1, fault_replica_step=0), initial=[])
    assert lab.kill_replica.value == 1 and lab.kill_step.value == 0
    assert lab.config().trouble.fault_replica_step == 0


def test_a_kill_at_step_1_with_sync_replica_0_moves_rank_0_s_duties(tmp_path):
    lab, run = _run(tmp_path, base(method="sync"), kill_replica=0, kill_step=1, rejoin_step=-1)
    assert [v["members"] for v in run.summary["survival"]["views"]] == [[0, 1, 2], [1, 2]]
    assert _last(run) == {1: 19, 2: 19} and [d["replica"] for d in deaths(run)] == [0]


def test_a_replacement_at_the_last_step_is_admitted_at_the_closing_sync_and_trains_nothing(tmp_path):
    lab, run = _run(tmp_path, base(), kill_replica=2, kill_step=13, rejoin_step=19)
    assert [v["members"] for v in run.summary["survival"]["views"]] == [[0, 1, 2], [0, 1], [0, 1, 2]]
    assert not {m["step"] for m in run.metrics if m.get("kind") == "train" and m["replica"] == 2}
    assert "survivors [0, 1] trained on to step 19" in lab.figures["loss"].layout.title.text


def test_a_replacement_asked_for_at_the_kill_s_step_joins_at_the_first_sync_after_it(tmp_path):
    """edit-method.md §16: 'At the first sync at or after rejoin_step the members ask for it'; the replacement is
    ready (started when the dead replica was fenced, well before sync 16)."""
    lab, run = _run(tmp_path, base(), kill_replica=2, kill_step=13, rejoin_step=13)
    assert [v["members"] for v in run.summary["survival"]["views"]] == [[0, 1, 2], [0, 1], [0, 1, 2]]
    assert run.summary["survival"]["lost"][0]["rejoined_at_step"] == 16
    assert {m["step"] for m in run.metrics if m.get("kind") == "train" and m["replica"] == 2} == set(range(16, 20))


def test_r8_the_last_replica_dies_and_a_replacement_joins(tmp_path):
    lab, run = _run(tmp_path, base(method="edit", replicas=8), kill_replica=7, kill_step=9, rejoin_step=12)
    assert [v["members"] for v in run.summary["survival"]["views"]] == [list(range(8)), list(range(7)), list(range(8))]
    assert _last(run) == {r: 19 for r in range(8)}
    assert [v for _, v in lab.kill_replica.options] == [NOBODY, *range(8)]


def test_a_method_that_cannot_survive_after_a_kill_gives_a_config_without_survival():
    lab = StragglerLab(base(), initial=[]).set(kill_replica=1, kill_step=10, rejoin_step=14)
    lab.set(method="co2")
    cfg = lab.config()
    assert (cfg.runtime.survive, cfg.trouble.fault_replica, cfg.runtime.rejoin_step) == (False, -1, -1)
    cfg.validate()  # nothing left over that survival alone allows


def test_a_base_with_survival_and_a_method_that_cannot_survive_is_refused_naming_the_method():
    """The base's own survive=True stays when the panel's method cannot survive: refused before launch, naming
    the field, not launched as a run that dies."""
    lab = StragglerLab(base(survive=True, fault_replica=1, fault_replica_step=10), initial=[])
    lab.set(method="co2")
    assert lab.kill_replica.value == NOBODY and lab.kill_replica.disabled
    with pytest.raises(ConfigError, match=r"^method='co2' is not allowed: one of .*survive=True"):
        lab.config().validate()


def test_a_kill_in_the_warm_up_is_refused_naming_the_step():
    lab = StragglerLab(base(), initial=[]).set(kill_replica=1, kill_step=4)
    with pytest.raises(ConfigError, match=r"^fault_replica_step=4 is not allowed: a step after warmup_steps=4"):
        lab.config().validate()


def test_shards_2_is_refused_on_the_virtual_clock_and_allowed_on_the_wall_clock():
    lab = StragglerLab(base(shards=2), initial=[]).set(kill_replica=1, kill_step=10)
    lab.config().validate()  # real processes: a replica of two ranks dies whole
    lab.set(clock="virtual")
    with pytest.raises(ConfigError, match=r"^shards=2 is not allowed: 1 with survive=True on the virtual clock"):
        lab.config().validate()


def test_the_sliders_follow_the_steps_both_ways():
    lab = StragglerLab(base(), initial=[]).set(kill_replica=1, kill_step=15, rejoin_step=18)
    lab.set(steps=10)
    assert (lab.kill_step.max, lab.kill_step.value, lab.rejoin_step.value) == (9, 9, 9)
    lab.config().validate()  # a death at the last step, a replacement at the last step: allowed
    lab.set(steps=40)
    assert lab.kill_step.max == 39 and lab.kill_step.value == 9  # a longer run keeps the choice
    lab.set(steps=2)
    assert lab.kill_step.max == 1 and lab.kill_step.min == 0
    with pytest.raises(ConfigError) as info:  # a 2-step run is all warm-up for diloco: no empty range "4..1"
        lab.config().validate()
    assert str(info.value) == ("rejoin_step=1 is not allowed: -1 (none): steps=2 leaves no step after warmup_steps=4"
                               ": a replacement joins at a sync, after the warm-up and before the end")
