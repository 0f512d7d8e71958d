"""Answers of notebook 02 (Local SGD and DiLoCo): the bytes τ saves, the outer Nesterov step (checked on tensors, then
in a real run), the first sync."""

NOTEBOOK = "02_local_sgd_and_diloco.ipynb"

ANSWERS = [
    {"marker": "prediction = None  # your prediction: sync's sync-group bytes per step ÷ diloco's, after warm-up",
     "assigns": "prediction", "kind": "prediction",
     "source": """\
prediction = TAU  # sync sends one gradient shard every step, DiLoCo one parameter shard (as large) every τ steps"""},
    # also judged by a run: the notebook's next check cell ships this function to every rank
    # (check_outer_step_in_a_run, the solutions mode runs it), and tests/course/distributed/test_outer_step_rule.py runs
    # this answer against it in a temporary directory
    {"marker": "def outer_step(anchor: torch.Tensor, delta_bar: torch.Tensor, buf: torch.Tensor, lr: float, "
               "momentum: float):",
     "assigns": "outer_step", "kind": "code", "check": "passed = check_outer_step(outer_step, lr=0.7, momentum=0.8)",
     "setup": ["from edit_lab.core.outer import OuterState"],
     "source": """\
def outer_step(anchor: torch.Tensor, delta_bar: torch.Tensor, buf: torch.Tensor, lr: float, momentum: float):
    \"\"\"One outer step: returns (new anchor, new momentum buffer). `buf` starts at zeros.\"\"\"
    buf = momentum * buf + delta_bar
    new_anchor = anchor - lr * (delta_bar + momentum * buf)  # Nesterov: look ahead once more along the new buffer
    return new_anchor, buf"""},
    {"marker": "answer = None  # your answer, a step number",
     "assigns": "answer", "kind": "exercise", "check": "check_first_sync_step(answer, warmup=3, interval=2)",
     "source": """\
answer = 5  # W + τ = 3 + 2: step 3 only creates the anchors, then 2 local steps"""},
]

MAY_MISS = {}
