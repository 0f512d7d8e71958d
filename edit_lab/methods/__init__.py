"""Training methods behind one interface (see `base.Method`), selected by `RunConfig.method`.

`registry.py` (beside config.py, torch-free) is the one list of method names, their order (the course's)
and their capabilities; the classes here are looked up by those names and take their capabilities from
it (`Method.has_penalty`, …). Read capabilities with `edit_lab.registry.capabilities(name)`: importing
this package loads torch.
"""

from __future__ import annotations

from ..config import RunConfig
from ..registry import METHODS as METHOD_NAMES
from ..sharding import ShardedModel
from .aedit import AEDiTMethod
from .base import Method
from .co2 import CO2Method
from .edit import EDiTMethod
from .local_sgd import DiLoCoMethod, PostLocalSGDMethod
from .streaming import StreamingDiLoCoMethod
from .sync import SyncMethod

_BY_NAME = {m.name: m for m in (SyncMethod, PostLocalSGDMethod, DiLoCoMethod, CO2Method, EDiTMethod, AEDiTMethod,
                                StreamingDiLoCoMethod)}
METHODS: dict[str, type[Method]] = {name: _BY_NAME[name] for name in METHOD_NAMES}  # a missing class: KeyError


def make_method(cfg: RunConfig, engine: ShardedModel) -> Method:
    return METHODS[cfg.method](cfg, engine)
