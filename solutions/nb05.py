"""Answers of notebook 05 (the pseudo-gradient penalty): the units flagged, the per-unit verdict, the playground, softmax
weights, the clip factor."""

NOTEBOOK = "05_pseudo_gradient_penalty.ipynb"

ANSWERS = [
    {"marker": 'print(f"the {MODEL} model has {get_size(MODEL).n_layers + 1} units (the root unit and '
               '{get_size(MODEL).n_layers} blocks)")',
     "assigns": "predict_units_flagged", "kind": "prediction",
     "source": """\
print(f"the {MODEL} model has {get_size(MODEL).n_layers + 1} units (the root unit and {get_size(MODEL).n_layers} blocks)")
predict_units_flagged = get_size(MODEL).n_layers + 1  # all of them: the spike multiplied every parameter at once"""},
    {"marker": "predict_out_everywhere = None  # True or False: once flagged somewhere, is replica 1 out of every unit "
               "at that sync?",
     "assigns": "predict_out_everywhere", "kind": "prediction",
     "source": """\
predict_out_everywhere = False  # no: each unit's detector judges that unit alone, and bad data does not raise every unit's norm"""},
    {"marker": "from edit_course.exercises.nb05 import playground_answers",
     "assigns": "my_playground_answers", "kind": "written",
     "source": """\
from edit_course.exercises.nb05 import playground_answers

my_playground_answers = "yes, still flagged; no; nobody; nobody with the memory, replica 0 without it"
playground_answers(my_playground_answers);  # the library's rule on the playground's series"""},
    {"marker": "import math",
     "assigns": "my_softmax_weights", "kind": "code", "check": "check_softmax_function(my_softmax_weights)",
     "says": "Your softmax weights match",
     "source": """\
import math


def my_softmax_weights(norms: list, temperature: float, anomalous: list) -> list | None:
    \"\"\"One weight per replica: exp(−G/T) normalised over the replicas not flagged, 0 for a flagged one.\"\"\"
    kept = [g for g, flagged in zip(norms, anomalous) if not flagged]
    if not kept:
        return [0.0] * len(norms)  # every replica flagged: nobody's Δ is used
    g_min = min(kept)  # subtracting the smallest norm changes no weight, and exp(−1000) no longer underflows to 0/0
    e = [0.0 if flagged else math.exp(-(g - g_min) / temperature) for g, flagged in zip(norms, anomalous)]
    return [x / sum(e) for x in e]"""},
    {"marker": "answer_clip_factor = None  # your answer",
     "assigns": "answer_clip_factor", "kind": "exercise", "check": "check_clip_factor(answer_clip_factor)",
     "source": """\
answer_clip_factor = min(1.0, 10 / (20 + 1e-6))  # φ / n: the aggregate of norm 20 is scaled down to norm 10"""},
]

MAY_MISS = {}
