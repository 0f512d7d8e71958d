"""Answers of notebook 09 (Streaming DiLoCo against EDiT): the peak bytes per step, the fragment schedule."""

NOTEBOOK = "09_streaming_diloco.ipynb"

ANSWERS = [
    {"marker": "predict_peak_fraction = None  # Streaming DiLoCo's peak bytes per step / DiLoCo's, e.g. 0.5",
     "assigns": "predict_peak_fraction", "kind": "prediction",
     "source": """\
predict_peak_fraction = 1 / FRAGMENTS  # one fragment at a time, about 1/P of the model (the root unit is larger)"""},
    # run by the engine on every rank (RunConfig.rules.fragment_schedule): the check compares it with the library's
    # schedule.fragment_landing, then runs part 4's real run again with it and compares landings and parameters
    {"marker": "def my_landing(step: int, warmup: int, interval: int, fragments: int) -> int | None:",
     "assigns": "my_landing", "kind": "code", "check": "check_fragment_schedule(my_landing, \"runs/09_streaming/real\")  # part 4's run again, with your schedule on every rank",
     "source": """\
def my_landing(step: int, warmup: int, interval: int, fragments: int) -> int | None:
    # The fragment p that lands at the start of `step`, or None.
    every = interval // fragments  # one fragment lands every H/P steps after the warm-up
    if step <= warmup or (step - warmup) % every:
        return None
    return ((step - warmup) // every - 1) % fragments  # fragment 0 first, H/P steps after the anchors"""},
]
