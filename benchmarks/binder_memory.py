"""Does the lab fit a Binder session (2 GB)? Peak memory of JupyterLab + a kernel + the StragglerLab's run.

What is measured is what Binder's limit counts: every process of the session. A real `jupyter lab`
server is started (as binder/start does: one thread per process), a kernel is started through its REST
API (as opening a notebook does), and in that kernel the StragglerLab is built and its default run
launched (`StragglerLab().run()`: the configuration a reader gets on pressing Run, 4 worker processes
with the default 2×2 mesh). Meanwhile, every ~0.2 s, the proportional set size (PSS: shared pages split
between the processes sharing them, so torch's libraries loaded by five processes count once in total)
of the server and all its descendants is read from /proc/PID/smaps_rollup and summed. RSS is summed
too: it counts every shared page once per process, an upper bound a naive monitor would report.

    python benchmarks/binder_memory.py [--json binder_memory.json] [--limit-mb 2048] [--env NAME=VALUE ...]

`--env` sets variables for the server and so for the kernel (e.g. the ones binder/start sets). Linux only.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from results_io import load_average, write_result  # noqa: E402

KERNEL_PHASES = {  # phase name: code run in the kernel, one after the other
    "import the lab": "import edit_lab.ui.lab",
    "build the StragglerLab": "from edit_lab.ui.lab import StragglerLab\nlab = StragglerLab()\ndisplay(lab.widget)",
    "its default run": "run = lab.run()\nprint(run.config.shards, run.config.replicas, run.config.method, "
                       "run.summary['steps'])",
}


def pss_rss_kb(pid: int) -> tuple[int, int]:
    """(PSS, RSS) of one process in kB, from /proc/PID/smaps_rollup; (0, 0) once it is gone."""
    pss = rss = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    pss = int(line.split()[1])
                elif line.startswith("Rss:"):
                    rss = int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        pass
    return pss, rss


def role(proc, server_pid: int, kernel_pids: set[int]) -> str:
    if proc.pid == server_pid:
        return "server"
    if proc.pid in kernel_pids:
        return "kernel"
    try:
        cmd = " ".join(proc.cmdline())
    except Exception:  # noqa: BLE001 (gone meanwhile)
        return "other"
    # ranks forked from the warm fork server keep its command line; the server itself counts with them
    return "workers" if "edit_lab.runtime.worker" in cmd or "edit_lab.runtime.forkserver" in cmd else "other"


class Sampler(threading.Thread):
    """Every `period_s`: the PSS and RSS summed over `root` and its descendants, by role, with the phase."""

    def __init__(self, root_pid: int, period_s: float = 0.2) -> None:
        super().__init__(daemon=True)
        import psutil

        self.root = psutil.Process(root_pid)
        self.period_s = period_s
        self.phase = "server started"
        self.kernel_pids: set[int] = set()
        self.samples: list[dict[str, Any]] = []
        self._done = threading.Event()

    def run(self) -> None:
        t0 = time.monotonic()
        while not self._done.is_set():
            try:
                procs = [self.root] + self.root.children(recursive=True)
            except Exception:  # noqa: BLE001 (the server is gone)
                break
            by_role: dict[str, int] = {}
            pss_total = rss_total = 0
            for p in procs:
                pss, rss = pss_rss_kb(p.pid)
                pss_total, rss_total = pss_total + pss, rss_total + rss
                r = role(p, self.root.pid, self.kernel_pids)
                by_role[r] = by_role.get(r, 0) + pss
            self.samples.append({"t": round(time.monotonic() - t0, 2), "phase": self.phase,
                                 "processes": len(procs), "pss_mb": round(pss_total / 1024, 1),
                                 "rss_mb": round(rss_total / 1024, 1),
                                 "pss_mb_by_role": {k: round(v / 1024, 1) for k, v in sorted(by_role.items())}})
            self._done.wait(self.period_s)

    def stop(self) -> None:
        self._done.set()
        if self.is_alive():
            self.join()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def api(url: str, token: str, method: str = "GET", body: dict | None = None) -> Any:
    req = urllib.request.Request(url, method=method, data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Authorization": f"token {token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read() or b"null")


def wait_for_server(base: str, token: str, proc: subprocess.Popen, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log = Path(proc.args[-1].split("=", 1)[1]) / "server.log"  # in root_dir
            raise RuntimeError(f"jupyter lab exited with code {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            api(f"{base}/api/status", token)
            return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"jupyter lab did not answer within {timeout_s:.0f} s")


def run_in_kernel(client, code: str, timeout_s: float) -> str:
    """Execute `code`; its printed output, or RuntimeError with the kernel's traceback."""
    out: list[str] = []

    def hook(msg: dict) -> None:
        if msg["msg_type"] == "stream":
            out.append(msg["content"]["text"])
        elif msg["msg_type"] == "error":
            out.append("\n".join(msg["content"]["traceback"]))

    reply = client.execute_interactive(code, timeout=timeout_s, output_hook=hook, store_history=False)
    if reply["content"]["status"] != "ok":
        raise RuntimeError(f"the kernel failed on {code!r}:\n" + "".join(out))
    return "".join(out)


def measure(env_extra: dict[str, str], period_s: float, run_timeout_s: float) -> dict[str, Any]:
    from jupyter_client import BlockingKernelClient

    work = Path(tempfile.mkdtemp(prefix="binder-memory-"))
    runtime = work / "runtime"
    token, port = secrets.token_hex(16), free_port()
    base = f"http://127.0.0.1:{port}"
    env = dict(os.environ, OMP_NUM_THREADS="1", JUPYTER_RUNTIME_DIR=str(runtime), **env_extra)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    jupyter = Path(sys.executable).with_name("jupyter")
    server = subprocess.Popen([str(jupyter), "lab", "--no-browser", "--ip", "127.0.0.1", "--port", str(port),
                               f"--IdentityProvider.token={token}", *(["--allow-root"] if os.geteuid() == 0 else []),
                               f"--ServerApp.root_dir={work}"],
                              cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=open(work / "server.log", "w"))
    sampler = Sampler(server.pid, period_s)
    phases: list[dict[str, Any]] = []
    printed, ok = "", False
    try:
        wait_for_server(base, token, server)
        sampler.start()
        time.sleep(2.0)
        sampler.phase = "kernel started"
        kernel = api(f"{base}/api/kernels", token, "POST", {"name": "python3"})
        client = BlockingKernelClient(connection_file=str(runtime / f"kernel-{kernel['id']}.json"))
        client.load_connection_file()
        client.start_channels()
        client.wait_for_ready(timeout=120)
        sampler.kernel_pids = {p.pid for p in sampler.root.children() if "ipykernel" in " ".join(p.cmdline())}
        run_in_kernel(client, f"import os; os.chdir({str(work)!r})", 30)
        for name, code in KERNEL_PHASES.items():
            sampler.phase = name
            t0 = time.monotonic()
            printed += run_in_kernel(client, code, run_timeout_s)
            phases.append({"phase": name, "seconds": round(time.monotonic() - t0, 1)})
        sampler.phase = "after the run"
        time.sleep(2.0)
        client.stop_channels()
        ok = True
    finally:
        sampler.stop()
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        if ok:  # else kept, with the server's (and the kernel's) log
            shutil.rmtree(work, ignore_errors=True)
    peak = max(sampler.samples, key=lambda s: s["pss_mb"])
    by_phase = {}
    for s in sampler.samples:
        by_phase[s["phase"]] = max(by_phase.get(s["phase"], 0.0), s["pss_mb"])
    return {"peak_pss_mb": peak["pss_mb"], "peak_at": {k: peak[k] for k in ("phase", "processes", "pss_mb_by_role")},
            "peak_rss_mb": max(s["rss_mb"] for s in sampler.samples), "peak_pss_mb_by_phase": by_phase,
            "phases": phases, "kernel_printed": printed.strip(), "period_s": period_s,
            "samples": sampler.samples}


def table(results: list[dict[str, Any]]) -> list[str]:
    """docs/benchmarks.md's table: one row per result file (the current state first)."""
    out = ["| measured | lab run (shards × replicas, method) | peak PSS, whole session | of which workers | "
           "kernel | server | peak RSS summed | margin to 2 GB |",
           "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        roles = r["peak_at"]["pss_mb_by_role"]
        run = r["kernel_printed"].split()
        out.append(f"| {r['label']} | {run[0]} × {run[1]}, {run[2]} | **{r['peak_pss_mb']:.0f} MB** | "
                   f"{roles.get('workers', 0):.0f} MB | {roles.get('kernel', 0):.0f} MB | {roles.get('server', 0):.0f} MB | "
                   f"{r['peak_rss_mb']:.0f} MB | {r['limit_mb'] - r['peak_pss_mb']:.0f} MB |")
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default="binder_memory.json", help="result file (a bare name: benchmarks/results/)")
    ap.add_argument("--label", default="lab defaults", help="the row's name in the docs/benchmarks.md table")
    ap.add_argument("--limit-mb", type=float, default=2048.0, help="Binder's memory limit")
    ap.add_argument("--period-s", type=float, default=0.2, help="sampling period")
    ap.add_argument("--timeout-s", type=float, default=600.0, help="the longest a kernel phase may take")
    ap.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="for the server and kernel")
    args = ap.parse_args(argv)
    load_before = load_average()
    env_extra = dict(item.split("=", 1) for item in args.env)
    result = measure(env_extra, args.period_s, args.timeout_s)
    result.update(label=args.label, limit_mb=args.limit_mb, env=env_extra)
    print(json.dumps({k: v for k, v in result.items() if k != "samples"}, indent=1))
    print("\n".join(table([result])))
    if args.json:
        write_result(args.json, result, __file__, argv, load_before)
    return 0 if result["peak_pss_mb"] < args.limit_mb else 1


if __name__ == "__main__":
    sys.exit(main())
