"""The course's formulas that restate the library's, checked against it (the library's own: tests/unit/
test_one_definition.py)."""

from __future__ import annotations

import pytest


def test_the_exercise_formula_of_a_transfer_is_the_link_models():
    """Notebook 04's student-facing formula (exercises.nb04.transfer_ms) must be the library's link."""
    from edit_course.exercises.nb04 import transfer_ms
    from edit_lab.core.comm import LinkModel

    for nbytes, latency_ms, mbps in ((99_072, 2.0, 20.0), (1, 0.0, 1.0), (10**9, 5.0, 1000.0)):
        want_ms = LinkModel.of(latency_ms, mbps).transfer_time(nbytes) * 1e3
        assert transfer_ms(nbytes, latency_ms, mbps) == pytest.approx(want_ms)
