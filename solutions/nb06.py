"""Answers of notebook 06 (stragglers and A-EDiT): steps per replica, what EDiT waits, sync's share, A-EDiT's rounds,
a straggler kind of one's own (the throttling GPU)."""

NOTEBOOK = "06_stragglers_and_aedit.ipynb"

ANSWERS = [
    {"marker": 'predict_step_ratio = {"sync": None, "edit": None, "aedit": None}  # fast replica\'s steps / slow '
               'replica\'s steps',
     "assigns": "predict_step_ratio", "kind": "prediction",
     "source": """\
# sync: lockstep; EDiT: τ steps per round for both; A-EDiT: T_sync seconds for both, so SLOW× the steps
predict_step_ratio = {"sync": 1.0, "edit": 1.0, "aedit": SLOW}  # fast replica's steps / slow replica's steps"""},
    {"marker": "answer_edit_wait_ms = None  # your answer, in milliseconds",
     "assigns": "answer_edit_wait_ms", "kind": "exercise", "check": "check_edit_wait_ms(answer_edit_wait_ms)",
     "source": """\
answer_edit_wait_ms = 4 * (200 - 100)  # both train τ = 4 steps; the fast one waits the difference: 400 ms"""},
    {"marker": "answer_sync_share = None  # your answer, a number between 0 and 1",
     "assigns": "answer_sync_share", "kind": "exercise", "check": "check_sync_share(answer_sync_share)",
     "source": """\
answer_sync_share = 2 * 2000 / (4000 + 2000)  # both at the slowest pace against the sum of own paces: 2/3"""},
    {"marker": "answer_round_steps = None  # your answer, e.g. [4, 4]",
     "assigns": "answer_round_steps", "kind": "exercise", "check": "check_aedit_round_steps(answer_round_steps)",
     "source": """\
answer_round_steps = [800 // 100, 800 // 200]  # the same 0.8 s for both: [8, 4] steps"""},
    # judged by a run (the virtual clock's, in the notebook): tests/course/distributed/test_straggler_rule.py runs this
    # answer against check_straggler_in_a_run in a temporary directory, and the executed notebook scores it
    {"marker": "def my_throttle(step: int, replica: int, compute_s: float) -> float | None:",
     "assigns": "my_throttle", "kind": "code",
     "source": """\
def my_throttle(step: int, replica: int, compute_s: float) -> float | None:
    \"\"\"Seconds this replica pauses after `step`, whose own compute took `compute_s` seconds (0.0: no pause).\"\"\"
    if replica == 1 and step % 2 == 1:  # the throttling GPU, on its odd steps: the step takes 2× its compute
        return compute_s  # (2 − 1) · compute_s
    return 0.0"""},
]

MAY_MISS = {
    "compare_prediction": ("always", "the steps each replica trains in a time budget follow the wall clock: the "
                                     "ratios (1, 1, SLOW within 15%) hold on a machine with a core per rank, and a "
                                     "short budget (the test parameters) or shared cores move them"),
}
