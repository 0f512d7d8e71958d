"""Helpers for tests that launch real multi-process runs (gloo, ≤ 4 ranks)."""

from __future__ import annotations

import pytest

from edit_lab import launch
from tests.helpers import small


@pytest.fixture
def run_small(tmp_path):
    """launch(small(**kw)) into a fresh directory under tmp_path."""
    counter = {"n": 0}

    def _run(**kw):
        counter["n"] += 1
        kw.setdefault("out", str(tmp_path / f"run{counter['n']}"))
        return launch(small(**kw))

    return _run
