"""Warm workers: one process that has imported torch forks every rank of every run.

Why: a fresh rank spends 2-4 s importing torch before its first step, and four ranks importing at
once on two cores take twice that: more than a short lesson's run trains, and most of the test
suite's time. The fork server imports `edit_lab.runtime.worker` once per launcher process (a notebook
kernel, a test session, a CLI call); each rank is then a `fork()` of it that runs
`edit_lab.runtime.worker.main` with its own arguments, environment and log file. A rank is still a process
of its own, with real gloo, the same code as `python -m edit_lab.runtime.worker`, and nothing of an earlier
run: the server never trains, never opens a process group and never touches a device, so a fork
copies nothing but imported modules.

What stays as with fresh processes (launch.py): a crash cannot take the launcher down; if the
launcher dies, even by SIGKILL, the server reads the end of its stdin and kills its ranks, and a
server that dies takes its ranks with it (each asks for PR_SET_PDEATHSIG). The server is replaced
when a source file of the package changed since it started (an edited library is what the next run
runs), or when the interpreter or the worker thread count differ.

Not used (the launcher falls back to `python -m edit_lab.runtime.worker` per rank): off Linux, for runs on
CUDA devices (the server must never initialise CUDA before a fork, and that path is checked on GPU
machines with fresh processes), when the server is not single-threaded once it has imported torch
(forking a threaded process is unsafe; `threads` > 1 starts BLAS pools), when it fails to start,
and when `EDIT_LAB_WARM_WORKERS=0`.

Protocol: JSON lines. The server writes {"ready": …} once, then for each request on stdin
({"argv", "env", "log", "cwd"}) it forks and writes {"spawned": pid}; whenever a rank ends it
writes {"exited": pid, "code": c} (c as `Popen.returncode`: negative for a signal).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

#: Set to 0 to start every rank as a fresh `python -m edit_lab.runtime.worker` process.
ENABLE_ENV = "EDIT_LAB_WARM_WORKERS"
_PACKAGE = Path(__file__).resolve().parents[1]  # edit_lab/


def enabled(device: str) -> bool:
    """Whether a run on `device` ("cpu", "cuda", "auto") may use warm workers on this machine."""
    if os.environ.get(ENABLE_ENV, "1") == "0" or not sys.platform.startswith("linux"):
        return False
    if device == "cpu":
        return True
    if device == "cuda":
        return False
    import torch  # "auto": the launcher has torch loaded already (its rendezvous store)

    return not torch.cuda.is_available()


def source_fingerprint() -> tuple:
    """What the server's imported code was read from: every .py file of the package, by mtime and size."""
    files = sorted(_PACKAGE.rglob("*.py"))
    return tuple((str(p.relative_to(_PACKAGE)), p.stat().st_mtime_ns, p.stat().st_size) for p in files)


def _send(fd: int, msg: dict) -> None:
    data = (json.dumps(msg) + "\n").encode()
    while data:
        data = data[os.write(fd, data):]


def _lines(fd: int, buf: bytearray) -> tuple[list[dict], bool]:
    """Read what `fd` has now; return the complete JSON lines and whether it reached its end."""
    chunk = os.read(fd, 65536)
    buf.extend(chunk)
    out = []
    while b"\n" in buf:
        line, _, rest = bytes(buf).partition(b"\n")
        buf[:] = rest
        out.append(json.loads(line))
    return out, not chunk


# ------------------------------------------------------------------------------------ the server
def _thread_count() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return -1


def _child(request: dict) -> None:
    """In the forked rank: become `python -m edit_lab.runtime.worker ARGV` with the request's env and log; never return."""
    code = 1
    try:
        fd = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        sys.argv = ["-m edit_lab.runtime.worker", *request["argv"]]
        import random

        random.seed()  # a fresh process draws its own seed; a fork would share the server's
        from edit_lab.runtime import worker

        worker.main(request["argv"])  # ends the process itself (os._exit)
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def serve() -> None:
    """The server's loop: fork a rank per request, report each rank's end, stop at the end of stdin."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C meant for the launcher; the launcher stops ranks
    import edit_lab.runtime.worker  # noqa: F401  (the cost paid once: torch, the model, the methods)

    try:
        import torch._dynamo  # noqa: F401  (the first optimizer step imports it otherwise, in every rank)
    except Exception:
        pass
    threads = _thread_count()
    _send(1, {"ready": True, "pid": os.getpid(), "threads": threads})
    children: set[int] = set()
    buf = bytearray()
    launcher = os.getppid()
    try:
        while os.getppid() == launcher:  # re-parented: the launcher died (its stdin may live on elsewhere)
            readable, _, _ = select.select([0], [], [], 0.05)
            while children:
                pid, status = os.waitpid(-1, os.WNOHANG)
                if pid == 0:
                    break
                children.discard(pid)
                _send(1, {"exited": pid, "code": os.waitstatus_to_exitcode(status)})
            if not readable:
                continue
            requests, eof = _lines(0, buf)
            for request in requests:
                threads = _thread_count()
                if threads != 1:
                    _send(1, {"error": f"the fork server runs {threads} threads; it forks only single-threaded"})
                    continue
                pid = os.fork()
                if pid == 0:
                    _child(request)
                children.add(pid)
                _send(1, {"spawned": pid})
            if eof:
                break
    finally:  # the launcher is gone (or we failed): no rank outlives it
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


# ------------------------------------------------------------------------------------ the launcher's side
class ForkServer:
    """The launcher's handle on its server: start it, ask it for ranks, collect their ends."""

    def __init__(self, env: dict[str, str], key: tuple) -> None:
        self.key = key
        self._errors = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, "-m", "edit_lab.runtime.forkserver"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._errors, env=env, close_fds=True)
        self._buf = bytearray()
        self._lock = threading.RLock()
        self._replies: list[dict] = []  # "ready", "spawned" and "error" messages not yet taken, in order
        self.pids: list[int] = []
        self.exits: dict[int, int] = {}
        self.ready = self._reply(timeout_s=180.0)
        if "ready" not in self.ready:
            raise RuntimeError(f"the fork server said {self.ready} before it was ready")

    def pump(self, timeout_s: float = 0.0) -> None:
        """Read the server's messages for up to `timeout_s`; record every rank's end as it comes."""
        with self._lock:
            if self.proc.stdout.closed:
                return
            fd = self.proc.stdout.fileno()
            readable, _, _ = select.select([fd], [], [], max(0.0, timeout_s))
            if not readable:
                return
            msgs, eof = _lines(fd, self._buf)
            for m in msgs:
                if "exited" in m:
                    self.exits[m["exited"]] = m["code"]
                else:
                    self._replies.append(m)
            if eof:  # the server is gone, and its ranks with it (PR_SET_PDEATHSIG)
                self.proc.stdout.close()
                self.proc.wait()
                for pid in self.pids:
                    self.exits.setdefault(pid, -signal.SIGKILL)

    def _reply(self, timeout_s: float) -> dict:
        deadline = time.monotonic() + timeout_s
        while not self._replies:
            self.pump(0.05)
            if (self.proc.stdout.closed and not self._replies) or time.monotonic() > deadline:
                self._errors.seek(0)
                raise RuntimeError("the fork server ended or did not answer: "
                                   + self._errors.read().decode(errors="replace")[-2000:])
        return self._replies.pop(0)

    def alive(self) -> bool:
        return self.proc.poll() is None and not self.proc.stdout.closed

    def spawn(self, argv: list[str], env: dict[str, str], log: Path) -> "WarmProcess":
        """Fork one rank running `edit_lab.runtime.worker.main(argv)` under `env`, its output into `log`."""
        with self._lock:
            _send(self.proc.stdin.fileno(), {"argv": argv, "env": env, "log": str(log), "cwd": os.getcwd()})
            reply = self._reply(timeout_s=30.0)
            if "spawned" not in reply:
                raise RuntimeError(f"the fork server could not start a rank: {reply}")
            self.pids.append(reply["spawned"])
        return WarmProcess(self, reply["spawned"])

    def close(self) -> None:
        """End the server: its stdin closes, so it kills whatever rank is left and exits."""
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()


class WarmProcess:
    """A forked rank, with the part of `subprocess.Popen` the launcher uses (poll, wait, signals)."""

    def __init__(self, server: ForkServer, pid: int) -> None:
        self.server, self.pid = server, pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.server.pump(0.0)
            self.returncode = self.server.exits.get(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"rank pid {self.pid}", timeout)
            self.server.pump(0.05 if deadline is None else min(0.05, max(0.0, deadline - time.monotonic())))
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:  # not yet reaped, so the pid is still ours
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


_server: ForkServer | None = None
_refused: tuple | None = None  # a key whose server could not start or was not single-threaded
_server_lock = threading.Lock()


def server_for(env: dict[str, str]) -> ForkServer | None:
    """This process's fork server for workers under `env`, started or replaced as needed; None to fall back."""
    global _server
    key = (sys.executable, env.get("OMP_NUM_THREADS"), env.get("MKL_NUM_THREADS"), source_fingerprint())
    global _refused
    with _server_lock:
        if key == _refused:
            return None
        if _server is not None and (_server.key != key or not _server.alive()):
            _server.close()
            _server = None
        if _server is None:
            try:
                _server = ForkServer(env, key)
            except (OSError, RuntimeError):
                _refused = key
                return None
            if _server.ready.get("threads") != 1:  # e.g. BLAS thread pools: forking would be unsafe
                _server.close()
                _server, _refused = None, key
        return _server


def shutdown() -> None:
    """End this process's fork server, if any (it also ends by itself when this process does)."""
    global _server
    with _server_lock:
        if _server is not None:
            _server.close()
            _server = None


if __name__ == "__main__":
    # no interpreter teardown: with torch loaded it took over 5 s on an overloaded machine, and a killed
    # launcher's server must be gone at once (every message was written with os.write, nothing is buffered)
    code = 0
    try:
        serve()
    except BaseException:
        import traceback

        traceback.print_exc()  # to the launcher's error file
        sys.stderr.flush()
        code = 1
    os._exit(code)
