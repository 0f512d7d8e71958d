"""`python -m edit_lab predict --calibrate RUN_DIR [run flags]`: a run's throughput, predicted, as JSON.

The configuration starts from the calibration run's own config (so `--method aedit` alone asks "what
would A-EDiT have done on that run?"), then `--config FILE`, then the flags, exactly the flags of
`run`. It is validated as `run` validates it (a wrong value: exit 2, one line), and nothing is launched.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

from edit_lab.config import RunConfig, knobs


def add_parser(sub: argparse._SubParsersAction, add_config_flags: Callable[[argparse.ArgumentParser], None],
               fn: Callable[[argparse.Namespace], int]) -> argparse.ArgumentParser:
    """The `predict` subcommand, with `run`'s config flags (from the same generator)."""
    p = sub.add_parser("predict", help="predict a configuration's tokens/s and waiting in milliseconds, from a "
                                       "real run's measured costs (nothing is launched)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--calibrate", metavar="RUN_DIR", help="a real run directory to measure the costs from "
                                                            "(its config is the starting point)")
    src.add_argument("--costs", metavar="FILE", help="a costs JSON (`Costs.to_json`) instead of a run")
    p.add_argument("--config", help="start from this config.json instead (flags override it)")
    p.add_argument("--events", metavar="DIR", help="also write the simulated run directory here (figures read it)")
    add_config_flags(p)
    p.set_defaults(fn=fn)
    return p


def config_for(args: argparse.Namespace, base: RunConfig) -> RunConfig:
    """`base`, or `--config`, with every flag that was given applied on top."""
    if getattr(args, "config", None):
        base = RunConfig.load(args.config)
    changes = {name: getattr(args, name) for name in knobs() if getattr(args, name, None) is not None}
    return base.replace(**changes)


def cmd_predict(args: argparse.Namespace) -> int:
    from edit_lab.clock.calibrate import calibrate
    from edit_lab.clock.costs import Costs
    from edit_lab.clock.sim.predict import simulate
    from edit_lab.records.run import Run

    if args.calibrate:
        run = Run(args.calibrate)
        costs, base = calibrate(run), run.config.replace(out=None, resume=None)
    else:
        costs, base = Costs.from_dict(json.loads(Path(args.costs).read_text())), RunConfig()
    cfg = config_for(args, base).validate()
    pred = simulate(cfg, costs)
    if args.events:
        pred.write(args.events)
    print(json.dumps({**pred.summary, "costs": costs.source}, indent=2))
    return 0
