"""The digest nbval compares instead of a figure's JSON (tests/nbval/lesson_digest.py), on hand-built figures:
it names what the figure says, moves when a number moves, and is the same however plotly serialises it."""

from __future__ import annotations

import base64
import json

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio

from tests.nbval.lesson_digest import array_digest, figure_digest, install, kernel_env


def _figure(y: list[float]) -> go.Figure:
    fig = go.Figure(go.Scatter(x=[1, 2, 3], y=y, name="EDiT"), layout=dict(title="loss against time"))
    fig.add_bar(x=["sync", "edit"], y=np.array([0.5, 0.25]), name="exposed")
    fig.update_xaxes(title="virtual s")
    fig.add_annotation(text="1.2× faster", x=1, y=1)
    return fig


def test_the_digest_says_what_the_figure_says() -> None:
    assert figure_digest(_figure([4.0, 3.5, 3.25])).splitlines() == [
        "figure: loss against time",
        "  xaxis: virtual s",
        "  annotation: 1.2× faster",
        "  trace 0: scatter 'EDiT'",
        "    x: n=3 [1, 2, 3]",
        "    y: n=3 [4, 3.5, 3.25]",
        "  trace 1: bar 'exposed'",
        "    x: n=2 ['sync', 'edit']",
        "    y: n=2 [0.5, 0.25]",
    ]


def test_a_moved_number_moves_the_digest_and_float_noise_does_not() -> None:
    base = figure_digest(_figure([4.0, 3.5, 3.25]))
    assert figure_digest(_figure([4.0, 3.5, 3.26])) != base
    assert figure_digest(_figure([4.0, 3.5, 3.25 + 1e-9])) == base


def test_typed_arrays_and_lists_give_one_digest() -> None:
    """plotly 6+ writes numpy arrays as base64 typed arrays in its JSON; older versions wrote lists."""
    values = np.arange(40, dtype="float64") / 8
    typed = {"dtype": "f8", "bdata": base64.b64encode(values.tobytes()).decode()}
    assert array_digest(typed) == array_digest(values.tolist()) == array_digest(values)
    assert array_digest(values) == "n=40 min 0 max 4.875 sum 97.5 first [0, 0.125, 0.25]"
    from_json = json.loads(pio.to_json(_figure([4.0, 3.5, 3.25])))  # whatever this plotly writes
    assert figure_digest(from_json) == figure_digest(_figure([4.0, 3.5, 3.25]))


def test_the_test_kernel_shows_figures_as_digests_and_frames_as_text(tmp_path) -> None:
    import pandas as pd

    env = kernel_env(tmp_path)
    startup = tmp_path / "ipython" / "profile_default" / "startup" / "00-lesson-digest.py"
    assert env["IPYTHONDIR"] == str(tmp_path / "ipython") and startup.exists()
    saved = (pio.renderers.default, pd.get_option("display.notebook_repr_html"))
    try:
        install()
        bundle = _figure([4.0, 3.5, 3.25])._repr_mimebundle_()
        assert set(bundle) == {"text/plain"} and bundle["text/plain"].startswith("figure: loss against time")
        assert pd.DataFrame({"a": [1]})._repr_html_() is None
    finally:
        pio.renderers.default = saved[0]
        pd.set_option("display.notebook_repr_html", saved[1])
