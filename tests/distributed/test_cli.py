"""The command line, end to end: run, show, report, demo and --help, as a user types them."""

from __future__ import annotations

import json
import subprocess
import sys

from edit_lab.config import RunConfig

SMALL = ["--model", "nano", "--seq-len", "32", "--batch-size", "4", "--eval-batches", "2", "--no-progress"]


def cli(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "edit_lab", *args], capture_output=True, text=True, timeout=timeout)


def test_run_show_report(tmp_path):
    out = tmp_path / "run"
    res = cli("run", "--method", "edit", "--steps", "8", "--warmup-steps", "2", "--sync-interval", "3",
              "--straggler-replicas", "1", "--straggler-factor", "1.5", "--out", str(out), *SMALL)
    assert res.returncode == 0, res.stderr
    assert "method    edit" in res.stdout and "tokens/s" in res.stdout
    cfg = RunConfig.load(out / "config.json")
    assert cfg.method == "edit" and cfg.stragglers.replicas == (1,) and cfg.stragglers.factor == 1.5
    shown = cli("show", str(out), "--json")
    summary = json.loads(shown.stdout)
    assert summary["steps"] == 8 and summary["final_val_loss"] > 0
    rep = cli("report", str(out))
    assert rep.returncode == 0, rep.stderr
    html = (out / "report.html").read_text()
    assert "plotly" in html.lower() and "edit" in html


def test_demo_prints_a_table(tmp_path):
    res = cli("demo", "--steps", "6", "--methods", "sync", "edit", "--out", str(tmp_path / "demo"))
    assert res.returncode == 0, res.stderr
    lines = [ln for ln in res.stdout.splitlines() if ln.strip().startswith(("sync |", "edit |"))]
    assert len(lines) == 2
    for ln in lines:
        val_loss = float(ln.split("|")[1])
        assert 1.0 < val_loss < 6.0  # a real loss of a byte-level model (ln 256 ≈ 5.55 untrained)


def test_help_documents_every_field():
    res = cli("run", "--help")
    assert res.returncode == 0
    for flag in ("--sync-interval", "--outer-lr", "--penalty-threshold", "--straggler-factor", "--checkpoint-every",
                 "--link-bandwidth-mb-s", "--prefetch", "--no-prefetch", "--resume", "--overwrite"):
        assert flag in res.stdout
    text = " ".join(res.stdout.split())  # argparse wraps help lines
    assert "tau: inner steps between syncs; an integer >= 1 (default: 10)" in text
    assert "--method {sync,backup,post_local_sgd,diloco,co2,edit,aedit,streaming_diloco}" in text  # the methods by name
    assert "megabytes per second" in text and "--link-bandwidth-mbps" not in text  # the old flag works, unlisted


def test_bad_method_is_refused_in_one_line():
    res = cli("run", "--method", "fedavg")
    assert res.returncode == 2
    assert res.stderr.strip().count("\n") == 0 and "method='fedavg'" in res.stderr and "edit" in res.stderr


def test_a_second_run_into_a_run_directory_is_refused_then_overwritten(tmp_path):
    out = tmp_path / "run"
    first = cli("run", "--method", "sync", "--steps", "4", "--warmup-steps", "0", "--out", str(out), *SMALL)
    assert first.returncode == 0, first.stderr
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    again = cli("run", "--method", "edit", "--steps", "4", "--out", str(out), *SMALL)
    assert again.returncode == 2 and len(again.stderr.strip().splitlines()) == 1
    assert str(out) in again.stderr and "--overwrite" in again.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before  # byte for byte
    over = cli("run", "--method", "edit", "--steps", "6", "--warmup-steps", "2", "--sync-interval", "2",
               "--replicas", "1", "--out", str(out), "--overwrite", *SMALL)
    assert over.returncode == 0, over.stderr
    assert RunConfig.load(out / "config.json").method == "edit"
    assert sorted(p.name for p in out.glob("rank*.log")) == ["rank0.log", "rank1.log"]  # the old 4 ranks' are gone
    assert not (out / ".lock").exists()


def test_a_failed_rank_is_reported_with_its_traceback_alone(tmp_path):
    res = cli("run", "--method", "sync", "--steps", "4", "--fault-rank", "1", "--fault-step", "1",
              "--out", str(tmp_path / "run"), *SMALL)
    assert res.returncode == 1
    assert res.stderr.startswith(f"edit_lab: rank 1 failed (run directory {tmp_path / 'run'}):\n")
    assert res.stderr.count("Traceback (most recent call last)") == 1  # the worker's, not the launcher's too
    assert res.stderr.rstrip().endswith("fault injected on rank 1 at step 1 (fault_kind='raise')")
    assert "launch.py" not in res.stderr
