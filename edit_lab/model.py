"""The old name of `edit_lab.core.model`, kept for notebook 03, whose nbval reference (tests/nbval/) pins its
`from edit_lab.model import ...` lines; switch it to `edit_lab.core.model` at its next refresh, then delete this
file. Nothing in the library or the course imports it (tests/unit/test_layers.py counts it as an entry point).
"""

from edit_lab.core.model import *  # noqa: F401,F403
