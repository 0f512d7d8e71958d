"""Command line: `python -m edit_lab {run,show,demo,report,torchrun-config}`.

Every field of RunConfig is a flag of `run` (`sync_interval` -> `--sync-interval`), with the field's
comment as its help, so the CLI and the config can never disagree.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import typing
from pathlib import Path

from .config import ConfigError, RunConfig, field_help


def _add_config_flags(ap: argparse.ArgumentParser) -> None:
    helps = field_help()
    hints = typing.get_type_hints(RunConfig)
    for f in dataclasses.fields(RunConfig):
        flag = "--" + f.name.replace("_", "-")
        hint = hints[f.name]
        default = f.default
        help_ = helps.get(f.name, "") + f" (default: {default})"
        if hint is bool:
            ap.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=None, help=help_)
        elif f.name == "betas":
            ap.add_argument(flag, dest=f.name, type=float, nargs=2, default=None, help=help_)
        elif f.name in ("straggler_replicas", "spike_units"):  # tuple[int, ...]
            ap.add_argument(flag, dest=f.name, type=int, nargs="*", default=None, help=help_)
        else:
            base = {int: int, float: float}.get(hint, None)
            if base is None:  # str or Optional[str]
                base = str
            ap.add_argument(flag, dest=f.name, type=base, default=None, help=help_)


def config_from_args(args: argparse.Namespace) -> RunConfig:
    base = RunConfig.load(args.config) if getattr(args, "config", None) else RunConfig()
    changes = {f.name: getattr(args, f.name) for f in dataclasses.fields(RunConfig)
               if getattr(args, f.name, None) is not None}
    return base.replace(**changes)


def cmd_run(args: argparse.Namespace) -> int:
    from .launch import launch

    cfg = config_from_args(args)
    if args.write_config:
        cfg.validate()
        Path(args.write_config).write_text(cfg.to_json())
        print(f"wrote {args.write_config}; start it on every machine with\n"
              f"  torchrun --nnodes {cfg.replicas} --nproc-per-node {cfg.shards} --rdzv-id edit "
              f"--rdzv-backend c10d --rdzv-endpoint HOST:29400 -m edit_lab.worker --config {args.write_config}")
        return 0
    run = launch(cfg)
    print(format_summary(run.summary, run.path))
    return 0


def format_summary(s: dict, path: Path | str) -> str:
    lines = [f"run       {path}",
             f"method    {s['method']}  ({s['shards']} shards × {s['replicas']} replicas, model {s['model']})",
             f"steps     {s['steps']}  wall {s['wall_s']:.1f} s  step {1e3 * s['step_time_s']:.1f} ms",
             f"tokens/s  {s['tokens_per_s']:.0f}",
             f"loss      train {s['final_train_loss']:.4f}  val {s['final_val_loss']:.4f}"]
    for r, v in s["per_replica"].items():
        lines.append(f"replica {r}  {v['steps']} steps  {v['tokens_per_s']:.0f} tok/s  sync wait {v['sync_wait_s']:.2f} s")
    return "\n".join(lines)


def cmd_show(args: argparse.Namespace) -> int:
    from .run import Run

    run = Run(args.dir)
    if args.json:
        print(json.dumps(run.summary, indent=2))
    else:
        print(format_summary(run.summary, run.path))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import demo

    demo(steps=args.steps, out=args.out, methods=tuple(args.methods))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from .report import write_report

    path = write_report(args.dir, args.output)
    print(f"wrote {path}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m edit_lab", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="train one configuration on this machine and print its summary")
    run.add_argument("--config", help="start from this config.json (flags override it)")
    run.add_argument("--write-config", metavar="FILE", help="only validate and write the config (for torchrun)")
    _add_config_flags(run)
    run.set_defaults(fn=cmd_run)
    show = sub.add_parser("show", help="print a run directory's summary")
    show.add_argument("dir")
    show.add_argument("--json", action="store_true")
    show.set_defaults(fn=cmd_show)
    demo = sub.add_parser("demo", help="a short real comparison of the methods, printed as a table")
    demo.add_argument("--steps", type=int, default=60)
    demo.add_argument("--out", default="runs/demo")
    demo.add_argument("--methods", nargs="+", default=["sync", "post_local_sgd", "diloco", "co2", "edit", "aedit"],
                      help="methods to compare (default: all)")
    demo.set_defaults(fn=cmd_demo)
    report = sub.add_parser("report", help="write a one-page HTML report of a run")
    report.add_argument("dir")
    report.add_argument("--output", default=None)
    report.set_defaults(fn=cmd_report)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except ConfigError as e:
        print(f"edit_lab: config error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
