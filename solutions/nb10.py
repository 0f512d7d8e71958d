"""Answers of notebook 10 (training through a replica's death): the work a restart re-trains, the donor rule."""

NOTEBOOK = "10_surviving_a_death.ipynb"

ANSWERS = [
    {"marker": "predict_restart_lost = None  # replica-steps re-trained after a restart, e.g. 10",
     "assigns": "predict_restart_lost", "kind": "prediction",
     "source": """\
# syncs at WARMUP + TAU, + 2·TAU, ...; a checkpoint at every CHECKPOINT_EVERY-th; the newest before the death
syncs = range(WARMUP + TAU, FAULT_STEP, TAU)
checkpoint = [s for i, s in enumerate(syncs, 1) if i % CHECKPOINT_EVERY == 0][-1]
predict_restart_lost = (FAULT_STEP - checkpoint) * REPLICAS  # every replica goes back, the survivors too"""},
    # run by the engine on every rank (donor_rule): the notebook's check tries it on every view of 3 replicas, then
    # runs the lesson's surviving episode again with it; the in-process test checks the views only (no launch)
    {"marker": "def my_donor(members, joined):",
     "assigns": "my_donor", "kind": "code",
     "check": "check_donor(my_donor, OUT / \"survive\")  # part 2's run again, with your rule on every rank",
     "setup": ["STEPS = 60", "from pathlib import Path"],
     "source": """\
def my_donor(members, joined):
    # members: the view's replica ids (sorted); joined: the replacements joining in it
    return max(m for m in members if m not in joined)  # the highest live member that did not just join"""},
]
