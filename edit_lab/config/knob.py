"""`Knob`: what a configuration field declares about itself (its flag, help, bounds, choices), how a value is
judged against it and how its allowed values are said, in the refusal and in `--help` alike; `knob()` declares one.

Every field of `RunConfig` and of its sections is declared with `knob(...)`, so the command line's flags, their
`--help`, the docs' tables and `RunConfig.validate` all come from one declaration per knob.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Knob:
    """What a field declares about itself: its flag, what it means, what it may be.

    `flag` is the knob's flat name, the command line's flag (`--outer-lr`) and the keyword of the flat
    constructor (`RunConfig(outer_lr=0.5)`); empty: the field's own name (`knobs()` fills it in, with the
    `section` title of the section the field sits in). `ge`/`gt`/`le`/`lt` bound a number; `finite` refuses ±inf; NaN is refused unless `nan_ok`;
    `choices` lists the allowed strings; `checked_by` names the module whose own check is the one
    definition of this field's bounds (the penalty's detector), so none is repeated here.
    """

    help: str
    flag: str = ""
    section: str = ""
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    choices: tuple[str, ...] = ()
    finite: bool = False
    nan_ok: bool = False
    checked_by: str | None = None

    def allowed(self, hint: Any) -> str:
        """The allowed values in words, as the refusal and the `--help` line say them."""
        if hint is bool:
            return "true or false"
        if self.choices:
            return "one of " + ", ".join(self.choices)
        if hint is str or hint == str | None:
            return "a path (text)" + (", or None" if hint != str else "")
        noun = "an integer" if hint is int else "a finite number" if self.finite else "a number"
        lo = (self.ge, "[", ">=") if self.ge is not None else (self.gt, "(", ">") if self.gt is not None else None
        hi = (self.le, "]", "<=") if self.le is not None else (self.lt, ")", "<") if self.lt is not None else None
        if lo and hi:
            return f"{noun} in {lo[1]}{_num(lo[0])}, {_num(hi[0])}{hi[1]}"
        if lo:
            return f"{noun} {lo[2]} {_num(lo[0])}"
        if hi:
            return f"{noun} {hi[2]} {_num(hi[0])}"
        return noun

    def admits(self, value: Any, hint: Any) -> bool:
        """Whether `value` has the field's type and lies within its declared bounds."""
        if hint is bool:
            return isinstance(value, bool)
        if hint is str or hint == str | None:
            if value is None:
                return hint != str
            return isinstance(value, str) and (not self.choices or value in self.choices)
        if hint not in (int, float):
            return True  # tuples: their rules join fields (replica indices, units), see `validate`
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (hint is int and not isinstance(value, int)):
            return False
        if math.isnan(value):
            return self.nan_ok
        if self.finite and math.isinf(value):
            return False
        return ((self.ge is None or value >= self.ge) and (self.gt is None or value > self.gt)
                and (self.le is None or value <= self.le) and (self.lt is None or value < self.lt))


def knob(default: Any, help: str, *, flag: str = "", ge: float | None = None, gt: float | None = None,
         le: float | None = None, lt: float | None = None, choices: Sequence[str] = (), finite: bool = False,
         nan_ok: bool = False, checked_by: str | None = None) -> Any:
    """A dataclass field with its help text, flag and bounds next to it (see `Knob`)."""
    return dataclasses.field(default=default, metadata={"knob": Knob(help, flag, "", ge, gt, le, lt, tuple(choices),
                                                                      finite, nan_ok, checked_by)})


def knob_of(f: dataclasses.Field) -> Knob:
    """The `Knob` a field was declared with."""
    return f.metadata["knob"]


def _num(x: float) -> str:
    return str(x) if isinstance(x, int) else f"{x:g}"
