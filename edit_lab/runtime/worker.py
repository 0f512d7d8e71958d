"""One rank of a run: the training loop every launcher (ours, torchrun, a test) ends up in.

Run as `python -m edit_lab.runtime.worker --config CFG.json --rank R --world-size N --master-port P` by
`edit_lab.runtime.launch`, or under torchrun (`torchrun ... -m edit_lab.runtime.worker --config CFG.json`), where
RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT / GROUP_RANK come from the environment.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import os
import signal
import sys
import time
import traceback
from pathlib import Path

import torch
import torch.distributed as dist

from edit_lab.config import RunConfig
from edit_lab.core.mesh import Mesh, configured_sync_groups
from edit_lab.records import rundir
from edit_lab.records.events import Clock
from edit_lab.records.rundir import ProgressFile, RunWriter
from edit_lab.train import checkpoint
from edit_lab.train.trainer import Trainer, configure_cpu, resolve_backend


def _die_with_parent() -> None:
    """Ask Linux to kill this worker when its launcher dies: a notebook kernel restart leaves no orphans."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except OSError:
            pass
    # the launcher may have died while this process was still importing torch, before the request
    # above: then the kernel has already re-parented us and will never send the signal
    launcher = os.environ.get("EDIT_LAB_LAUNCHER_PID")
    if launcher is not None and os.getppid() != int(launcher):
        try:
            os.kill(int(launcher), 0)  # still there: we were merely started through a wrapper
        except ProcessLookupError:
            os._exit(1)
        except PermissionError:
            pass


def resolve_device(cfg: RunConfig, local_rank: int) -> torch.device:
    want = cfg.runtime.device
    if want == "auto":
        want = "cuda" if torch.cuda.is_available() else "cpu"
    if want == "cuda":
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


#: Test hook (tests/distributed/test_device_clean.py): the device tensors created without one land on.
STRAY_DEVICE_ENV = "EDIT_LAB_STRAY_DEVICE"


def stray_tensors_to(device: str | None) -> None:
    """Make torch's default device `device` (e.g. "meta") once the model and data are placed, in tests.

    On a GPU a tensor created without a device is a CPU tensor, which NCCL refuses and CUDA kernels
    will not mix with; on a CPU-only machine it is on the model's device by luck and nothing fails.
    With the default device moved away from the comm device, every such tensor fails here too: a
    collective refuses it (`Comm`'s device rule), and computing with it next to CPU tensors raises.
    """
    if device:
        torch.set_default_device(device)


def run_rank(cfg: RunConfig, rank: int, world_size: int, local_rank: int, init_method: str | None = None,
             store: dist.Store | None = None) -> None:
    """Initialise the process group, train, and write this rank's share of the run directory."""
    configure_cpu(cfg.runtime.threads)
    out = Path(cfg.runtime.out)
    device = resolve_device(cfg, local_rank)
    backend = resolve_backend(cfg, device)
    dist.init_process_group(backend, init_method=init_method, store=store, rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=cfg.runtime.timeout_s))
    trainer: Trainer | None = None
    try:
        mesh = Mesh.build(cfg.shards, cfg.replicas, timeout_s=cfg.runtime.timeout_s, sync_groups=configured_sync_groups(cfg))
        clock = Clock()
        trainer = Trainer(cfg, mesh, device, clock)
        stray_tensors_to(os.environ.get(STRAY_DEVICE_ENV))
        start_unix = torch.tensor([time.time()], dtype=torch.float64, device=trainer.comm.device)
        trainer.comm.broadcast(start_unix, src=0, kind="start_time")
        dist.barrier()
        clock.reset()  # the common start: every rank leaves the barrier at (nearly) the same moment
        trainer.log.start_device_clock()
        progress = ProgressFile(out / rundir.PROGRESS) if rank == 0 else None
        trainer.run(progress)
        state = trainer.engine.full_state_dict(trainer.method.eval_shards())  # a shard-group collective
        RunWriter(out, cfg, start_unix.item()).write(trainer.rank_record(), state)
    except BaseException:
        (out / rundir.error_file(rank)).write_text(traceback.format_exc())
        if trainer is not None:
            trainer.log.write(out / rundir.events_file(rank))
        raise
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="one rank of an edit_lab run (use `python -m edit_lab run` instead)")
    ap.add_argument("--config", required=True, help="config.json written by the launcher or the CLI")
    ap.add_argument("--rank", type=int, default=None)
    ap.add_argument("--world-size", type=int, default=None)
    ap.add_argument("--master-addr", default="127.0.0.1")
    ap.add_argument("--master-port", type=int, default=None)
    ap.add_argument("--life", type=int, default=0, help="survival: 0 at the start, n for a replica's n-th replacement")
    args = ap.parse_args(argv)
    _die_with_parent()
    cfg = RunConfig.load(args.config)
    if args.rank is None:  # torchrun: everything comes from the environment
        if cfg.runtime.survive:
            from edit_lab.config import ConfigError

            raise ConfigError("survive=True is not allowed under torchrun: the views live on the store of the lab's "
                              "own launcher (python -m edit_lab run), which also confirms and fences deaths")
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        cfg = checkpoint.prepare_resume(cfg.validate(world_size=world))
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        Path(cfg.runtime.out).mkdir(parents=True, exist_ok=True)
        kwargs: dict = {"init_method": "env://"}
    else:  # our launcher: it hosts the rendezvous store, we are its clients
        rank, world, local_rank = args.rank, args.world_size, args.rank
        store = dist.TCPStore(args.master_addr, args.master_port, world, is_master=False,
                              timeout=datetime.timedelta(seconds=cfg.runtime.timeout_s))
        kwargs = {"store": store}
    try:
        if cfg.runtime.survive:  # each replica its own world, the sync group the view's (runtime/survive_worker.py)
            from edit_lab.runtime.survive_worker import run_surviving_rank

            run_surviving_rank(cfg, rank, world, kwargs["store"], args.life)
        else:
            run_rank(cfg, rank, world, local_rank, **kwargs)
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)  # never hang in interpreter shutdown with a broken process group
    sys.stdout.flush()
    sys.stderr.flush()
    # The run directory is complete. Skip interpreter teardown: gloo's background threads can abort the
    # process while static objects are destroyed ("terminate called without an active exception"),
    # which would turn a finished run into a failed one.
    os._exit(0)


if __name__ == "__main__":
    main()
