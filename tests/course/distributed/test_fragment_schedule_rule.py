"""A reader's fragment schedule run by every rank of a real Streaming DiLoCo run (`fragment_schedule_rule`,
edit_lab/rules/), and notebook 09's check that judges one by the run (`check_fragment_schedule`).

The library's schedule as a rule gives the built-in run bit for bit (parameters, losses, landings); a different
valid schedule (the fragments in reverse order) runs, and the run records the rule's landings, each sent τ steps
before, and its closing sync; the simulator's twin follows the rule collective for collective; notebook 09's check
passes the solution's answer and tells a wrong one, without launching it.
"""

from __future__ import annotations

import json

import torch

from edit_course.exercises.nb09 import check_fragment_schedule
from edit_lab import launch
from tests.course.exercise_asserts import not_yet
from tests.course.helpers import solution_function
from tests.distributed.sim_crosscheck import compare
from tests.helpers import small
from tests.unit.test_fragment_schedule_rule import LIBRARY, REVERSED

#: Notebook 09's real run: 1 × 2, W = 2, H = 6, P = 3 (a landing every 2 steps), τ = 1.
NB09 = dict(method="streaming_diloco", shards=1, replicas=2, steps=14, warmup_steps=2, sync_interval=6,
            fragments=3, fragment_sync_delay=1, fragment_update_alpha=0.5)


def landings(run) -> list[tuple[int, int, int]]:
    """(step landed, fragment, step sent) of every landing in training."""
    return [(s["step"], s["fragment"], s["sent_at"]) for s in run.syncs
            if s["kind"] == "sync" and s.get("fragment") is not None and s.get("sent_at") is not None]


def test_the_library_schedule_as_a_rule_is_the_built_in_run_bit_for_bit(tmp_path):
    built_in = launch(small(out=str(tmp_path / "built-in"), **NB09))
    ruled = launch(small(out=str(tmp_path / "rule"), fragment_schedule_rule=LIBRARY, **NB09))
    assert landings(ruled) == landings(built_in) == [(4, 0, 3), (6, 1, 5), (8, 2, 7), (10, 0, 9), (12, 1, 11),
                                                      (14, 2, 13)]
    mine, theirs = ruled.state_dict(), built_in.state_dict()
    assert mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in theirs)
    assert ruled.train_losses() == built_in.train_losses()


def test_another_valid_schedule_changes_which_fragment_lands(tmp_path):
    built_in = launch(small(out=str(tmp_path / "built-in"), **NB09))
    run = launch(small(out=str(tmp_path / "reversed"), fragment_schedule_rule=REVERSED, **NB09))
    # fragments 2, 1, 0, 2, … at the library's steps, each sent τ = 1 step before it lands
    assert landings(run) == [(4, 2, 3), (6, 1, 5), (8, 0, 7), (10, 2, 9), (12, 1, 11), (14, 0, 13)]
    sent = [(s["step"], s["fragment"]) for s in run.syncs if s["kind"] == "fragment_sent"]
    assert sent == [(3, 2), (5, 1), (7, 0), (9, 2), (11, 1), (13, 0)]
    # the closing sync: the fragments that trained since their landing (0 has just landed at 14)
    assert [(s["step"], s["fragments"]) for s in run.syncs if s.get("final")] == [(14, [1, 2])]
    mine, theirs = run.state_dict(), built_in.state_dict()
    assert any(not torch.equal(mine[k], theirs[k]) for k in theirs)


def test_the_simulator_follows_the_rule(tmp_path):
    """sim/programs.py's time-only twin asks the same schedule: the same collectives and timeline as the virtual
    clock's run of the rule (sim/crosscheck.py)."""
    run = launch(small(clock="virtual", out=str(tmp_path / "virtual"), fragment_schedule_rule=REVERSED,
                       **{**NB09, "steps": 10}))
    assert [f for _, f, _ in landings(run)] == [2, 1, 0, 2]
    check = compare(run)
    assert check.same_collectives, check.first_difference()
    assert check.timeline_error <= 1e-9, check.worst_time()


def test_notebook_09_check_runs_the_reader_s_schedule(tmp_path, capsys):
    ref = launch(small(out=str(tmp_path / "real"), **NB09))
    answer = solution_function("09", "my_landing", tmp_path)
    assert check_fragment_schedule(answer, ref)
    said = capsys.readouterr().out
    assert "the engine ran your schedule on all 2 ranks" in said and "6 fragments" in said, said
    assert "bit-for-bit" in said
    ruled = json.loads((tmp_path / "real-my-schedule" / "config.json").read_text())
    assert ruled["rules"]["fragment_schedule"].startswith("def my_landing")  # config.json keeps the rule's source
    # by its directory, into a folder of one's choice
    assert check_fragment_schedule(answer, tmp_path / "real", out=tmp_path / "mine")
    assert (tmp_path / "mine" / "summary.json").exists()
    capsys.readouterr()
    # wrong on the grid: told where, and nothing launched
    (tmp_path / "nothing").mkdir()
    not_yet(capsys, check_fragment_schedule(lambda s, w, h, p: None if s <= w or (s - w) % (h // p) else
                                            ((s - w) // (h // p)) % p, ref, out=tmp_path / "nothing" / "run"),
            "fragment 0 first", "Nothing was launched")
    assert not (tmp_path / "nothing" / "run").exists()
