"""Training methods behind one interface (see `base.Method`), selected by `RunConfig.method`.

`config.METHODS` is the one list of method names and their order (the course's); the classes here
are looked up by those names, and each class states its capabilities (`Method.has_penalty`, …).
"""

from __future__ import annotations

from ..config import METHODS as METHOD_NAMES
from ..config import RunConfig
from ..sharding import ShardedModel
from .aedit import AEDiTMethod
from .base import Method
from .co2 import CO2Method
from .edit import EDiTMethod
from .local_sgd import DiLoCoMethod, PostLocalSGDMethod
from .sync import SyncMethod

_BY_NAME = {m.name: m for m in (SyncMethod, PostLocalSGDMethod, DiLoCoMethod, CO2Method, EDiTMethod, AEDiTMethod)}
METHODS: dict[str, type[Method]] = {name: _BY_NAME[name] for name in METHOD_NAMES}  # a missing class: KeyError


def method_registry() -> dict[str, type[Method]]:
    """Name → class, for every method the config accepts, in config.METHODS' order."""
    return dict(METHODS)


def capabilities(name: str) -> type[Method]:
    """The class of method `name`, to read its capabilities: `capabilities("co2").checkpointable`."""
    return METHODS[name]


def make_method(cfg: RunConfig, engine: ShardedModel) -> Method:
    return METHODS[cfg.method](cfg, engine)
