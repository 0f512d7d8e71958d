"""The StragglerLab kills a replica of a real run (a process per rank) while it trains (edit_lab/ui/death.py): the
run ends with exit 0 and no process left, the views go {0,1,2} -> {0,2} -> {0,1,2}, the survivors train to the
end and the panel's figures show the episode. Structure only, never this machine's speed."""

from __future__ import annotations

from edit_lab.config import RunConfig
from edit_lab.ui.death import deaths
from edit_lab.ui.lab import StragglerLab
from edit_lab.viz.episode import episode_spans


def test_the_panel_kills_a_real_replica_and_the_survivors_go_on(tmp_path):
    base = RunConfig(method="edit", shards=1, replicas=3, steps=30, warmup_steps=4, sync_interval=4, model="nano",
                     seq_len=32, batch_size=4, eval_every=0, eval_batches=1, progress=False, timeout_s=10)
    lab = StragglerLab(base, out_dir=tmp_path, initial=[]).set(kill_replica=1, kill_step=13, rejoin_step=20)
    lab.click()  # as a reader presses Run: errors would land in the panel
    assert lab.error is None, lab.error
    run = lab.last_run
    assert [v["members"] for v in run.summary["survival"]["views"]] == [[0, 1, 2], [0, 2], [0, 1, 2]]
    death = deaths(run)
    assert [d["replica"] for d in death] == [1] and "-9" in death[0]["cause"]  # a SIGKILL, seen by the launcher
    trained = {r: {m["step"] for m in run.metrics if m.get("kind") == "train" and m["replica"] == r} for r in range(3)}
    assert trained[0] >= set(range(30)) and trained[2] >= set(range(30))  # the survivors never stopped
    assert not trained[1] & set(range(13, 20))  # the dead replica trained nothing until its replacement
    assert "killed at step 13" in lab.figures["loss"].layout.title.text
    # the timeline shows the steps around the death with the survivors' reaction in its band (where the death's
    # own marker falls depends on when the launcher saw the exit: a timing, not asserted)
    drawn = {(t.meta or {}).get("piece") for t in lab.figures["timeline"].data if (t.meta or {}).get("role") == "episode"}
    assert "view" in drawn and {s["piece"] for s in episode_spans(run)} >= {"death", "view", "join"}
