"""A lesson run anywhere, compared with its nbval reference: what `pytest --nbval-lax` compares, on a notebook
that has already run.

The browser tests run 03, 06, 07, 08 and 09 through JupyterLab, which saves their outputs; comparing those with
the references here checks the lesson's numbers without running it a second time under nbval (about a fifth of
`make test`'s CPU went to those second runs). The rule is nbval's, on the outputs of the cells tagged
`nbval-check-output`: each output as text (a stream's text, a result's `text/plain`), consecutive streams of
one name joined, every regex of sanitize.cfg applied to both sides. A plotly figure is compared as
`lesson_digest.figure_digest` of its JSON, which is what the reference's kernel showed instead of it, so a
figure's data and labels are checked and plotly's serialization is not.
"""

from __future__ import annotations

import configparser
import difflib
import json
import re
from pathlib import Path
from typing import Any

from tests.nbval.lesson_digest import figure_digest
from tests.nbval.refresh import CHECK_TAG, HERE, REFERENCES

PLOTLY = "application/vnd.plotly.v1+json"
SANITIZE = HERE / "sanitize.cfg"


def sanitizers(path: Path = SANITIZE) -> list[tuple[re.Pattern, str]]:
    """sanitize.cfg's (regex, replacement) pairs, in file order, as nbval reads them."""
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(path)
    return [(re.compile(cfg[s]["regex"]), cfg[s]["replace"]) for s in cfg.sections()]


def _text(value: Any) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


#: nbval's clean-up of a stream: a line overwritten after a carriage return (its backspace rule never runs: its
#: loop's condition is false from the start, in nbval 0.11).
_CARRIAGE_RETURN = re.compile(r"^.*\r(?=[^\n])", re.M)


def _stream(text: str) -> str:
    return _CARRIAGE_RETURN.sub("", text)


def output_texts(outputs: list[dict]) -> list[str]:
    """A cell's outputs as nbval compares them: every stream of one name joined at its first place (nbval's
    `coalesce_streams`), a result or display as its plotly digest or its `text/plain`, an error by its name
    and value."""
    texts: list[str] = []
    streams: dict[str, int] = {}
    for out in outputs:
        kind = out.get("output_type")
        if kind == "stream":
            name = out.get("name", "stdout")
            if name in streams:
                texts[streams[name]] += _text(out.get("text", ""))
            else:
                streams[name] = len(texts)
                texts.append(_text(out.get("text", "")))
        elif kind == "error":
            texts.append(f"error: {out.get('ename')}: {out.get('evalue')}")
        elif kind in ("execute_result", "display_data"):
            data = out.get("data", {})
            if PLOTLY in data:
                fig = data[PLOTLY]
                texts.append(figure_digest(json.loads(fig) if isinstance(fig, str) else fig))
            elif "text/plain" in data:
                texts.append(_text(data["text/plain"]))
    return [_stream(t) if i in streams.values() else t for i, t in enumerate(texts)]


def checked_cells(nb: dict) -> list[tuple[int, str, list[str]]]:
    """(position, source, output texts) of the code cells tagged CHECK_TAG, counted without papermill's cell."""
    code = [c for c in nb["cells"] if c["cell_type"] == "code"
            and "injected-parameters" not in c.get("metadata", {}).get("tags", [])]
    return [(i, _text(c["source"]), output_texts(c.get("outputs", []))) for i, c in enumerate(code)
            if CHECK_TAG in c.get("metadata", {}).get("tags", [])]


#: The references whose lesson runs with the browser's parameters (its small test parameters): a browser run of
#: it can stand for nbval's. 08's reference is made with the capstone's diagnoses filled in (refresh.parameters),
#: which a student's first run does not have, so nbval keeps running 08.
def same_run_as_the_browser(name: str) -> bool:
    return name in REFERENCES and not name.startswith("08")


def differences(ran: dict, name: str, reference_dir: Path = HERE) -> list[str]:
    """Where the outputs of the executed notebook `ran` differ from tests/nbval/<name>.ipynb's, each with a
    unified diff; [] when every checked cell says what the reference says."""
    ref = json.loads((reference_dir / f"{name}.ipynb").read_text())
    subs = sanitizers()

    def clean(s: str) -> str:
        for rx, rep in subs:
            s = rx.sub(rep, s)
        return s

    mine, theirs = checked_cells(ran), checked_cells(ref)
    if [(i, src) for i, src, _ in mine] != [(i, src) for i, src, _ in theirs]:
        return [f"{name}: the checked cells are not the reference's (run `make nbval-refs` after a deliberate change)"]
    problems = []
    for (i, src, got), (_, _, want) in zip(mine, theirs):
        got, want = [clean(t) for t in got], [clean(t) for t in want]
        if got != want:
            diff = "\n".join(difflib.unified_diff("\n".join(want).splitlines(), "\n".join(got).splitlines(),
                                                  "reference", "this run", lineterm="", n=1))
            first = src.strip().splitlines()[0] if src.strip() else ""
            problems.append(f"{name}, code cell {i} ({first[:60]}):\n{diff}")
    return problems
