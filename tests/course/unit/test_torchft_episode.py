"""Notebook 10's torchft episode: the skip line where torchft does not import, and the episode's configuration."""

from __future__ import annotations

import sys

from edit_course.lessons import torchft_episode as tfe


def test_skipped_with_its_reason_where_torchft_does_not_import(monkeypatch):
    monkeypatch.setitem(sys.modules, "torchft", None)  # an import of it now raises ImportError
    ok, why = tfe.available()
    assert not ok and "torchft does not import here" in why and "Linux" in why


def test_the_episode_is_the_oracle_tests_one(tmp_path):
    cfg = tfe.episode_config("discard", tmp_path)
    assert (cfg.replicas, cfg.shards, cfg.steps, cfg.schedule.sync_interval, cfg.schedule.warmup_steps) == (3, 1, 12, 3, 0)
    assert (cfg.get("fault_replica"), cfg.get("fault_replica_step"), cfg.get("survive_on_failure")) == (tfe.DEAD, tfe.STEP, "discard")
    assert (tfe.STEP + 1) % cfg.schedule.sync_interval == 0  # the leaver can join that sync's quorum (discard)


def test_a_wrong_mode_is_refused_before_either_side_runs(tmp_path):
    """A typo in TORCHFT_MODES names the field and its allowed values, and nothing is launched (no run directory)."""
    import pytest

    from edit_lab.config import ConfigError

    with pytest.raises(ConfigError, match=r"survive_on_failure='retyr' is not allowed: one of retry, discard"):
        tfe.side_by_side(tmp_path, "retyr")
    assert not (tmp_path / "lab_retyr").exists()
