"""Start an oracle in fresh processes: the one free-port helper of the tests and a tiny spawner."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from edit_lab.config import RunConfig

#: The repository root: the spawned `python -m tests.oracles.…` processes import `tests` from here.
ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A localhost port nobody listens on right now (asked of the OS with `bind(0)`)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_processes(cfg: RunConfig, out: Path, module: str, config_name: str, index_flag: str, n: int,
                  what: str) -> None:
    """Start `n` fresh `python -m module` processes (index 0..n-1 under `index_flag`) that rendezvous on a
    free local port, and wait for all of them; the oracles write their results into `out`."""
    out.mkdir(parents=True, exist_ok=True)
    (out / config_name).write_text(cfg.to_json())
    port = free_port()
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, OMP_NUM_THREADS=str(cfg.runtime.threads), PYTHONPATH=path)
    procs = [subprocess.Popen([sys.executable, "-m", module, "--config", str(out / config_name), index_flag, str(i),
                               "--port", str(port), "--out", str(out)], env=env, cwd=ROOT)
             for i in range(n)]
    codes = [p.wait(timeout=600) for p in procs]
    if any(codes):
        raise RuntimeError(f"{what} oracle failed with exit codes {codes}")
