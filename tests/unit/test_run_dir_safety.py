"""No run is lost: a directory holding a run is refused unless overwritten, a directory a live launcher
holds is refused and left untouched, a lock left by a dead launcher is taken over. No training here:
the refusals happen before any worker starts (the end-to-end runs are in tests/distributed/test_cli.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from edit_lab import launch
from edit_lab.config import ConfigError, RunConfig
from edit_lab.runtime.outdir import LOCK, RunDirError, check, claim, run_files
from tests.unit.cli_run import ENV, cli_run


def old_run(d: Path) -> dict[str, bytes]:
    """A finished run's files (what launch and rank 0 write), and a file of the user's; returns every file's bytes."""
    (d / "checkpoints" / "sync-000001").mkdir(parents=True)
    files = {"config.json": b'{"method": "edit"}', "summary.json": b'{"steps": 8}', "metrics.jsonl": b"{}\n",
             "events-rank0.jsonl": b"{}\n", "rank0.log": b"hello\n", "error-rank1.txt": b"Traceback\n",
             "checkpoints/sync-000001/manifest.json": b"{}", "notes.txt": b"mine"}
    for name, data in files.items():
        (d / name).write_bytes(data)
    return snapshot(d)


def snapshot(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def test_a_run_directory_is_refused_and_left_intact(tmp_path):
    before = old_run(tmp_path)
    names = {p.name for p in run_files(tmp_path)}
    assert names == {"config.json", "summary.json", "metrics.jsonl", "events-rank0.jsonl", "rank0.log",
                     "error-rank1.txt", "checkpoints"}  # notes.txt is no run's
    with pytest.raises(RunDirError) as info:
        launch(RunConfig(model="nano", seq_len=32, out=str(tmp_path)))
    msg = str(info.value)
    assert isinstance(info.value, ConfigError) and "\n" not in msg
    assert msg.startswith(f"out={str(tmp_path)!r} is not allowed: it already holds a run")
    assert "--overwrite" in msg and "another --out" in msg
    assert snapshot(tmp_path) == before and not (tmp_path / LOCK).exists()


def test_the_cli_refuses_a_run_directory_in_one_line(tmp_path):
    before = old_run(tmp_path)
    res, heavy = cli_run("--model", "nano", "--seq-len", "32", "--out", str(tmp_path))
    assert res.returncode == 2 and not heavy, (res.stderr, heavy)  # refused before torch was imported
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and str(tmp_path) in lines[0] and "--overwrite" in lines[0]
    assert snapshot(tmp_path) == before


def test_overwrite_removes_the_old_runs_files_only(tmp_path):
    old_run(tmp_path)
    with claim(tmp_path, overwrite=True) as out:
        assert out == tmp_path
        assert (tmp_path / LOCK).read_text().split()[0] == str(os.getpid())  # held while the run goes
        assert snapshot(tmp_path) == {LOCK: (tmp_path / LOCK).read_bytes(), "notes.txt": b"mine"}
    assert snapshot(tmp_path) == {"notes.txt": b"mine"}  # the lock is gone at the end


def test_writing_a_torchrun_config_refuses_a_run_directory_and_overwrite_clears_it(tmp_path):
    out, cfg_file = tmp_path / "run", tmp_path / "cfg.json"
    out.mkdir()
    before = old_run(out)
    args = ("--model", "nano", "--seq-len", "32", "--out", str(out), "--write-config", str(cfg_file))
    res, heavy = cli_run(*args)
    assert res.returncode == 2 and not heavy and "--overwrite" in res.stderr, res.stderr
    assert snapshot(out) == before and not cfg_file.exists()
    res, _ = cli_run(*args, "--overwrite")  # the torchrun run then starts in a directory without the old run
    assert res.returncode == 0, res.stderr
    assert snapshot(out) == {"notes.txt": b"mine"} and RunConfig.load(cfg_file).runtime.out == str(out)


def test_a_fresh_or_missing_directory_is_taken(tmp_path):
    out = tmp_path / "a" / "b"
    with claim(out):
        assert (out / LOCK).exists()
    assert out.is_dir() and not any(out.iterdir())
    (tmp_path / "file").write_text("x")
    with pytest.raises(RunDirError, match="this is a file"):
        check(tmp_path / "file")


HOLDER = """
import sys
from edit_lab.runtime.outdir import claim
with claim(sys.argv[1]):
    open(sys.argv[1] + "/config.json", "w").write("first")
    print("held", flush=True)
    sys.stdin.readline()
"""


def test_a_live_lock_refuses_a_second_run_and_leaves_the_first_alone(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=ENV)
    try:
        assert holder.stdout.readline().strip() == "held"
        before = snapshot(tmp_path)
        for overwrite in (False, True):  # even --overwrite does not touch a run that is going
            with pytest.raises(RunDirError) as info:
                with claim(tmp_path, overwrite=overwrite):
                    pass
            assert f"pid {holder.pid} on" in str(info.value) and "writing there now" in str(info.value)
        res, heavy = cli_run("--model", "nano", "--seq-len", "32", "--out", str(tmp_path), "--overwrite")
        assert res.returncode == 2 and not heavy, (res.stderr, heavy)
        assert len(res.stderr.strip().splitlines()) == 1 and f"pid {holder.pid}" in res.stderr
        assert snapshot(tmp_path) == before
    finally:
        holder.communicate("\n", timeout=30)
    assert holder.returncode == 0 and not (tmp_path / LOCK).exists()
    with claim(tmp_path, overwrite=True):  # once it has ended, the directory can be overwritten
        assert not (tmp_path / "config.json").exists()


def test_a_stale_lock_of_a_dead_launcher_is_taken_over(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / LOCK).write_text(f"{dead.pid} somehost\n")  # a launcher killed before it could remove it
    check(tmp_path)  # no live process holds it
    with claim(tmp_path):
        assert (tmp_path / LOCK).read_text().split()[0] == str(os.getpid())
    assert not (tmp_path / LOCK).exists()


def test_a_bad_config_creates_no_directory(tmp_path):
    with pytest.raises(ConfigError, match="steps=0"):
        launch(RunConfig(steps=0, out=str(tmp_path / "never")))
    assert not (tmp_path / "never").exists()
