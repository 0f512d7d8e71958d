"""Command line: `python -m edit_lab {run,show,demo,report,predict,torchrun-config}`.

Every knob of RunConfig is a flag of `run` (`cfg.schedule.sync_interval` -> `--sync-interval`), generated from
the knob's declaration (`config.knob`): its section is the flag's group in `--help`, its help text and
bounds are the flag's help, its choices the flag's choices, so the CLI and the config can never
disagree. A wrong value is refused in one line on stderr with exit status 2, before any process
starts; a failed rank is reported with that rank's traceback alone.
"""

from __future__ import annotations

import argparse
import json
import sys
import typing
from pathlib import Path

from edit_lab.config import METHODS, RENAMED, SECTIONS, ConfigError, RunConfig, field_hint, knobs


class _Parser(argparse.ArgumentParser):
    """argparse, but a wrong argument costs one line on stderr (exit 2), not the whole usage text."""

    def error(self, message: str) -> typing.NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (--help lists the flags)\n")


def _choice(name: str, choices: tuple[str, ...]):
    """An argparse type that refuses a value outside `choices` in the config's own words."""

    def parse(value: str) -> str:
        if value not in choices:
            raise argparse.ArgumentTypeError(f"{name}={value!r} is not allowed: one of {', '.join(choices)}")
        return value

    parse.__name__ = name  # argparse names the type in its messages
    return parse


def _integer(name: str, k: typing.Any):
    """An argparse type for an integer knob that refuses a non-integer (`nan`, `2.5`, `1e3`) in the config's own
    words, naming the field and its allowed values, as the config refuses an integer out of its bounds."""

    def parse(value: str) -> int:
        try:
            return int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name}={value!r} is not allowed: {k.allowed(int)}") from None

    parse.__name__ = name
    return parse


def _add_config_flags(ap: argparse.ArgumentParser) -> None:
    """One flag per RunConfig field, grouped by section, from the fields' declarations."""
    groups = {section: ap.add_argument_group(section) for section in SECTIONS}
    defaults = RunConfig()
    for name, k in knobs().items():
        flag = "--" + name.replace("_", "-")
        hint = field_hint(name)
        default = defaults.get(name)
        bounds = "" if hint is bool or k.choices or k.checked_by or hint not in (int, float) else f"; {k.allowed(hint)}"
        help_ = f"{k.help}{bounds} (default: {default})".replace("%", "%%")
        g = groups[k.section]
        if hint is bool:
            g.add_argument(flag, dest=name, action=argparse.BooleanOptionalAction, default=None, help=help_)
        elif name == "betas":
            g.add_argument(flag, dest=name, type=float, nargs=2, default=None, help=help_, metavar=("B1", "B2"))
        elif hint == tuple[int, ...]:
            g.add_argument(flag, dest=name, type=int, nargs="*", default=None, help=help_, metavar="N")
        elif k.choices:
            g.add_argument(flag, dest=name, type=_choice(name, k.choices), choices=k.choices, default=None, help=help_)
        else:
            kind = _integer(name, k) if hint is int else hint if hint is float else str
            g.add_argument(flag, dest=name, type=kind, default=None, help=help_,
                           metavar={int: "N", float: "X"}.get(hint, "PATH"))
    for old, new in RENAMED.items():  # the old flags still work, unlisted
        groups[knobs()[new].section].add_argument("--" + old.replace("_", "-"), dest=new, type=field_hint(new), default=None,
                       help=argparse.SUPPRESS)


def config_from_args(args: argparse.Namespace) -> RunConfig:
    """`--config FILE` (or the defaults) with every flag that was given on top."""
    base = RunConfig()
    if getattr(args, "config", None):
        try:
            base = RunConfig.load(args.config)
        except ConfigError:
            raise
        except (OSError, ValueError) as e:  # a missing file, or one that is not JSON
            raise ConfigError(f"config={args.config!r} is not allowed: a readable config.json ({e})") from None
    changes = {name: getattr(args, name) for name in knobs() if getattr(args, name, None) is not None}
    return base.replace(**changes)


def cmd_run(args: argparse.Namespace) -> int:
    from edit_lab.runtime.launch import launch

    cfg = config_from_args(args)
    if args.write_config:
        cfg.validate()
        if cfg.runtime.out:  # the torchrun run will write there: the same refusal as a run started here, and with
            from edit_lab.runtime.outdir import claim  # --overwrite the same clearing of the old run's files

            with claim(Path(cfg.runtime.out), args.overwrite):
                pass
        Path(args.write_config).write_text(cfg.to_json())
        print(f"wrote {args.write_config}; start it on every machine with\n"
              f"  torchrun --nnodes {cfg.replicas} --nproc-per-node {cfg.shards} --rdzv-id edit "
              f"--rdzv-backend c10d --rdzv-endpoint HOST:29400 -m edit_lab.runtime.worker --config {args.write_config}")
        return 0
    run = launch(cfg, overwrite=args.overwrite)
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
    if s.get("clock") == "virtual":  # its seconds are the cost model's, not this machine's
        lines.append(f"clock     virtual (seconds from the costs of {s.get('clock_costs')})")
    if s.get("survival"):  # a run that survived deaths (edit-method.md §16)
        sv = s["survival"]
        views = " → ".join("{" + ",".join(map(str, v["members"])) + "}" for v in sv["views"])
        lines.append(f"views     {views}; lost {sv['lost_replica_steps']} replica-steps ({sv['lost_tokens']} tokens)")
    return "\n".join(lines)


def cmd_show(args: argparse.Namespace) -> int:
    from edit_lab.records.run import Run

    run = Run(args.dir)
    if args.json:
        print(json.dumps(run.summary, indent=2))
    else:
        print(format_summary(run.summary, run.path))
    return 0


def demo(steps: int = 60, out: str = "runs/demo", methods: tuple[str, ...] | None = None) -> list[dict]:
    """`make demo`: a short, real comparison of the methods from the command line.

    Same model, data, seed and number of tokens for every method on 2 shards × 2 replicas, with a
    simulated slow sync link so that the price of talking across replicas is visible on one laptop.
    """
    from edit_lab.records.events import sync_group_bytes
    from edit_lab.runtime.launch import launch

    methods = METHODS if methods is None else methods
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ConfigError(f"method={unknown[0]!r} is not allowed: one of {', '.join(METHODS)}")
    rows = []
    for m in methods:
        cfg = RunConfig(method=m, steps=steps, shards=2, replicas=2, warmup_steps=min(10, steps // 4),
                        sync_interval=10, eval_every=0, link_latency_ms=2.0, link_bandwidth_mb_s=50.0,
                        out=str(Path(out) / m), progress=False)
        run = launch(cfg, overwrite=True)  # the demo's own directory: a second demo replaces the first
        s = run.summary
        rows.append({"method": m, "val_loss": s["final_val_loss"], "tokens_per_s": s["tokens_per_s"],
                     "wall_s": s["wall_s"], "sync_bytes": sync_group_bytes(run.events, rank=0)})
        print(f"  {m:>15}: val loss {s['final_val_loss']:.4f}, {s['tokens_per_s']:.0f} tokens/s", flush=True)
    print()
    print(f"{'method':>15} | {'val loss':>8} | {'tokens/s':>8} | {'wall s':>6} | {'sync-group MB':>13}")
    print("-" * 64)
    for r in rows:
        print(f"{r['method']:>15} | {r['val_loss']:8.4f} | {r['tokens_per_s']:8.0f} | {r['wall_s']:6.1f} | "
              f"{r['sync_bytes'] / 1e6:13.2f}")
    return rows


def cmd_demo(args: argparse.Namespace) -> int:
    demo(steps=args.steps, out=args.out, methods=tuple(args.methods))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from edit_lab.viz.report import write_report

    path = write_report(args.dir, args.output)
    print(f"wrote {path}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="python -m edit_lab", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="train one configuration on this machine and print its summary",
                         usage="%(prog)s [--config FILE] [--out DIR [--overwrite]] [--FIELD VALUE ...]")
    run.add_argument("--config", help="start from this config.json (flags override it)")
    run.add_argument("--write-config", metavar="FILE", help="only validate and write the config (for torchrun)")
    run.add_argument("--calibrate", metavar="RUN_DIR", dest="clock_costs",
                     help="with --clock virtual: the real run whose measured costs drive the clock (= --clock-costs)")
    run.add_argument("--overwrite", action="store_true",
                     help="replace the run already in --out (its files are removed first); without it such a "
                          "directory is refused")
    _add_config_flags(run)
    run.set_defaults(fn=cmd_run)
    show = sub.add_parser("show", help="print a run directory's summary")
    show.add_argument("dir")
    show.add_argument("--json", action="store_true")
    show.set_defaults(fn=cmd_show)
    demo = sub.add_parser("demo", help="a short real comparison of the methods, printed as a table")
    demo.add_argument("--steps", type=int, default=60)
    demo.add_argument("--out", default="runs/demo")
    demo.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS,
                      help="methods to compare (default: all)")
    demo.set_defaults(fn=cmd_demo)
    report = sub.add_parser("report", help="write a one-page HTML report of a run")
    report.add_argument("dir")
    report.add_argument("--output", default=None)
    report.set_defaults(fn=cmd_report)
    from edit_lab.clock.sim.cli import add_parser as add_predict_parser  # `predict`: the preview simulator
    from edit_lab.clock.sim.cli import cmd_predict

    add_predict_parser(sub, _add_config_flags, cmd_predict)
    return ap


def main(argv: list[str] | None = None) -> int:
    """Run a subcommand; a refused configuration exits 2 and a failed run 1, each without our own traceback."""
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except ConfigError as e:
        print(f"edit_lab: config error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("edit_lab: interrupted; every worker was stopped", file=sys.stderr)
        return 130
    except Exception as e:
        from edit_lab.runtime.launch import WorkerError
        from edit_lab.train.checkpoint import CheckpointError  # loaded already if it was raised: only then is it cheap

        if isinstance(e, CheckpointError):  # a resume= that names no whole checkpoint
            print(f"edit_lab: config error: resume: {e}", file=sys.stderr)
            return 2
        if isinstance(e, WorkerError):  # the failing rank's traceback is the story; the launcher's adds nothing
            print(f"edit_lab: rank {e.rank} failed (run directory {e.run_dir}):\n{e.traceback.rstrip()}",
                  file=sys.stderr)
            return 1
        if isinstance(e, TimeoutError):
            print(f"edit_lab: {e}", file=sys.stderr)
            return 1
        if isinstance(e, FileNotFoundError) and args.cmd in ("show", "report"):  # a mistyped run directory
            print(f"edit_lab: {e}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
