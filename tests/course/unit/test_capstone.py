"""The capstone's mysteries (notebook 08): hidden answers, a check that accepts only the right diagnosis."""

from __future__ import annotations

import json
import shutil

import pytest

from edit_course.lessons import capstone
from edit_course.lessons.capstone import BANDWIDTHS_MB_S, KINDS, LETTERS, REPLICAS
from edit_lab.config import RunConfig
from tests.capstone_solver import solve


def test_a_seed_draws_each_kind_once_with_details_from_the_menu():
    for seed in range(40):
        ms = capstone.draw(seed)
        assert [m.letter for m in ms] == list(LETTERS)
        assert sorted(m.kind for m in ms) == sorted(KINDS)
        for m in ms:
            assert capstone._refuse(m.kind, m.detail) is None
        assert capstone.draw(seed) == ms  # the seed alone decides
    kinds_seen = {tuple(m.kind for m in capstone.draw(s)) for s in range(40)}
    assert len(kinds_seen) == 6  # every order of the three kinds happens


def test_each_mystery_config_carries_exactly_its_trouble():
    seed = 5
    for m in capstone.draw(seed):
        cfg = capstone.config_of(m, seed).validate()
        assert (cfg.stragglers.replicas != ()) == (m.kind == "straggler")
        assert (cfg.trouble.corrupt_replica >= 0) == (m.kind == "bad_data")
        assert (cfg.link.bandwidth_mb_s > 0) == (m.kind == "slow_link")
        assert cfg.replicas == REPLICAS and cfg.method == "edit" and cfg.penalty.anomaly


def _plant(tmp_path, letter: str, kind: str, detail: dict) -> None:
    d = capstone.mystery_dir(letter, tmp_path)
    d.mkdir(parents=True)
    (d / "mystery.json").write_text(json.dumps(
        {"letter": letter, "salt": "00ff", "answer_sha256": capstone._digest("00ff", kind, detail)}))


def test_is_right_accepts_only_the_planted_answer(tmp_path):
    _plant(tmp_path, "A", "straggler", {"replica": 2, "factor": 2.0})
    assert capstone.is_right("A", "straggler", tmp_path, replica=2, factor=2)  # 2 and 2.0 are one answer
    assert not capstone.is_right("A", "straggler", tmp_path, replica=1, factor=2.0)
    assert not capstone.is_right("A", "straggler", tmp_path, replica=2, factor=3.0)
    assert not capstone.is_right("A", "bad_data", tmp_path, replica=2)


@pytest.mark.parametrize("kind, detail, says", [
    ("stragler", {"replica": 1}, "kind must be one of straggler, bad_data, slow_link"),
    ("straggler", {"replica": 1}, "names replica, factor"),
    ("bad_data", {"replica": REPLICAS}, f"replica is one of 0..{REPLICAS - 1}"),
    ("straggler", {"replica": 0, "factor": 2.5}, "factor is one of"),
    ("slow_link", {"bandwidth_mb_s": 2.0}, "bandwidth_mb_s is one of"),
])
def test_a_malformed_diagnosis_is_named_not_judged(tmp_path, kind, detail, says, capsys):
    _plant(tmp_path, "B", "bad_data", {"replica": 0})
    with pytest.raises(ValueError, match=says):
        capstone.is_right("B", kind, tmp_path, **detail)
    assert capstone.check("B", kind, tmp_path, **detail) is False
    assert "not a diagnosis" in capsys.readouterr().out


def test_check_prints_its_verdict(tmp_path, capsys):
    _plant(tmp_path, "C", "slow_link", {"bandwidth_mb_s": BANDWIDTHS_MB_S[1]})
    assert capstone.check("C", None, tmp_path) is False
    assert capstone.check("C", "slow_link", tmp_path, bandwidth_mb_s=BANDWIDTHS_MB_S[1]) is True
    assert capstone.check("C", "slow_link", tmp_path, bandwidth_mb_s=BANDWIDTHS_MB_S[0]) is False
    out = capsys.readouterr().out.splitlines()
    assert out == ["mystery C: not answered yet", f"mystery C: slow_link (bandwidth_mb_s={BANDWIDTHS_MB_S[1]}) is right.",
                   f"mystery C: slow_link (bandwidth_mb_s={BANDWIDTHS_MB_S[0]}) is not it: look again."]


SHIPPED = capstone.mysteries()


def test_the_shipped_mysteries_exist_and_hide_their_troubles():
    assert sorted(SHIPPED) == list(LETTERS)
    defaults = RunConfig()
    for letter, run in SHIPPED.items():
        conf = RunConfig.load(run.path / "config.json")
        for name in capstone.HIDDEN_FIELDS:
            assert conf.get(name) == defaults.get(name), name
        assert set(json.loads((run.path / "mystery.json").read_text())) == {"letter", "salt", "answer_sha256"}


@pytest.mark.parametrize("letter", LETTERS)
def test_each_shipped_mystery_is_solvable_with_the_lab_tools(letter):
    """The solver uses only analysis tables and events; the check accepts its answer and refuses a neighbour."""
    kind, detail = solve(SHIPPED[letter])
    assert capstone.is_right(letter, kind, **detail), (letter, kind, detail)
    same_kind, other = capstone.one_detail_changed(kind, detail)
    assert same_kind == kind and other != detail
    assert not capstone.is_right(letter, kind, **other)


def test_the_three_shipped_troubles_are_the_three_kinds():
    assert sorted(solve(run)[0] for run in SHIPPED.values()) == sorted(KINDS)
