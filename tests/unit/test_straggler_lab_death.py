"""The StragglerLab's death controls (edit_lab/ui/death.py): a replica killed at a step while the run trains,
survival carrying on. The controls' states and the config they give, then a run on the virtual clock driven through
the panel: the views, the survivors' steps after the death, the timeline's episode and the loss tab per replica."""

from __future__ import annotations

import pytest

from edit_lab.config import ConfigError, RunConfig
from edit_lab.ui.death import NOBODY, death_window, deaths
from edit_lab.ui.lab import StragglerLab


def base(**kw) -> RunConfig:
    return RunConfig(method="diloco", shards=1, replicas=3, steps=30, warmup_steps=4, sync_interval=4, model="nano",
                     seq_len=32, batch_size=4, eval_every=0, eval_batches=1, progress=False).replace(**kw)


def test_nobody_dies_by_default_and_the_config_is_the_base():
    lab = StragglerLab(base(), initial=[])
    assert lab.kill_replica.value == NOBODY and lab.kill_step.disabled and lab.rejoin_step.disabled
    cfg = lab.config()
    assert not cfg.runtime.survive and cfg.trouble.fault_replica == -1
    assert [v for _, v in lab.kill_replica.options] == [NOBODY, 0, 1, 2]


def test_a_chosen_death_sets_survival_and_the_fault():
    lab = StragglerLab(base(), initial=[]).set(kill_replica=1, kill_step=13, rejoin_step=20)
    assert not lab.kill_step.disabled and not lab.rejoin_step.disabled
    cfg = lab.config()
    assert cfg.runtime.survive and cfg.runtime.rejoin_step == 20
    assert (cfg.trouble.fault_replica, cfg.trouble.fault_replica_step, cfg.trouble.fault_replica_kind) == (1, 13, "kill")
    lab.set(steps=16)
    assert lab.kill_step.max == 15 and lab.rejoin_step.max == 15  # steps 0 … 15


def test_a_method_that_cannot_survive_disables_the_control_and_says_why():
    lab = StragglerLab(base(), initial=[]).set(kill_replica=2)
    lab.set(method="aedit")
    assert lab.kill_replica.disabled and lab.kill_replica.value == NOBODY
    assert "aedit cannot survive a death" in lab.kill_replica.tooltip
    assert not lab.config().runtime.survive
    lab.set(method="edit")
    assert not lab.kill_replica.disabled and "SIGKILL" in lab.kill_replica.tooltip


def test_a_death_the_run_cannot_take_is_refused_naming_the_field():
    lab = StragglerLab(base(), initial=[]).set(kill_replica=1, kill_step=10, time_budget=5.0)
    with pytest.raises(ConfigError, match="time_budget"):
        lab.config().validate()


def test_the_panel_kills_a_replica_on_the_virtual_clock_and_the_survivors_go_on(tmp_path):
    lab = StragglerLab(base(), out_dir=tmp_path, initial=[]).set(kill_replica=1, kill_step=13, rejoin_step=20,
                                                                    clock="virtual")
    run = lab.run()
    views = [v["members"] for v in run.summary["survival"]["views"]]
    assert views == [[0, 1, 2], [0, 2], [0, 1, 2]]
    assert [d["replica"] for d in deaths(run)] == [1]
    last = {r: max(m["step"] for m in run.metrics if m.get("kind") == "train" and m["replica"] == r) for r in (0, 2)}
    assert last == {0: 29, 2: 29}  # the survivors trained to the end
    assert death_window(run) == (12, 16)  # the step before the death, then the first sync after it
    episode = [t.meta["piece"] for t in lab.figures["timeline"].data if (t.meta or {}).get("role") == "episode"]
    assert "death" in episode
    loss = lab.figures["loss"]
    assert "replica 1 killed at step 13; survivors [0, 2] trained on to step 29" in loss.layout.title.text
    assert {t.name for t in loss.data if t.name} >= {f"{n} · replica {r}" for n in [t.name.split(" · ")[0]
                                                                                    for t in loss.data[:1]]
                                                      for r in (0, 1, 2)}


@pytest.mark.parametrize("replicas, dead, rejoin, views", [
    (2, 1, -1, [[0, 1], [0]]),  # R = 2, no replacement: one survivor trains alone to the end
    (3, 0, 20, [[0, 1, 2], [1, 2], [0, 1, 2]]),  # replica 0 dies: rank 0's duties move to replica 1
    (4, 3, -1, [[0, 1, 2, 3], [0, 1, 2]]),
])
def test_the_panel_s_edges_on_the_virtual_clock(tmp_path, replicas, dead, rejoin, views):
    lab = StragglerLab(base(replicas=replicas, method="edit"), out_dir=tmp_path, initial=[])
    lab.set(kill_replica=dead, kill_step=13, rejoin_step=rejoin, clock="virtual")
    run = lab.run()
    assert [v["members"] for v in run.summary["survival"]["views"]] == views
    survivors = [r for r in range(replicas) if r != dead]
    last = {r: max(m["step"] for m in run.metrics if m.get("kind") == "train" and m["replica"] == r)
            for r in survivors}
    assert set(last.values()) == {29}
    assert f"replica {dead} killed at step 13; survivors {survivors} trained on to step 29" in \
        lab.figures["loss"].layout.title.text


def test_the_sliders_offer_only_steps_the_run_has_and_the_config_refuses_the_others():
    lab = StragglerLab(base(), initial=[]).set(kill_replica=1, kill_step=30, rejoin_step=40)
    assert lab.kill_step.value == 29 and lab.rejoin_step.value == 29  # a 30-step run's last step
    lab.config().validate()
    with pytest.raises(ConfigError, match="fault_replica_step"):
        base(survive=True, fault_replica=1, fault_replica_step=30).validate()  # never starts: refused, not ignored
