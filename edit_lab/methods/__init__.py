"""Training methods behind one interface (see `base.Method`), selected by `RunConfig.method`."""

from __future__ import annotations

from ..config import RunConfig
from ..sharding import ShardedModel
from .base import Method
from .sync import SyncMethod


def method_registry() -> dict[str, type[Method]]:
    """Name → class; methods register here as they are written."""
    registry: dict[str, type[Method]] = {"sync": SyncMethod}
    try:
        from .local_sgd import DiLoCoMethod, PostLocalSGDMethod

        registry.update(post_local_sgd=PostLocalSGDMethod, diloco=DiLoCoMethod)
    except ImportError:
        pass
    try:
        from .edit import EDiTMethod

        registry["edit"] = EDiTMethod
    except ImportError:
        pass
    from .aedit import AEDiTMethod
    from .co2 import CO2Method

    registry.update(aedit=AEDiTMethod, co2=CO2Method)
    return registry


def make_method(cfg: RunConfig, engine: ShardedModel) -> Method:
    registry = method_registry()
    if cfg.method not in registry:
        raise NotImplementedError(f"method {cfg.method!r} is not implemented yet (available: {', '.join(registry)})")
    return registry[cfg.method](cfg, engine)
