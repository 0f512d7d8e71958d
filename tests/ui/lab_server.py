"""A throw-away JupyterLab server for the browser tests: started from this environment, stopped for sure.

Why so careful: a JupyterLab server starts kernels in their own sessions, and a kernel that ran a
StragglerLab starts worker processes (a fork server and its ranks, `edit_lab/runtime/forkserver.py`). Killing the server's process group
alone would leave kernels (and, mid-run, workers) behind on a CI machine. So every process the
server starts carries a marker in its environment (`EDIT_LAB_UI_TEST`), inherited all the way
down to the workers, and `stop()` ends every process that carries it, then reports any survivor.

Nothing outside the scratch folder is touched: the Jupyter config, data and runtime folders and
IPython's folder all live inside it, so ~/.jupyter and the user's kernels play no part.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import psutil

from tests.oracles.spawn import free_port  # the tests' one free-port helper (no port retries here)

MARKER = "EDIT_LAB_UI_TEST"

# JupyterLab settings for a quiet, deterministic page: no news or update toasts, and every cell
# rendered (no windowing), so outputs far down the notebook are in the DOM when they are checked.
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                         "checkForUpdates": False},
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
}


def marked_processes(marker_value: str) -> list[psutil.Process]:
    """Every live process whose environment carries this server's marker (kernels and workers included)."""
    found = []
    for p in psutil.process_iter(["pid"]):
        try:
            if p.environ().get(MARKER) == marker_value and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
    return found


def describe(procs: list[psutil.Process]) -> str:
    out = []
    for p in procs:
        try:
            out.append(f"pid {p.pid}: {' '.join(p.cmdline())[:160]}")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            out.append(f"pid {p.pid}: (gone)")
    return "; ".join(out)


class LabServer:
    """`jupyter lab` on 127.0.0.1 with a token, serving `root_dir`; use `start()` then `stop()`."""

    def __init__(self, root_dir: Path, scratch: Path, startup_timeout_s: float = 120.0,
                 settings: dict[str, dict] | None = None) -> None:
        """`settings`: JupyterLab user settings on top of LAB_SETTINGS ({plugin file: {key: value}})."""
        self.settings = {k: dict(v) for k, v in LAB_SETTINGS.items()}
        for rel, values in (settings or {}).items():
            self.settings.setdefault(rel, {}).update(values)
        self.root_dir = Path(root_dir)
        self.scratch = Path(scratch)
        self.startup_timeout_s = startup_timeout_s
        self.token = uuid.uuid4().hex
        self.marker = uuid.uuid4().hex
        self.port = 0
        self.proc: subprocess.Popen | None = None
        self.log_path = self.scratch / "jupyterlab.log"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str) -> str:
        """A page URL with the token, e.g. `url("lab/tree/00_welcome.ipynb")`."""
        sep = "&" if "?" in path else "?"
        return f"{self.base_url}/{path.lstrip('/')}{sep}token={self.token}"

    # ------------------------------------------------------------------ start
    def _env(self) -> dict[str, str]:
        dirs = {name: self.scratch / sub for name, sub in (("JUPYTER_CONFIG_DIR", "jupyter-config"),
                                                           ("JUPYTER_DATA_DIR", "jupyter-data"),
                                                           ("JUPYTER_RUNTIME_DIR", "jupyter-runtime"),
                                                           ("IPYTHONDIR", "ipython"))}
        for d in dirs.values():
            d.mkdir(parents=True, exist_ok=True)
        settings = dirs["JUPYTER_CONFIG_DIR"] / "lab" / "user-settings"
        for rel, values in self.settings.items():
            path = settings / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(values))
        env = dict(os.environ)
        env.update({k: str(v) for k, v in dirs.items()})
        env[MARKER] = self.marker
        env["JUPYTER_PLATFORM_DIRS"] = "1"
        # The stock `python3` kernelspec runs `python`: make that this environment's interpreter.
        env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
        env.pop("JUPYTER_PATH", None)
        env.pop("JUPYTER_TOKEN", None)
        return env

    def _command(self) -> list[str]:
        return [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={self.port}",
                "--ServerApp.port_retries=0", f"--IdentityProvider.token={self.token}",
                f"--ServerApp.root_dir={self.root_dir}", "--ServerApp.open_browser=False",
                # nothing reaches the network: no update check, no package index for the extension manager
                "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
                "--LabApp.extension_manager=readonly", "--ServerApp.terminals_enabled=False",
                # `window.jupyterapp`: a test opens its next notebook in the tab the last one used (NotebookPage)
                "--LabApp.expose_app_in_browser=True",
                "--log-level=WARN"] + (["--allow-root"] if os.geteuid() == 0 else [])

    def start(self) -> "LabServer":
        last_error = ""
        for _attempt in range(3):  # a free port can be taken between free_port() and the bind
            self.port = free_port()
            with open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen(self._command(), cwd=self.root_dir, env=self._env(),
                                             stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                             start_new_session=True)
            try:
                self._wait_ready()
                return self
            except RuntimeError as e:
                last_error = str(e)
                if self.proc.poll() is None or "address already in use" not in last_error.lower():
                    self.stop()  # only a lost race for the port is worth another try
                    raise
        raise RuntimeError(last_error)

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"jupyter lab exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                status = self.api("api/status", timeout=5)
                if "started" in status:
                    return
            except (urllib.error.URLError, ConnectionError, TimeoutError, json.JSONDecodeError):
                pass
            time.sleep(0.5)
        raise RuntimeError(f"jupyter lab did not answer /api/status within {self.startup_timeout_s:.0f} s:\n"
                           f"{self.log_tail()}")

    def api(self, path: str, method: str = "GET", timeout: float = 10) -> dict | list:
        req = urllib.request.Request(f"{self.base_url}/{path}", method=method,
                                     headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            body = resp.read()
        return json.loads(body) if body else {}

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"

    # ------------------------------------------------------------------ stop
    def stop(self, grace_s: float = 15.0) -> list[str]:
        """Shut the server down (kernels first), then end whatever is left; returns the survivors, if any.

        Order: ask the server to shut down (it shuts its kernels down), SIGTERM the server, then
        SIGKILL the server's process group and every process carrying the marker.
        """
        if self.proc is None:
            return []
        proc, self.proc = self.proc, None
        tree: list[psutil.Process] = []
        try:
            tree = psutil.Process(proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            pass
        if proc.poll() is None:
            try:
                self.api("api/shutdown", method="POST", timeout=5)
            except Exception:  # noqa: BLE001 - the server may be wedged; signals follow
                pass
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
        victims = {p.pid: p for p in tree + marked_processes(self.marker)}
        for p in victims.values():
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(list(victims.values()), timeout=10)
        left = [p for p in tree if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        left += [p for p in marked_processes(self.marker) if p.pid not in {q.pid for q in left}]
        return [describe([p]) for p in left]
