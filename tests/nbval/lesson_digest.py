"""What nbval compares of a figure or a table: what the lesson computed, never a library's serialization.

plotly's JSON of a figure (key order, defaults such as `'type': 'scatter'`, typed arrays as base64) and
pandas' HTML of a table change with the library's version, not with the lesson: a fresh install with plotly
7.1 failed a reference made with an older plotly on every figure cell. So the kernels that run the references
(`make nbval-refs` and the nbval test) start with this file as an IPython startup script
(`kernel_env`): every plotly figure is shown as a plain-text digest of what it says (its title, axis
titles, annotations, and per trace its type, name, number of points and rounded values), and a DataFrame as
its plain text only. The lessons and the student's kernels are untouched: this is the test kernel's display.

The file is self-contained (it runs as a startup script, where the repository is not importable) and
importable (tests/unit/test_lesson_digest.py checks the digest on hand-built figures).
"""

from __future__ import annotations

import base64
import os
import shutil
from pathlib import Path
from typing import Any

#: Significant digits a value keeps in the digest: a moved number shows, float noise of the last bits does not.
DIGITS = 4
#: Values printed per array; past that, the array is summarised by its length, min, max and sum.
SHOWN = 12
_ARRAYS = ("x", "y", "z", "base", "values", "labels", "text", "r", "theta", "open", "close", "high", "low")


def _decode(value: Any) -> list | Any:
    """A plotly array as a list: a numpy array, a tuple, or plotly's typed-array JSON (`{dtype, bdata}`)."""
    if isinstance(value, dict) and "bdata" in value:
        import numpy as np

        arr = np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.dtype(value["dtype"]))
        return arr.reshape(value["shape"]).tolist() if "shape" in value else arr.tolist()
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, tuple):
        return list(value)
    return value


def _number(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, (int, float)):
        return f"{v:.{DIGITS}g}"
    return repr(str(v))


def _flat(values: list) -> list:
    out = []
    for v in values:
        out.extend(_flat(v) if isinstance(v, list) else [v])
    return out


def array_digest(values: Any) -> str:
    """`n=3 [1, 2, 3]`, or for a long array `n=100 min 0 max 99 sum 4950 first [...]`."""
    values = _decode(values)
    if not isinstance(values, list):
        return _number(values)
    flat = _flat(values)
    head = f"n={len(flat)}"
    if len(flat) <= SHOWN:
        return f"{head} [{', '.join(_number(v) for v in flat)}]"
    nums = [v for v in flat if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v]
    if len(nums) == len(flat):
        return (f"{head} min {_number(min(nums))} max {_number(max(nums))} sum {_number(sum(nums))} "
                f"first [{', '.join(_number(v) for v in flat[:3])}]")
    return f"{head} distinct {len(set(map(str, flat)))} first [{', '.join(_number(v) for v in flat[:3])}]"


def _text(obj: Any) -> str | None:
    """A title or axis title: plotly accepts a string or {'text': ...}."""
    if isinstance(obj, dict):
        obj = obj.get("text")
    return str(obj) if obj not in (None, "") else None


def figure_digest(fig: Any) -> str:
    """What a figure says, as plain text: a digest of its dict (`fig.to_dict()` or a renderer's `fig_dict`)."""
    fig = fig.to_dict() if hasattr(fig, "to_dict") else fig
    layout = fig.get("layout", {}) or {}
    lines = [f"figure: {_text(layout.get('title')) or '(no title)'}"]
    for key in sorted(k for k in layout if k.startswith(("xaxis", "yaxis"))):
        title = _text((layout[key] or {}).get("title"))
        if title:
            lines.append(f"  {key}: {title}")
    for ann in layout.get("annotations", []) or []:
        if ann.get("text"):
            lines.append(f"  annotation: {ann['text']}")
    for i, trace in enumerate(fig.get("data", []) or []):
        kind = trace.get("type", "scatter")
        lines.append(f"  trace {i}: {kind} {trace.get('name')!r}")
        for key in _ARRAYS:
            if trace.get(key) is not None:
                lines.append(f"    {key}: {array_digest(trace[key])}")
    return "\n".join(lines)


def install() -> None:
    """Show every plotly figure as its digest, and every DataFrame as plain text (the test kernel only)."""
    import plotly.io as pio
    from plotly.io._base_renderers import MimetypeRenderer

    class DigestRenderer(MimetypeRenderer):
        def to_mimebundle(self, fig_dict: dict) -> dict:
            return {"text/plain": figure_digest(fig_dict)}

    pio.renderers["lesson_digest"] = DigestRenderer()
    pio.renderers.default = "lesson_digest"
    try:
        import pandas as pd

        pd.set_option("display.notebook_repr_html", False)
    except ImportError:
        pass
    honour_semicolons()


def honour_semicolons() -> None:
    """A cell ending in `;` shows no result, in this kernel as in the student's.

    IPython reads the `;` from the history of inputs, and nbval runs its cells without storing them there, so
    under nbval `score();` showed its result, which the reference (run by papermill) does not hold. The test
    kernel reads the `;` from the cell being run instead."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None:
        return
    running = {"cell": None}
    shell.events.register("pre_run_cell", lambda info: running.__setitem__("cell", info.raw_cell))
    hook = shell.displayhook
    history_quiet = hook.quiet

    def quiet() -> bool:
        cell = running["cell"]
        return hook.semicolon_at_end_of_expression(cell) if cell is not None else history_quiet()

    hook.quiet = quiet


def kernel_env(scratch: Path) -> dict[str, str]:
    """The environment for a kernel that runs a reference: an IPython folder in `scratch` whose startup runs
    this file. Kernels started by papermill and nbval inherit their parent's environment."""
    ipython = Path(scratch) / "ipython"
    startup = ipython / "profile_default" / "startup"
    startup.mkdir(parents=True, exist_ok=True)
    module = shutil.copy(__file__, ipython / "lesson_digest.py")
    # loaded as a module of its own, so that nothing of it lands in the lesson's namespace
    (startup / "00-lesson-digest.py").write_text(
        "import importlib.util as _u\n"
        f"_s = _u.spec_from_file_location('lesson_digest', {str(module)!r})\n"
        "_m = _u.module_from_spec(_s); _s.loader.exec_module(_m); _m.install()\n"
        "del _u, _s, _m\n")
    return dict(os.environ, IPYTHONDIR=str(ipython))
