"""Answers of notebook 07 (scaling out): torchrun's bits, its sizes, a rank's machine."""

NOTEBOOK = "07_scaling_out.ipynb"

ANSWERS = [
    {"marker": "predict_same_bits = None  # True or False",
     "assigns": "predict_same_bits", "kind": "prediction",
     "source": """\
predict_same_bits = True  # same config, seeds, collectives in the same order: the launcher changes no bit"""},
    {"marker": "answer_torchrun = None  # your answer, e.g. (1, 32)",
     "assigns": "answer_torchrun", "kind": "exercise", "check": "check_torchrun_sizes(answer_torchrun)",
     "source": """\
answer_torchrun = (4, 8)  # --nnodes = R (one replica per machine), --nproc-per-node = S (its shards)"""},
    {"marker": "answer_machine_of_rank = None  # your answer, e.g. (0, 0)",
     "assigns": "answer_machine_of_rank", "kind": "exercise", "check": "check_machine_of_rank(answer_machine_of_rank)",
     "source": """\
answer_machine_of_rank = divmod(21, 8)  # 21 = 2·8 + 5: machine 2, local rank 5"""},
]

MAY_MISS = {}
