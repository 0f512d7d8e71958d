"""rundir.py, the run directory's contract: file names, the progress protocol, the summary's keys."""

from __future__ import annotations

import pytest

from edit_lab.config import RunConfig
from edit_lab.records import rundir
from edit_lab.records.overlap import Overlap
from edit_lab.records.rundir import PER_REPLICA_KEYS, SUMMARY_KEYS, ProgressFile, RankRecord, read_progress, summarize


def test_progress_file_round_trip(tmp_path):
    path = tmp_path / rundir.PROGRESS
    assert read_progress(path) is None  # no file yet: nothing to show
    p = ProgressFile(path)
    p.write(3, 10)
    assert read_progress(path) == (3, 10)
    p.write(4, 10)  # within 0.1 s of the last write: skipped, the file still says 3
    assert read_progress(path) == (3, 10)
    p.write(10, 10)  # the last step is always written
    assert read_progress(path) == (10, 10)
    path.write_text("garbage\n")
    assert read_progress(path) is None


def test_per_rank_file_names():
    assert rundir.events_file(3) == "events-rank3.jsonl"
    assert rundir.error_file(0) == "error-rank0.txt"
    assert rundir.PROGRESS in rundir.RUN_FILES and rundir.CONFIG not in rundir.RUN_FILES  # the launcher writes it


def test_summary_has_exactly_the_documented_keys():
    cfg = RunConfig(method="sync", shards=1, replicas=2, steps=1)
    metrics = [{"kind": "train", "step": 0, "replica": r, "loss": 2.0 + r, "tokens": 100, "t": 1.0 + r, "dt": 1.0}
               for r in (0, 1)]
    ranks = [RankRecord(rank=r, events=[], records=[], metrics=[], memory={"params": 8}) for r in (0, 1)]
    s = summarize(cfg, ranks, metrics, start_unix=0.0, overlap=Overlap([]))
    assert tuple(s) == SUMMARY_KEYS
    assert s["clock"] == "wall" and s["clock_costs"] is None
    assert tuple(s["per_replica"]["1"]) == PER_REPLICA_KEYS
    assert s["per_replica"]["1"]["sync_wait_s"] == 0.0 and s["memory"] == {"0": {"params": 8}, "1": {"params": 8}}
    assert s["final_train_loss"] == pytest.approx(2.5) and s["method_info"] == {}


def test_the_summary_keys_the_examples_were_recorded_with():
    """The shipped example runs were written before SUMMARY_KEYS existed: the contract kept their keys."""
    import json
    from pathlib import Path

    import edit_lab.records.examples

    for summary in sorted(Path(edit_lab.records.examples.__file__).parent.glob("*/summary.json")):
        s = json.loads(summary.read_text())
        assert tuple(s) in (SUMMARY_KEYS, rundir.PRE_CLOCK_KEYS), summary.parent.name  # before "clock": wall
        assert rundir.summary_clock(s) == "wall"
        assert all(tuple(v) == PER_REPLICA_KEYS for v in s["per_replica"].values())


def test_ship_keeps_the_light_files_and_gzips_the_events(tmp_path):
    import gzip

    src, dest = tmp_path / "run", tmp_path / "shipped"
    src.mkdir()
    for name in (*rundir.SHIPPED_FILES, rundir.MODEL, rundir.TRACE, rundir.PROGRESS):
        (src / name).write_text(name)
    for r in (0, 1):
        (src / rundir.events_file(r)).write_text(f'{{"rank": {r}}}\n')
    dest.mkdir()
    (dest / "stale.txt").write_text("from an older recording")
    rundir.ship(src, dest)
    names = sorted(p.name for p in dest.iterdir())
    assert names == sorted([*rundir.SHIPPED_FILES, "events-rank0.jsonl.gz", "events-rank1.jsonl.gz"])
    assert gzip.decompress((dest / "events-rank1.jsonl.gz").read_bytes()) == b'{"rank": 1}\n'
    first = (dest / "events-rank0.jsonl.gz").read_bytes()
    rundir.ship(src, dest)
    assert (dest / "events-rank0.jsonl.gz").read_bytes() == first  # no timestamp in the gzip header
