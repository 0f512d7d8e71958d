"""Answers of notebook 00 (welcome): the all-gathers of one step, and where a rank sits on the mesh."""

NOTEBOOK = "00_welcome.ipynb"

ANSWERS = [
    {"marker": 'prediction = None  # your prediction: all-gathers of rank 0 in one step, with MODEL = "tiny"',
     "assigns": "prediction", "kind": "prediction",
     "source": """\
prediction = 9  # tiny: 5 forward all-gathers (root unit + 4 blocks), then the 4 freed blocks again in the backward"""},
    {"marker": "answer = None  # your answer: a rank number",
     "assigns": "answer", "kind": "exercise", "check": "check_rank(answer, replica=2, shard=1, shards=4)",
     "source": """\
answer = 9  # rank = replica·S + shard = 2·4 + 1"""},
    {"marker": 'answer = None  # your answer: all-gathers per rank per step for MODEL="small"',
     "assigns": "answer", "kind": "exercise", "check": 'check_all_gathers_per_step(answer, model="small")',
     "source": """\
answer = 13  # small: 7 units forward (root + 6 blocks) + 6 blocks gathered again in the backward"""},
]

MAY_MISS = {
    "compare_prediction": ("test parameters", "the prediction is about MODEL = \"tiny\" and the cell compares it "
                                              "only then; the test parameters run nano, so it stays unanswered"),
}
