"""The launcher's progress bar ends full on success (issue 23): notebook 06's time-budget runs ended red at 9/10.

A time-budget run's progress file counts whole seconds of the budget (`RunConfig.progress_total`) and its
last write is int(t) of the last step start, below the budget; tqdm's notebook bar, closed short of its
total, turns red (danger) as for a failure. `launch.close_bar` is what `_run` calls in its `finally`.
"""

from __future__ import annotations

import pytest

from edit_lab import RunConfig
from edit_lab.runtime.launch import close_bar

pytest.importorskip("ipywidgets")
from tqdm.notebook import tqdm as notebook_tqdm  # noqa: E402


def _budget_bar(leave: bool) -> notebook_tqdm:
    """The bar of a 10 s budget run as far as its last progress write took it: 9 of 10."""
    total, unit = RunConfig(time_budget=10.0).progress_total()
    bar = notebook_tqdm(total=total, unit=unit, leave=leave, display=False)
    bar.update(9)  # the worker's last write: int(t) of its last step start, t < the budget
    return bar


def _style(bar: notebook_tqdm) -> str:
    return bar.container.children[1].bar_style


@pytest.mark.parametrize("leave", [False, True])  # the launcher's bar leaves nothing behind; a kept one turns green
def test_a_successful_budget_run_closes_its_bar_full(leave):
    bar = _budget_bar(leave)
    close_bar(bar, succeeded=True)
    assert bar.n == bar.total == 10
    assert _style(bar) != "danger"
    if leave:
        assert _style(bar) == "success"


def test_a_failed_run_leaves_its_bar_red_where_it_stopped():
    bar = _budget_bar(leave=False)
    close_bar(bar, succeeded=False)
    assert bar.n == 9 and _style(bar) == "danger"


def test_no_bar_is_nothing_to_close():
    close_bar(None, succeeded=True)
