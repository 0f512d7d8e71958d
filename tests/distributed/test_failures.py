"""Failures end a run within a bounded time, name the rank that caused them, and leave no process.

Each fault kind of `edit_lab.train.faults` is injected into a real run through `launch` (2×2 where the
witnesses matter: a killed or hung rank leaves three peers failing with errors of their own; 2
processes elsewhere, because starting processes is most of a test's time). Time bounds
are measured from the moment the fault happened (the faulty rank's last log line or its error
file), not from the launch, so a slow start on a loaded machine does not make them flaky, and they
are set by the collective timeout, not by this machine's speed: a fault the launcher handles ends
the run in less than half the time the peers would otherwise have waited in their collectives (the
teardown takes a second or two), and a hung rank ends it by that timeout. Every
test asserts on the process table (filtered by the run's own directory, so tests running in
parallel do not see each other's workers).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from edit_lab import ConfigError, RunConfig, WorkerError, launch
from tests.helpers import small

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


# ------------------------------------------------------------------------------------ helpers
def _workers(out: Path) -> list[psutil.Process]:
    """Live worker processes of the run in `out`: those writing to one of its rank logs.

    A rank's stdout is its log file whether it is a fresh `python -m edit_lab.runtime.worker` or forked from
    the warm server (whose command line it keeps), so the open log is what identifies it.
    """
    logs = {str(out / f"rank{r}.log") for r in range(8)}
    found = []
    for p in psutil.process_iter(["status"]):
        if p.info["status"] == psutil.STATUS_ZOMBIE or p.pid == os.getpid():
            continue
        try:
            if any(f.path in logs for f in p.open_files()):
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return found


def _still_running(p: psutil.Process) -> bool:
    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _kill(procs: list[psutil.Process]) -> None:
    for p in procs:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass


def _assert_no_workers(out: Path, within_s: float = 0.0) -> None:
    deadline = time.monotonic() + within_s
    while _workers(out) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = _workers(out)
    _kill(left)  # never leave them behind, even when failing
    assert not left, f"worker processes left: {[p.pid for p in left]}"


@pytest.fixture
def out(tmp_path):
    d = tmp_path / "run"
    yield d
    _kill(_workers(d))  # a failing test must not leave CPU hogs for the next one


def _launch_fault(out: Path, kind: str, rank: int, step: int = 1, **kw) -> tuple[WorkerError, float]:
    """Run a job (2×2 unless told) with one fault; return the error and the time it was raised (time.time())."""
    cfg = small(out=str(out), steps=step + 3, fault_rank=rank, fault_step=step, fault_kind=kind, **kw)
    with pytest.raises(WorkerError) as info:
        launch(cfg)
    return info.value, time.time()


def _mtime(path: Path) -> float:
    return path.stat().st_mtime


def _ended_by_the_launcher(t_end: float, fault_at: float, timeout_s: float = small().runtime.timeout_s) -> None:
    """The run ended well before its peers' collectives would have timed out: the launcher ended it."""
    assert t_end - fault_at < timeout_s / 2, (t_end - fault_at, timeout_s)


# ------------------------------------------------------------------------------------ faults
def test_raise_names_rank_and_carries_traceback(out):
    err, t_end = _launch_fault(out, "raise", rank=1, shards=2, replicas=1)
    assert err.rank == 1
    msg = str(err)
    assert msg.startswith("rank 1 failed")
    assert "Traceback (most recent call last)" in msg
    assert "InjectedFault: fault injected on rank 1 at step 1" in msg
    _ended_by_the_launcher(t_end, _mtime(out / "error-rank1.txt"))  # not by the peers' timeout
    _assert_no_workers(out)


def test_kill_names_rank_and_signal(out):
    err, t_end = _launch_fault(out, "kill", rank=2)
    assert err.rank == 2  # not one of the peers whose connection to it broke
    assert "killed by signal SIGKILL" in str(err)
    assert "rank 2 will kill at the start of step 1" in str(err)  # the end of its log is in the message
    assert not (out / "error-rank2.txt").exists()  # it had no chance to write one
    _ended_by_the_launcher(t_end, _mtime(out / "rank2.log"))
    _assert_no_workers(out)


def test_hang_ends_after_collective_timeout_and_names_hung_rank(out):
    timeout_s = 4.0
    err, t_end = _launch_fault(out, "hang", rank=1, timeout_s=timeout_s)
    assert err.rank == 1  # the rank that never arrived, not a peer that timed out waiting for it
    msg = str(err)
    assert "rank 1 never arrived" in msg
    assert "rank 1 will hang at the start of step 1" in msg
    assert "timeout" in msg.lower() or "closed" in msg  # the witnesses' gloo error is quoted
    peers = sorted(int(p.stem.removeprefix("error-rank")) for p in out.glob("error-rank*.txt"))
    assert 1 not in peers and peers  # only the waiting peers wrote errors
    hung_at = _mtime(out / "rank1.log")  # its last line is the fault announcement
    # by the timeout (peers may start waiting before it hangs), then the teardown: a sanity bound of 10 s
    assert timeout_s / 2 < t_end - hung_at < timeout_s + 10.0
    _assert_no_workers(out)


def test_nan_loss_stops_sync_with_clear_message(out):
    err, t_end = _launch_fault(out, "nan", rank=1, step=2, shards=1, replicas=2)
    assert err.rank == 1
    msg = str(err)
    assert "FloatingPointError" in msg
    assert "rank 1: the loss is nan at step 2" in msg
    _ended_by_the_launcher(t_end, _mtime(out / "error-rank1.txt"))
    _assert_no_workers(out)


# ------------------------------------------------------------------------------------ the launcher itself
_SCRIPT = """
import sys
from edit_lab import RunConfig, launch
launch(RunConfig(model="nano", shards=1, replicas=2, seq_len=32, batch_size=4, steps=100000, eval_every=0,
                 eval_batches=2, progress=False, out=sys.argv[1]))
"""


def _start_launcher(out: Path) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    # SIGINT back to its default in the launcher: a suite started as a background job of a shell without
    # job control inherits SIGINT ignored, and Python then never raises KeyboardInterrupt (a kernel does)
    proc = subprocess.Popen([sys.executable, "-c", _SCRIPT, str(out)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 90
    while not (out / "progress").exists():  # training has started on every rank
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the run did not start"
        time.sleep(0.1)
    assert len(_workers(out)) == 2
    return proc


def test_keyboard_interrupt_stops_every_worker(out):
    proc = _start_launcher(out)
    try:
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)  # what a notebook's "interrupt kernel" sends
        _, stderr = proc.communicate(timeout=60)
        _ended_by_the_launcher(time.monotonic(), t0, RunConfig().runtime.timeout_s)  # the script's collective timeout
        assert proc.returncode != 0
        assert "KeyboardInterrupt" in stderr
        _assert_no_workers(out)  # gone when the launcher returns, not some time later
    finally:
        proc.kill()


def test_killed_launcher_takes_its_workers_down(out):
    proc = _start_launcher(out)
    servers = [p for p in psutil.Process(proc.pid).children() if "edit_lab.runtime.forkserver" in p.cmdline()]
    try:
        proc.kill()  # SIGKILL: no Python cleanup at all; the fork server sees its stdin end, PDEATHSIG the rest
        proc.wait(timeout=10)
        _assert_no_workers(out, within_s=5.0)
        gone, alive = psutil.wait_procs(servers, timeout=5.0)
        running = [p for p in alive if _still_running(p)]  # a zombie has ended; its new parent reaps it when it may
        assert not running, f"fork server left: {[p.pid for p in running]}"
    finally:
        proc.kill()
        _kill(servers)


# ------------------------------------------------------------------------------------ config errors
@pytest.mark.parametrize("field, value", [
    ("shards", 0), ("replicas", 0), ("steps", 0), ("method", "nope"), ("data", "/no/such/file.txt"),
    ("timeout_s", 0.0), ("fault_kind", "explode"), ("fault_rank", 4), ("fault_step", 5),
])
def test_bad_config_refused_before_any_process(out, field, value):
    cfg = small(**{"out": str(out), "steps": 5, field: value})
    if field == "fault_step":
        cfg = cfg.replace(fault_rank=0)
    with pytest.raises(ConfigError) as info:
        launch(cfg)
    assert str(info.value).startswith(f"{field}={value!r} is not allowed")
    assert "\n" not in str(info.value)
    assert not list(out.glob("rank*.log"))  # not one worker was started
    _assert_no_workers(out)


def test_world_size_mismatch_names_shards_times_replicas():
    with pytest.raises(ConfigError, match=r"shards×replicas=2×2=4 does not match the launcher's world size 3"):
        RunConfig(shards=2, replicas=2).validate(world_size=3)
    RunConfig(shards=3, replicas=1).validate(world_size=3)  # a matching one passes


def test_cli_config_error_exits_2_with_one_line(out):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    res = subprocess.run([sys.executable, "-m", "edit_lab", "run", "--shards", "0", "--out", str(out)],
                         capture_output=True, text=True, env=env, timeout=60)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "shards=0" in lines[0], res.stderr
    assert not out.exists()
    _assert_no_workers(out)
