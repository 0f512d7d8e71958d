"""Training methods behind one interface (see `base.Method`), selected by `RunConfig.method`."""

from __future__ import annotations

from ..config import RunConfig
from ..sharding import ShardedModel
from .aedit import AEDiTMethod
from .base import Method
from .co2 import CO2Method
from .edit import EDiTMethod
from .local_sgd import DiLoCoMethod, PostLocalSGDMethod
from .sync import SyncMethod

METHODS: dict[str, type[Method]] = {
    m.name: m for m in (SyncMethod, PostLocalSGDMethod, DiLoCoMethod, CO2Method, EDiTMethod, AEDiTMethod)
}


def method_registry() -> dict[str, type[Method]]:
    """Name → class, for every method the config accepts."""
    return dict(METHODS)


def make_method(cfg: RunConfig, engine: ShardedModel) -> Method:
    return METHODS[cfg.method](cfg, engine)
