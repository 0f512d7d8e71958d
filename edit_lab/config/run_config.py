"""RunConfig: the one object that travels from a notebook, the CLI or a test to every worker.

Six fields say what runs (method, S, R, steps or a time budget, seed); everything else sits in a section, a frozen
dataclass handed to the component it drives (`cfg.penalty` to the penalty, `cfg.outer` to the outer step,
`cfg.wire` to the wire format: edit_lab/config/sections.py). Every knob is declared once with `knob(...)`, and the
rest is derived from that declaration: `validate()` checks every declared bound, the command line's flags, their
groups and their `--help` are generated from it (`edit_lab.__main__`), and so are the docs' tables.

Two spellings of one knob, on purpose: the flat flag (`outer_lr`, the command line's `--outer-lr`, and a keyword of
`RunConfig(...)` and `replace(...)`, so a notebook writes `RunConfig(method="edit", outer_lr=0.5)`), and the path
the code reads (`cfg.outer.lr`). `config.json` is written in sections; an older flat one still loads.

`validate()` refuses a bad value *before* any process starts, with one line that names the field and what is
allowed, because a typo found by a spawned worker costs a minute of waiting and a traceback from four processes.
Nothing on that path imports torch unless a rule needs it, so the command line refuses a bad configuration in a
fraction of a second.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import json
import os
import typing
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from edit_lab.config.checks import ConfigError, RunConfigChecks
from edit_lab.config.knob import Knob, knob, knob_of
from edit_lab.config.penalty import PenaltyConfig
from edit_lab.config.sections import (
    AEditConfig,
    ClockConfig,
    DataConfig,
    InnerConfig,
    LinkConfig,
    OuterConfig,
    RulesConfig,
    RuntimeConfig,
    ScheduleConfig,
    StragglerConfig,
    StreamingConfig,
    TroubleConfig,
    WireConfig,
)
from edit_lab.registry import METHODS

#: Old flag -> its new name. Old config.json files and the old CLI flags keep working.
RENAMED = {"link_bandwidth_mbps": "link_bandwidth_mb_s"}

#: The title of the six fields that are no section's, in `--help`.
S_RUN = "what to run"


@dataclass(frozen=True, init=False)
class RunConfig(RunConfigChecks):
    """Everything that defines a run: what runs, and one section per component (see the module's docstring).

    `RunConfig(**values)` takes the six top-level fields, whole sections (`penalty=PenaltyConfig(...)`) and flat
    flags (`penalty_alpha=0.5`), the flags last; anything else is a TypeError naming the closest flag.
    """

    method: str = knob("sync", "the training method", choices=METHODS)
    shards: int = knob(2, "S: ranks holding one replica (shard group size)", ge=1)
    replicas: int = knob(2, "R: sync group size", ge=1)
    steps: int = knob(60, "inner optimizer steps (ignored with a time budget)", ge=1)
    time_budget: float = knob(0.0, "seconds of wall clock to train for; every replica trains as many steps as fit "
                              "(0: train `steps` steps)", ge=0.0, finite=True)
    seed: int = knob(0, "seed of the model's initialisation and of every batch", ge=0)
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    inner: InnerConfig = dataclasses.field(default_factory=InnerConfig)
    schedule: ScheduleConfig = dataclasses.field(default_factory=ScheduleConfig)
    outer: OuterConfig = dataclasses.field(default_factory=OuterConfig)
    penalty: PenaltyConfig = dataclasses.field(default_factory=PenaltyConfig)
    aedit: AEditConfig = dataclasses.field(default_factory=AEditConfig)
    streaming: StreamingConfig = dataclasses.field(default_factory=StreamingConfig)
    wire: WireConfig = dataclasses.field(default_factory=WireConfig)
    stragglers: StragglerConfig = dataclasses.field(default_factory=StragglerConfig)
    link: LinkConfig = dataclasses.field(default_factory=LinkConfig)
    trouble: TroubleConfig = dataclasses.field(default_factory=TroubleConfig)
    clock: ClockConfig = dataclasses.field(default_factory=ClockConfig)
    runtime: RuntimeConfig = dataclasses.field(default_factory=RuntimeConfig)
    rules: RulesConfig = dataclasses.field(default_factory=RulesConfig)

    def __init__(self, **values: Any) -> None:
        _fill(self, {f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()
                     for f in fields(RunConfig)}, values)

    def __getattr__(self, name: str) -> Any:
        """Only reached for a missing attribute: an old flat name gets its section's path in the message."""
        if name in FLAT and FLAT[name][0] is not None:
            section, attr = FLAT[name]
            raise AttributeError(f"RunConfig has no attribute {name!r}: it is cfg.{section}.{attr} (the flag "
                                 f"--{name.replace('_', '-')}; cfg.get({name!r}) reads it by its flag)")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    # ------------------------------------------------------------------
    @property
    def world_size(self) -> int:
        return self.shards * self.replicas

    @property
    def quorum_m(self) -> int:
        """How many replicas' gradients a step of backup workers averages: `backup_m`, or R - 1 when it is 0."""
        return self.stragglers.backup_m or self.replicas - 1

    def progress_total(self) -> tuple[int, str]:
        """What the progress file counts up to, and in what: the budget's seconds, or the steps."""
        return (int(self.time_budget), "s") if self.time_budget else (self.steps, "step")

    def get(self, flag: str) -> Any:
        """The value of a knob by its flag (`cfg.get("outer_lr")` is `cfg.outer.lr`)."""
        section, attr = FLAT[flag]
        return getattr(self if section is None else getattr(self, section), attr)

    def flat(self) -> dict[str, Any]:
        """Every knob by its flag, in `knobs()` order: what the command line would say."""
        return {flag: self.get(flag) for flag in FLAT}

    def replace(self, **changes: Any) -> "RunConfig":
        """A copy with `changes` (top-level fields, whole sections or flat flags, as the constructor takes)."""
        new = object.__new__(RunConfig)
        _fill(new, {f.name: getattr(self, f.name) for f in fields(RunConfig)}, changes)
        return new

    def to_dict(self) -> dict[str, Any]:
        """The config in sections, as config.json holds it."""
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RunConfig":
        """A config from a dict such as a config.json: in sections, or flat as older runs wrote it; old names
        (`RENAMED`) are read as the new ones."""
        flat: dict[str, Any] = {}
        for key, value in d.items():
            if key in SECTION_TYPES and isinstance(value, dict):
                attrs = {f.name: f for f in fields(SECTION_TYPES[key])}
                for attr, v in value.items():
                    if attr not in attrs:
                        raise ConfigError(f"unknown config field(s): {key}.{attr}")
                    flat[_flag(SECTION_TYPES[key], attrs[attr])] = v
            else:
                flat[key] = value
        flat = _renamed(flat)
        unknown = sorted(set(flat) - set(FLAT))
        if unknown:
            raise ConfigError(f"unknown config field(s): {', '.join(unknown)}")
        for flag, value in flat.items():
            if isinstance(value, list) and typing.get_origin(field_hint(flag)) is tuple:
                flat[flag] = tuple(value)
        return cls(**flat)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "RunConfig":
        return cls.from_dict(json.loads(Path(path).read_text()))

    # ------------------------------------------------------------------
    def validate(self, world_size: int | None = None) -> "RunConfig":
        """Raise ConfigError naming the first bad field; return self so calls chain.

        First every knob's declared type and bounds (`knob`), then the rules that join knobs (`RunConfigChecks`).
        `world_size` is the process count imposed from outside (torchrun's WORLD_SIZE), if any.
        """
        for flag, k in knobs().items():
            hint = field_hint(flag)
            if k.checked_by is None and not k.admits(self.get(flag), hint):
                self._bad(flag, k.allowed(hint))
        self._check_joined(world_size)
        return self


#: The sections by field name, in declaration order.
SECTION_TYPES: dict[str, type] = {name: t for name, t in typing.get_type_hints(RunConfig).items()
                                  if dataclasses.is_dataclass(t)}


def _flag(section: type, f: dataclasses.Field) -> str:
    """The flag of a section's field: its own (`flag=`), else the section's prefix and its name."""
    return knob_of(f).flag or getattr(section, "PREFIX", "") + f.name


def _flat_names() -> dict[str, tuple[str | None, str]]:
    """Flag -> (section or None for a top-level field, attribute), in `--help` order."""
    out: dict[str, tuple[str | None, str]] = {}
    for f in fields(RunConfig):
        if f.name not in SECTION_TYPES:
            out[f.name] = (None, f.name)
            continue
        cls = SECTION_TYPES[f.name]
        for g in fields(cls):
            out[_flag(cls, g)] = (f.name, g.name)
    return out


FLAT = _flat_names()


def _fill(cfg: RunConfig, parts: dict[str, Any], values: dict[str, Any]) -> None:
    """Set `cfg`'s fields from `parts` (field -> value or section) with `values` on top: whole sections first,
    then the flat flags, each into its section."""
    parts = dict(parts)
    values = _renamed(values)
    flags: dict[str, dict[str, Any]] = {}
    for key, value in values.items():
        if key in SECTION_TYPES and isinstance(value, SECTION_TYPES[key]):
            parts[key] = value
        elif key in FLAT:
            section, attr = FLAT[key]
            if section is None:
                parts[key] = value
            else:
                flags.setdefault(section, {})[attr] = value
        else:
            near = difflib.get_close_matches(key, list(FLAT) + list(SECTION_TYPES), n=1)
            raise TypeError(f"RunConfig got an unexpected keyword {key!r}" + (f" (did you mean {near[0]!r}?)"
                                                                                 if near else ""))
    for section, changes in flags.items():
        parts[section] = dataclasses.replace(parts[section], **changes)
    for name, value in parts.items():
        object.__setattr__(cfg, name, value)


def _renamed(d: dict[str, Any]) -> dict[str, Any]:
    """`d` with old flags (`RENAMED`) replaced by the new ones; both at once is refused."""
    d = dict(d)
    for old, new in RENAMED.items():
        if old in d:
            if new in d:
                raise ConfigError(f"{old} and {new} are the same field ({old} is its old name): give only {new}")
            d[new] = d.pop(old)
    return d


@functools.cache
def knobs() -> dict[str, Knob]:
    """Flag -> its declaration (with its flag and its section's title filled in), in `--help` order."""
    out = {}
    for flag, (section, attr) in FLAT.items():
        owner = RunConfig if section is None else SECTION_TYPES[section]
        k = knob_of(next(f for f in fields(owner) if f.name == attr))
        out[flag] = dataclasses.replace(k, flag=flag, section=S_RUN if section is None else owner.TITLE)
    return out


@functools.cache
def field_hint(flag: str) -> Any:
    """The resolved type of the knob `flag` (`int`, `float`, `str | None`, `tuple[int, ...]`…)."""
    section, attr = FLAT[flag]
    return typing.get_type_hints(RunConfig if section is None else SECTION_TYPES[section])[attr]


def field_help() -> dict[str, str]:
    """Each knob's help text by its flag (the CLI's `--help` and the docs show it)."""
    return {name: k.help for name, k in knobs().items()}


#: The section titles, in the order `--help` and the docs list them.
SECTIONS: tuple[str, ...] = (S_RUN, *(cls.TITLE for cls in SECTION_TYPES.values()))
