"""Independent implementations the lab is checked against, apart from both the library and the course.

`torchft_diloco`: torchft's own DiLoCo on plain, unsharded replicas (threads with a torchft `Manager` each), what the
lab's `diloco`, `streaming_diloco` and survival's `discard` and `retry` must equal to float rounding. The library's
tests import it (tests/distributed/test_torchft_*.py), and so does notebook 10 (`edit_course/lessons/torchft_episode.py`),
which runs the same death beside the lab's: a package of its own, so that neither the library nor its tests import
the course. The library never imports it (tests/unit/test_layers.py). torchft is imported only when an oracle runs.
"""
