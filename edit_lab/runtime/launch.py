"""Start a run on this machine: one fresh Python process per rank, watched until it ends.

Why separate processes, started by us rather than by `multiprocessing` from the caller: a worker
then never re-imports a notebook or a user's script, and a crash in a worker can never take the
notebook kernel down with it. Each rank is forked from this process's warm fork server, which has
imported torch once (`forkserver`: a run starts in about a second instead of the 5-10 s four ranks
take to import torch on two cores), or, where that does not apply (CUDA, off Linux,
`EDIT_LAB_WARM_WORKERS=0`), is a fresh `python -m edit_lab.runtime.worker`. Both run the same `worker.main`.

The launcher owns the rendezvous store (a `TCPStore` on a port the OS picks), so two runs started at
once never share a port. If a rank fails, every other rank is ended within seconds, and the error
raised here names the rank that caused it (not a peer that merely lost it: see `_first_failure`)
and carries its traceback. Workers also ask the kernel to kill them if
the launcher itself dies, so a restarted notebook leaves no orphans.

No run is lost to another: a run directory that already holds a run is refused unless the caller
asks to overwrite it, and the launcher holds the directory's lock while its run goes (`outdir`).
torch is imported only once the configuration and the directory are accepted, so a refusal is quick.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import warnings
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from edit_lab.config import ConfigError, RunConfig
from edit_lab.records import rundir
from edit_lab.records.run import Run
from edit_lab.runtime import forkserver, outdir


class WorkerError(RuntimeError):
    """A rank failed; `.rank` is the first one that did and `.traceback` what it printed."""

    def __init__(self, rank: int, traceback: str, run_dir: Path) -> None:
        self.rank, self.traceback, self.run_dir = rank, traceback, run_dir
        super().__init__(f"rank {rank} failed (run directory {run_dir}):\n{traceback}")


def default_out(cfg: RunConfig) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{cfg.method}-{cfg.shards}x{cfg.replicas}-{stamp}-{os.getpid()}-{time.monotonic_ns() % 10**6}"


def _worker_env(cfg: RunConfig) -> dict[str, str]:
    env = dict(os.environ)
    threads = str(cfg.runtime.threads)
    env.update(OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads, PYTHONUNBUFFERED="1")
    env["EDIT_LAB_LAUNCHER_PID"] = str(os.getpid())  # lets a worker notice it was orphaned before PDEATHSIG was set
    # make the package importable in the worker even when it is used from a source checkout
    root = str(Path(__file__).resolve().parents[2])  # the folder holding edit_lab/
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


class WorkerProcess(Protocol):
    """What the launcher needs of a rank's process: a `subprocess.Popen`, or a `forkserver.WarmProcess`."""

    pid: int

    def poll(self) -> int | None: ...
    def wait(self, timeout: float | None = None) -> int: ...
    def send_signal(self, sig: int) -> None: ...
    def kill(self) -> None: ...


def _start_rank(server: forkserver.ForkServer | None, argv: list[str], env: dict[str, str], log: Path) -> WorkerProcess:
    """One rank: forked from the warm server when there is one, else a fresh `python -m edit_lab.runtime.worker`."""
    if server is not None:
        return server.spawn(argv, env, log)
    with open(log, "w") as f:
        return subprocess.Popen([sys.executable, "-m", "edit_lab.runtime.worker", *argv], stdout=f, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env)


def _stop(procs: list[WorkerProcess], grace_s: float = 3.0) -> None:
    """SIGTERM every live worker, then SIGKILL whatever is still there after `grace_s`.

    A second Ctrl-C while waiting (an impatient notebook user) kills the rest at once instead of
    abandoning them: this function never returns with a worker alive.
    """
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    try:
        for p in procs:
            try:
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    except KeyboardInterrupt:
        for p in procs:
            if p.poll() is None:
                p.kill()
        for p in procs:
            p.wait()
        raise


# The last line of a traceback that a rank gets because *another* rank is gone or late: gloo's
# timeouts and closed connections, NCCL's watchdog. Such a rank is a witness, not the cause.
_PEER_LOSS = re.compile(r"timeout|timed out|closed by peer|reset by peer|pair closure|Connection refused|Broken pipe"
                        r"|DistBackendError|DistNetworkError", re.I)


def _is_peer_loss(traceback: str) -> bool:
    lines = traceback.strip().splitlines()
    return bool(lines) and bool(_PEER_LOSS.search(lines[-1]))


def _log_tail(out: Path, rank: int, n: int = 4000) -> str:
    log = out / outdir.rank_log(rank)
    try:
        return log.read_text(errors="replace")[-n:]
    except OSError:
        return ""


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name} ({-code})"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _first_failure(out: Path, procs: list[WorkerProcess], settle_s: float = 5.0) -> tuple[int, str]:
    """Name the rank that caused a failure; called *before* the other ranks are stopped.

    One broken rank makes its peers fail too, with errors that only say a peer is gone or late, so
    the first error file is often a witness's. Blame, in this order:

    1. the earliest rank whose error is its own (any exception but a lost peer: a raise, a NaN,
       a bug, running out of memory);
    2. a rank that exited without writing an error: killed by a signal, or died before training;
    3. a rank still running once every other rank has failed with a lost-peer error: it never
       arrived at the collective its peers timed out in, i.e. it hangs. Peers blocked on a hung rank
       time out one after another, so this waits up to `settle_s` for the others to fail before
       deciding (sooner when only one rank is left running);
    4. otherwise (every rank lost its peers, e.g. a network failure) the earliest error.
    """
    deadline = time.monotonic() + settle_s
    time.sleep(0.2)  # let a failing rank finish writing its traceback
    while True:
        errors: dict[int, str] = {}
        for path in sorted(out.glob("error-rank*.txt"), key=lambda q: q.stat().st_mtime):
            errors[int(path.stem.removeprefix("error-rank"))] = path.read_text(errors="replace")
        own = [r for r, tb in errors.items() if not _is_peer_loss(tb)]
        if own:
            return own[0], errors[own[0]]
        codes = [p.poll() for p in procs]
        silent = [r for r, c in enumerate(codes) if c not in (None, 0) and r not in errors]
        if silent:
            r = silent[0]
            return r, f"{_describe_exit(codes[r])} without a Python traceback; the end of rank{r}.log:\n{_log_tail(out, r)}"
        running = [r for r, c in enumerate(codes) if c is None and r not in errors]
        if len(running) <= 1 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    witness = next(iter(errors.values()), "")
    if running:
        names = ", ".join(str(r) for r in running)
        return running[0], (
            f"rank{'s' if len(running) > 1 else ''} {names} never arrived: every other rank failed waiting for a "
            f"peer (a collective timed out or lost its connection) while rank {names} was still running, so it is "
            f"probably hung (a deadlock, an endless loop, a step far slower than timeout_s).\n"
            f"The end of rank{running[0]}.log:\n{_log_tail(out, running[0])}\nThe first peer error:\n{witness}")
    if errors:
        return next(iter(errors)), witness
    return -1, "unknown failure"


def launch(cfg: RunConfig, stall_timeout_s: float | None = None, overwrite: bool = False) -> Run:
    """Validate, spawn `cfg.world_size` ranks, show progress, and return the loaded Run.

    Raises ConfigError before anything starts for a bad configuration or an `out` that already holds a
    run (pass `overwrite=True` to replace that run: its files are removed first) or that another run is
    writing now; WorkerError if a rank fails, and TimeoutError if no step completes for `stall_timeout_s`
    (default: 3 × the collective timeout).
    """
    cfg = cfg.validate()
    out = Path(cfg.runtime.out) if cfg.runtime.out else default_out(cfg)
    outdir.check(out, overwrite)  # before the checkpoint is read (that loads torch): a refusal stays quick
    from edit_lab.train.checkpoint import prepare_resume

    cfg = prepare_resume(cfg)
    if overwrite and cfg.runtime.resume and Path(cfg.runtime.resume).resolve().is_relative_to(out.resolve()):
        raise ConfigError(f"resume={cfg.runtime.resume!r} is not allowed with overwrite=True into out={str(out)!r}: "
                          f"overwriting removes that checkpoint; resume into another --out")
    with outdir.claim(out, overwrite):
        if cfg.clock.kind == "virtual":  # every rank a thread of this process, on the cost model's clock
            from edit_lab.clock.virtual import run_virtual

            from edit_lab.runtime.survive_records import survival_summary

            run = run_virtual(cfg.replace(out=str(out)), out, WorkerError, survival_summary=survival_summary)
            _note_readmissions(run, cfg, stacklevel=3)
            return run
        return _run(cfg.replace(out=str(out)), out, stall_timeout_s)


def _run(cfg: RunConfig, out: Path, stall_timeout_s: float | None) -> Run:
    """Start the ranks of an accepted configuration in the claimed directory `out` and follow them."""
    import torch.distributed as dist

    (out / rundir.CONFIG).write_text(cfg.to_json())
    stall_timeout_s = stall_timeout_s or max(3 * cfg.runtime.timeout_s, 60.0)
    store = dist.TCPStore("127.0.0.1", 0, cfg.world_size + 1, is_master=True, wait_for_workers=False,
                          timeout=__import__("datetime").timedelta(seconds=cfg.runtime.timeout_s))
    env = _worker_env(cfg)
    server = forkserver.server_for(env) if forkserver.enabled(cfg.runtime.device) else None
    if cfg.runtime.survive:
        return _run_surviving(cfg, out, store, server, env, stall_timeout_s)
    procs: list[WorkerProcess] = []
    bar, succeeded = None, False
    try:
        for rank in range(cfg.world_size):
            argv = ["--config", str(out / rundir.CONFIG), "--rank", str(rank), "--world-size", str(cfg.world_size),
                    "--master-port", str(store.port)]
            procs.append(_start_rank(server, argv, env, out / outdir.rank_log(rank)))
        if cfg.runtime.progress:
            from tqdm.auto import tqdm

            total, unit = cfg.progress_total()
            bar = tqdm(total=total, desc=f"{cfg.method} {cfg.shards}×{cfg.replicas}", unit=unit, leave=False)
        last_change, last_step = time.monotonic(), -1
        while True:
            codes = [p.poll() for p in procs]
            if any(c not in (None, 0) for c in codes):
                rank, tb = _first_failure(out, procs, settle_s=min(cfg.runtime.timeout_s, 10.0))
                _stop(procs)
                raise WorkerError(rank, tb, out)
            if all(c == 0 for c in codes):
                succeeded = True
                break
            prog = rundir.read_progress(out / rundir.PROGRESS)
            step = prog[0] if prog else 0
            if step != last_step:
                if bar is not None:
                    bar.update(step - max(last_step, 0))
                last_step, last_change = step, time.monotonic()
            elif time.monotonic() - last_change > stall_timeout_s:
                _stop(procs)
                raise TimeoutError(f"no progress for {stall_timeout_s:.0f} s at step {step}; run directory {out}")
            time.sleep(0.05)
    except BaseException:
        _stop(procs)
        raise
    finally:
        close_bar(bar, succeeded)
    run = Run(out)
    _note_readmissions(run, cfg, stacklevel=4)
    return run


def _run_surviving(cfg: RunConfig, out: Path, store: Any, server: forkserver.ForkServer | None, env: dict[str, str],
                   stall_timeout_s: float) -> Run:
    """`_run` for a run that survives deaths: replicas fail alone (runtime/survive_launch.py)."""
    from edit_lab.core import view as views
    from edit_lab.runtime import survive_launch

    started: list[WorkerProcess] = []

    def start(rank: int, life: int) -> WorkerProcess:
        argv = ["--config", str(out / rundir.CONFIG), "--rank", str(rank), "--world-size", str(cfg.world_size),
                "--master-port", str(store.port), "--life", str(life)]
        started.append(_start_rank(server, argv, env, out / survive_launch.log_name(rank, life)))
        return started[-1]

    seen = {"step": -1, "at": time.monotonic()}
    bar = None
    if cfg.runtime.progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=cfg.progress_total()[0], desc=f"{cfg.method} {cfg.shards}×{cfg.replicas} (survive)",
                   unit=cfg.progress_total()[1], leave=False)

    def poll() -> None:
        prog = rundir.read_progress(out / rundir.PROGRESS)
        step = prog[0] if prog else 0
        if step != seen["step"]:
            if bar is not None:
                bar.update(step - max(seen["step"], 0))
            seen["step"], seen["at"] = step, time.monotonic()
        elif time.monotonic() - seen["at"] > stall_timeout_s:
            raise TimeoutError(f"no progress for {stall_timeout_s:.0f} s at step {step}; run directory {out}")

    succeeded = False
    try:
        reps = survive_launch.watch(cfg, out, store, start, poll, lambda rank, why: WorkerError(rank, why, out))
        succeeded = True
    except BaseException:
        _stop(started)
        raise
    finally:
        close_bar(bar, succeeded)
    _stop(started)  # every one has ended: this reaps them
    survive_launch.write_records(cfg, out, reps, float(store.get(views.START_UNIX)))
    run = Run(out)
    _note_readmissions(run, cfg, stacklevel=5)
    return run


def _note_readmissions(run: Run, cfg: RunConfig, stacklevel: int) -> None:
    """Warn (at the caller of `launch`) when the run's anomaly detector re-admitted or released outliers."""
    note = readmission_note(run.summary, run.path, cfg.penalty.readmit_after,
                            released=cfg.penalty.peers and cfg.replicas > 1)
    if note:
        warnings.warn(note, stacklevel=stacklevel)


def close_bar(bar: Any, succeeded: bool) -> None:
    """Close the launcher's tqdm bar (None: no bar), full when the run succeeded.

    The bar follows the progress file, which a time-budget run last writes as int(t) of its last step
    start, below the budget (9 of a 10 s budget), and whose final write a run may leave unread when its
    ranks exit between two polls. In a notebook tqdm draws a bar closed short of its total red (danger),
    as for a failure; so a run that succeeded fills its bar first, and a failed one stays where it stopped.
    """
    if bar is None:
        return
    if succeeded and bar.total:
        bar.update(bar.total - bar.n)
    bar.close()


def readmission_note(summary: dict, path: Path | str, k: int, released: bool = False) -> str | None:
    """One line for a run whose anomaly detector re-admitted outliers (edit-method.md D10) or released them
    because every replica was flagged (`released`: judged against the peers, D16), else None.

    The per-unit rule (`penalty_peers` off, or a run of one replica, which has no peers) re-admits: it accepts
    a norm the detector flagged on a replica K syncs in a row, because it is in line with the norms of the
    replicas not flagged (or every replica is flagged): a level shared by all cannot be told from a new normal.
    Judged against its peers (D15, D16, the default) a shared level flags nobody, and a flagged replica comes
    back once no unit of it stands κ_s above its peers (with fewer than 3 peers, or once its own G/k is back
    within δ_m σ of its memory), without a re-admission; but when every replica that trained is flagged at
    once, each is let back into the units it does not stand out on (D16's release), and the user should know
    that the anchor moved with replicas the detector had flagged, and where.
    """
    seen = (summary.get("method_info") or {}).get("penalty_readmissions") or []
    if not seen:
        return None
    where = ", ".join(f"step {r['step']} unit {r['unit']} replica {r['replica']}" for r in seen[:3])
    more = f" and {len(seen) - 3} more" if len(seen) > 3 else ""
    if released:
        return (f"every replica that trained was flagged at once: the penalty released {len(seen)} (replica, unit) "
                f"pair(s) ({where}{more}), each replica admitted on the units it did not stand out on itself and, "
                f"on a unit where every replica did, the one with the smallest norm per step (edit-method.md D16), "
                f"so that no unit's anchor freezes; see `readmitted` in {Path(path) / 'penalty.jsonl'}")
    return (f"the penalty's anomaly detector re-admitted {len(seen)} outlier(s) ({where}{more}): each was flagged "
            f"{k} syncs in a row (penalty_readmit_after={k}) with a norm in line with its unflagged peers' (or every "
            f"replica flagged), so the higher norm is taken as the new level and its detector re-armed from it; "
            f"see `readmitted` in "
            f"{Path(path) / 'penalty.jsonl'}")
