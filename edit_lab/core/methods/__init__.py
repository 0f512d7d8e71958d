"""Training methods behind one interface (see `base.Method`), selected by `RunConfig.method`.

`registry.py` (beside config.py, torch-free) is the one list of method names, their order (the course's)
and their capabilities; the classes here are looked up by those names and take their capabilities from
it (`Method.has_penalty`, …). Read capabilities with `edit_lab.registry.capabilities(name)`: importing
this package loads torch.
"""

from __future__ import annotations

from edit_lab.config import RunConfig
from edit_lab.core.methods.aedit import AEDiTMethod
from edit_lab.core.methods.backup import BackupMethod
from edit_lab.core.methods.base import Method
from edit_lab.core.methods.co2 import CO2Method
from edit_lab.core.methods.edit import EDiTMethod
from edit_lab.core.methods.local_sgd import DiLoCoMethod, PostLocalSGDMethod
from edit_lab.core.methods.streaming import StreamingDiLoCoMethod
from edit_lab.core.methods.sync import SyncMethod
from edit_lab.core.sharding import ShardedModel
from edit_lab.registry import METHODS as METHOD_NAMES

_BY_NAME = {m.name: m for m in (SyncMethod, BackupMethod, PostLocalSGDMethod, DiLoCoMethod, CO2Method, EDiTMethod, AEDiTMethod,
                                StreamingDiLoCoMethod)}
METHODS: dict[str, type[Method]] = {name: _BY_NAME[name] for name in METHOD_NAMES}  # a missing class: KeyError


def make_method(cfg: RunConfig, engine: ShardedModel) -> Method:
    return METHODS[cfg.method](cfg, engine)
