"""The configuration of a run: `RunConfig`, its sections, their knobs and the checks that refuse a bad one.

Read in this order: `run_config.py` (RunConfig: six fields and one section per component), `sections.py` (the
sections and every knob's default, help and bounds), `penalty.py` (the penalty's section, beside its detector),
`checks.py` (the rules that join knobs), `knob.py` (how a knob is declared and judged), `presets.py` (the lab
panel's starting point). Torch-free, so a bad configuration is refused before any process starts.
"""

from edit_lab.config.checks import ConfigError
from edit_lab.config.knob import Knob, knob, knob_of
from edit_lab.config.penalty import AUTHORS_DETECTOR, PenaltyConfig
from edit_lab.config.presets import AEDIT_PANEL_BUDGET_S, cores, default_lab_config, panel_time_budget
from edit_lab.config.run_config import (
    FLAT,
    RENAMED,
    SECTION_TYPES,
    SECTIONS,
    RunConfig,
    field_help,
    field_hint,
    knobs,
)
from edit_lab.config.sections import (
    BACKENDS,
    CLOCKS,
    CORRUPT_MODES,
    DEVICES,
    FAULT_KINDS,
    INNER_OPTIMIZERS,
    VIRTUAL_COMPUTE,
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
from edit_lab.registry import METHODS, WIRE_FORMATS

__all__ = [
    "AEDIT_PANEL_BUDGET_S", "AUTHORS_DETECTOR", "BACKENDS", "CLOCKS", "CORRUPT_MODES", "DEVICES", "FAULT_KINDS", "FLAT",
    "INNER_OPTIMIZERS", "METHODS", "RENAMED", "SECTIONS", "SECTION_TYPES", "VIRTUAL_COMPUTE", "WIRE_FORMATS",
    "AEditConfig", "ClockConfig", "ConfigError", "DataConfig", "InnerConfig", "Knob", "LinkConfig", "OuterConfig",
    "PenaltyConfig", "RulesConfig", "RunConfig", "RuntimeConfig", "ScheduleConfig", "StragglerConfig",
    "StreamingConfig", "TroubleConfig", "WireConfig", "cores", "default_lab_config", "field_help", "field_hint",
    "knob", "knob_of", "knobs", "panel_time_budget",
]
