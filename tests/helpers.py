"""Shared test helpers."""

from __future__ import annotations

from edit_lab import RunConfig


def small(**kw) -> RunConfig:
    """A small, fast configuration: the nano model, short sequences, no progress bar."""
    base = dict(model="nano", seq_len=32, batch_size=4, steps=8, eval_every=0, eval_batches=2, progress=False,
                warmup_steps=2, sync_interval=3, timeout_s=60)
    base.update(kw)
    return RunConfig(**base)


def solution_function(notebook: str, name: str, folder, **namespace):
    """The function `name` that solutions/ answers for the notebook numbered `notebook` ("06"), defined from a
    file in `folder` so that `inspect.getsource` finds it, as in a kernel (a rule ships its source)."""
    from edit_course.tools import solutions as sol
    from edit_course.tools.notebooks import notebooks

    nb = next(p for p in notebooks() if p.name.startswith(notebook))
    answer = next(a for a in sol.load(nb).answers if a.assigns == name)
    path = folder / "answer.py"
    path.write_text(answer.source)
    ns: dict = dict(namespace)
    exec(compile(answer.source, str(path), "exec"), ns)  # noqa: S102 - the repository's own answer
    return ns[name]
