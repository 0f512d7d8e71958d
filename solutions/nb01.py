"""Answers of notebook 01 (synchronous data parallel): the straggler's cost, an all-reduce from its parts (on plain
tensors, then run by every rank of a real run)."""

NOTEBOOK = "01_synchronous_data_parallel.ipynb"

ANSWERS = [
    {"marker": "prediction = None  # your prediction: tokens/s with the straggler ÷ tokens/s of the baseline",
     "assigns": "prediction", "kind": "prediction",
     "source": """\
prediction = 0.7  # s / (s + p): the pause p stretches only the compute, about half of a step s, never a collective"""},
    {"marker": "def all_reduce_mean(grads: list[torch.Tensor]) -> list[torch.Tensor]:",
     "assigns": "all_reduce_mean", "kind": "code", "check": "passed = check_all_reduce_mean(all_reduce_mean)",
     "setup": ["def reduce_scatter_mean(tensors: list[torch.Tensor]) -> list[torch.Tensor]:"],
     "source": """\
def all_reduce_mean(grads: list[torch.Tensor]) -> list[torch.Tensor]:
    \"\"\"Every rank receives the mean of all ranks' tensors.\"\"\"
    return all_gather(reduce_scatter_mean(grads))  # rank i gets slice i of the mean, then every rank every slice"""},
    # judged by a real run (two processes, against the built-in all-reduce's run): tests/course/distributed/
    # test_all_reduce_rule.py runs this answer against check_all_reduce_in_a_run, and the executed notebook scores it
    {"marker": "def my_all_reduce(grad: torch.Tensor, reduce_scatter, all_gather) -> torch.Tensor | None:",
     "assigns": "my_all_reduce", "kind": "code",
     "source": """\
def my_all_reduce(grad: torch.Tensor, reduce_scatter, all_gather) -> torch.Tensor | None:
    \"\"\"This rank's gradient after the all-reduce over the sync group (`grad`: its flat shard of one unit).\"\"\"
    return all_gather(reduce_scatter(grad))  # this rank's slice of the mean, then every replica's slice"""},
    {"marker": "answer = None  # your answer, a fraction between 0 and 1",
     "assigns": "answer", "kind": "exercise", "check": "check_throughput_fraction(answer, replicas=8, factor=3.0)",
     "source": """\
answer = 1 / 3  # every step waits for the 3× slower replica, however many replicas there are"""},
]

MAY_MISS = {
    "compare_prediction": ("always", "tokens/s is a wall-clock timing: 0.68–0.79 on the 2-core machine of "
                                     "docs/teaching.md, and it moves with the cores and the load (15% tolerance)"),
}
