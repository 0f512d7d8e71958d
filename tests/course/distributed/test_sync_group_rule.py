"""A reader's sync groups used by a real run (`sync_group_rule`, edit_lab/rules/), and notebook 03's check that
judges them by that run against one with the mesh's own groups (`check_sync_group_in_a_run`).

The right function passes on a real gloo 2 × 2 run (4 processes, bit for bit the mesh's run); the shard groups
used as sync groups, a valid partition but the wrong one, run and are told what the run showed; a partition
pairing shard 0 of one replica with shard 1 of the other runs too (virtual clock); groups that are no partition,
or a rule that raises, are refused before any process starts, naming `sync_group_rule`; the notebook's shipped
cell launches nothing.
"""

from __future__ import annotations

import contextlib
import io
import json
import re

import pytest

from edit_course.exercises.nb03 import check_sync_group_in_a_run
from edit_course.tools.notebooks import notebooks
from edit_lab import launch
from edit_lab.config import ConfigError
from edit_lab.rules import rule_source
from tests.course.exercise_asserts import not_yet
from tests.course.helpers import solution_function
from tests.helpers import small


def columns(rank, shards, replicas):
    return [r * shards + rank % shards for r in range(replicas)]


def rows(rank, shards, replicas):  # the shard groups: a partition into groups of R ranks when S == R
    return [rank // shards * shards + s for s in range(shards)]


def crossed(rank, shards, replicas):  # shard s of one replica with shard s + 1 of the next
    shard, replica = rank % shards, rank // shards
    return sorted(r * shards + (shard + r - replica) % shards for r in range(replicas))


def overlapping(rank, shards, replicas):  # rank 1 says [1, 2], rank 2 says [0, 2]: no partition
    return [rank, (rank + 2) % (shards * replicas)] if rank % 2 == 0 else [rank, (rank + 1) % (shards * replicas)]


def raises(rank, shards, replicas):
    raise KeyError(rank)


def base(**kw):
    """EDiT on 2 × 2 ranks of nano, two syncs (steps 5 and 8, after a warm-up of 2)."""
    return small(**{"method": "edit", "shards": 2, "replicas": 2, "steps": 8, **kw})


@pytest.fixture(scope="module")
def wall(tmp_path_factory):
    """The right answer on a real gloo run (and the reference beside it), then the shard groups (reusing it)."""
    d = tmp_path_factory.mktemp("sync_groups")
    said = {}
    for name, fn, kw in (("right", columns, {}), ("rows", rows, {"plain_check": False})):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            result = check_sync_group_in_a_run(fn, base(), d / name, **kw)
        said[name] = (result, buf.getvalue())
    return d, said


def test_the_right_groups_pass_on_a_real_2x2_run_bit_for_bit(wall):
    d, said = wall
    result, out = said["right"]
    assert result and result.state == "correct", out
    assert out.startswith("Correct: your sync groups ran on all 4 ranks (wall clock)"), out
    assert "bit for bit" in out and "the anchors of all 6 unit shards agree" in out, out
    from edit_lab.records.run import Run

    run = Run(d / "right")
    assert run.config.rules.sync_group.startswith("def columns(rank, shards, replicas):")  # config.json has it
    assert (d / "right-mesh-groups" / "summary.json").exists()  # the reference beside it


def test_the_shard_groups_as_sync_groups_run_and_are_told_the_damage(wall, capsys):
    d, said = wall
    result, out = said["rows"]
    assert not result and result.state == "not yet right", out
    assert out.startswith("Not yet: your sync groups ran on all 4 ranks (wall clock), but they are not the mesh's: "
                          "rank 0's group was [0, 1] (replica 0 shard 0, replica 0 shard 1) where the mesh's is "
                          "[0, 2]"), out
    assert "averaged shards that hold different parameters" in out and "2 ranks of replica 0" in out, out
    assert "at the first sync (step 5) the validation loss went from" in out, out
    assert "the replicas do not hold the same model" in out, out
    assert (d / "rows" / "summary.json").exists()  # the run itself finished: its records judged it
    from edit_lab.records.run import Run

    final = [m for m in Run(d / "rows").metrics if m.get("final")][0]
    assert final["val_loss_spread"] > 0 and f"{final['val_loss_spread']:.4f}" in out  # from the run, not typed in


def test_a_crossed_partition_runs_on_the_virtual_clock_and_the_answer_in_solutions_passes(tmp_path, capsys):
    """Shard 0 of replica 0 with shard 1 of replica 1: the virtual clock honours the groups too."""
    assert not check_sync_group_in_a_run(crossed, base(clock="virtual"), tmp_path / "crossed", plain_check=False)
    out = not_yet(capsys, None, "rank 0's group was [0, 3] (replica 0 shard 0, replica 1 shard 1)", "(virtual clock)",
                  "averaged shards that hold different parameters", "the replicas do not hold the same model")
    assert "ranks of replica" not in out  # every group holds one rank of each replica
    assert not check_sync_group_in_a_run(crossed, base(clock="virtual"), tmp_path / "plain")  # the plain check first
    not_yet(capsys, None, "you gave [0, 5, 10]; the mesh says [0, 4, 8]", "Nothing was launched")
    assert not (tmp_path / "plain").exists()

    sync_group_of = solution_function("03", "sync_group_of", tmp_path)
    assert rule_source(sync_group_of).startswith("def sync_group_of(")
    assert check_sync_group_in_a_run(sync_group_of, base(clock="virtual"), tmp_path / "crossed")
    out = capsys.readouterr().out  # the reference of the crossed run is reused: the same configuration
    assert out.startswith("Correct: your sync groups ran on all 4 ranks (virtual clock)") and "bit for bit" in out


@pytest.mark.parametrize("rule, says", [
    (overlapping, "every member of a group must give the same group"),
    (raises, "raised KeyError: 0"),
    (columns, None),
])
def test_groups_that_cannot_run_are_refused_before_launch_naming_the_field(tmp_path, capsys, rule, says):
    if says is None:  # a valid rule on a mesh where it is not a partition into groups of R: 2 × 3 asks for 3
        cfg = base(shards=3, replicas=2, sync_group_rule=rule_source(rows), out=str(tmp_path / "run"))
        says = "fn(0, 3, 2) = [0, 1, 2] has 3 ranks"
    else:
        cfg = base(sync_group_rule=rule_source(rule), out=str(tmp_path / "run"))
    with pytest.raises(ConfigError, match=r"^sync_group_rule='def \w+\(rank, shards, replicas\):.*' is not allowed: "):
        launch(cfg)
    with pytest.raises(ConfigError, match=re.escape(says)):
        launch(cfg)
    assert not (tmp_path / "run").exists()
    if rule is not columns:
        assert not check_sync_group_in_a_run(rule, base(), tmp_path / "checked", plain_check=False)
        not_yet(capsys, None, "refused before any process started", "sync_group_rule")
        assert not (tmp_path / "checked").exists()


def test_the_shipped_cell_is_not_answered_yet_and_launches_nothing(tmp_path, capsys):
    nb = next(p for p in notebooks() if p.name.startswith("03"))
    cells = json.loads(nb.read_text())["cells"]
    shipped = next("".join(c["source"]) for c in cells if "".join(c["source"]).startswith("def sync_group_of("))
    ns: dict = {}
    exec(shipped, ns)  # noqa: S102 - the notebook's own cell
    result = check_sync_group_in_a_run(ns["sync_group_of"], base(), tmp_path / "run")
    assert not result and result.state == "not answered yet"
    out = capsys.readouterr().out
    assert out.startswith("Not answered yet. Hint: for rank 0 on S=4 × R=3 this gives its shard group"), out
    assert "Nothing was launched" in out
    assert list(tmp_path.iterdir()) == []  # neither the run nor its reference
    assert not check_sync_group_in_a_run(None, base(), tmp_path / "none")
    capsys.readouterr()
