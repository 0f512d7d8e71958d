"""The run directory from the launcher's side: no run is ever lost to another, and one run at a time.

Why: `launch` writes config.json, one log per rank and the results into `out`. Before this module a
second run with the same `out` (a re-run notebook cell, a benchmark started twice, a typo) silently
replaced the first, and two runs at once interleaved their files. Now:

* a directory that already holds a run (`run_files`) is refused, before anything is written or
  started, unless the caller asks to overwrite it (`--overwrite`, `launch(..., overwrite=True)`);
  then the old run's files are removed first, and files that are no run's stay where they are;
* while a run is going its launcher holds `out/.lock`: an exclusive `flock` on a file that names the
  launcher's pid and host. Another launcher that finds the lock held is refused and the first run is
  untouched. The kernel releases a `flock` when its process dies, so the lock of a launcher killed
  with SIGKILL is stale by construction and the next run takes it over; the file is removed when
  the run ends.

Nothing here imports torch: a refused directory costs a fraction of a second on the command line.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from edit_lab.config import ConfigError
from edit_lab.records import rundir

LOCK = ".lock"
"""Held (flock) by the launcher of the run that is writing the directory."""

CHECKPOINTS = "checkpoints"
"""The folder `checkpoint.save` writes a run's checkpoints to."""

REPORT = "report.html"
"""Where `python -m edit_lab report` writes a run's report by default."""


def rank_log(rank: int | str) -> str:
    """The launcher's log of rank `rank`: everything the worker printed (`"*"`: a glob of all of them)."""
    return f"rank{rank}.log"


def run_files(out: Path) -> list[Path]:
    """What in `out` belongs to a run (its config, results, per-rank files, checkpoints, report)."""
    out = Path(out)
    if not out.is_dir():
        return []
    names = (rundir.CONFIG, *rundir.RUN_FILES, Path(rundir.PROGRESS).with_suffix(".tmp").name, CHECKPOINTS, REPORT)
    found = [out / n for n in names if (out / n).exists()]
    for pattern in (rundir.events_file("*"), rundir.events_file("*") + ".gz", rundir.error_file("*"), rank_log("*")):
        found += sorted(out.glob(pattern))
    return found


class RunDirError(ConfigError):
    """`out` cannot take this run: it holds another run, or a run is writing it right now."""


def _refuse(out: Path, why: str) -> RunDirError:
    return RunDirError(f"out={str(out)!r} is not allowed: {why}")


def _holder(lock: Path) -> str:
    """Who wrote the lock file, for the message ("pid 123 on host")."""
    try:
        pid, host = lock.read_text().split()[:2]
        return f"pid {pid} on {host}"
    except (OSError, ValueError):
        return "another launcher"


def _held(lock: Path) -> bool:
    """Whether a live process holds `lock` (tried without taking it for good, and without creating it)."""
    try:
        fd = os.open(lock, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing releases a lock we got: we only looked
    return False


def check(out: Path, overwrite: bool = False) -> None:
    """Refuse `out` if a run is writing it now, or if it holds a run and `overwrite` is False. Writes nothing."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise _refuse(out, "a directory for the run, and this is a file; choose another --out")
    if _held(out / LOCK):
        raise _refuse(out, f"a run is writing there now ({_holder(out / LOCK)} holds {out / LOCK}); let it end, "
                           f"or choose another --out")
    found = run_files(out)
    if found and not overwrite:
        raise _holds_a_run(out, found)


def _holds_a_run(out: Path, found: list[Path]) -> RunDirError:
    shown = ", ".join(p.name for p in found[:3]) + (", …" if len(found) > 3 else "")
    return _refuse(out, f"it already holds a run ({shown}); pass --overwrite (overwrite=True in Python) to "
                        f"replace it, or choose another --out")


def _take_lock(out: Path) -> int:
    """Hold `out/.lock` exclusively; return its descriptor. A lock no live process holds is taken over."""
    path = out / LOCK
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise _refuse(out, f"a run is writing there now ({_holder(path)} holds {path}); let it end, "
                               f"or choose another --out") from None
        try:  # the file we locked must still be the one at `path` (its holder may have removed it meanwhile)
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()} {socket.gethostname()}\n".encode())
            return fd
        os.close(fd)


def _release_lock(out: Path, fd: int) -> None:
    (out / LOCK).unlink(missing_ok=True)  # before the unlock: a waiter then finds no file, or its own new one
    os.close(fd)


@contextmanager
def claim(out: Path, overwrite: bool = False) -> Iterator[Path]:
    """Hold `out` for one run: refused as `check` says; with `overwrite`, the old run's files are removed.

    The lock is held until the block ends, however it ends.
    """
    out = Path(out)
    check(out, overwrite)
    out.mkdir(parents=True, exist_ok=True)
    fd = _take_lock(out)
    try:
        found = run_files(out)  # again, under the lock: a run may have ended in there since `check`
        if found and not overwrite:
            raise _holds_a_run(out, found)
        for p in found:
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            else:
                p.unlink(missing_ok=True)
        yield out
    finally:
        _release_lock(out, fd)
