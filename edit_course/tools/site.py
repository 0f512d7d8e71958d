"""`make site`: the executed course as a static web site, for whoever wants to read it without installing anything.

A student before class, a reviewer, a reader on a phone: none of them should need Python, the lock or a kernel
to read the lessons with their real outputs. So this writes, from notebooks executed at their defaults (the
runner of `make notebooks`, `edit_course.tools.run_notebooks`, or a folder of them given with `--executed`):

    site/index.html          every notebook: its number, title and learning goal (its first markdown cell)
    site/NN_name.html        one page per notebook, by nbconvert's HTML exporter (its JupyterLab template, from
                             the lock): the code and its outputs, with index / previous / next links
    site/docs/*.html         the pages of docs/ the lessons link to (the method page, the glossary, ...)
    site/plotly.min.js       plotly.js, from the plotly package: the figures stay interactive (zoom, hover)
    site/site.css            the site's own few rules (and .nojekyll: GitHub Pages serves the files as they are)

The pages load nothing from the network (nbconvert's require.js, MathJax, mermaid and widget-manager scripts
are left out: no lesson needs them). A widget panel cannot run without a kernel: a short note stands in its
place (a run's progress bar is drawn as it ended, from the widget state the notebook saved). Every absolute
path of the building machine (the checkout, the executed folder, home, the temporary folder, the Python
installation) is scrubbed from the outputs. A link to a notebook or a docs page that is in the site points to
its page; a link to another file of the repository points to `--repo-url` when given
(e.g. https://github.com/OWNER/REPO/blob/main), else it becomes plain text.

    python -m edit_course.tools.site                           # execute every notebook at its defaults, then build
    python -m edit_course.tools.site 04 06                     # only these (file names containing 04 or 06)
    python -m edit_course.tools.site --executed runs/notebooks  # build from notebooks executed already
"""

from __future__ import annotations

import argparse
import copy
import html
import json
import os
import posixpath
import re
import shutil
import sys
import sysconfig
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edit_course.tools.notebooks import ROOT

PLOTLY_MIME = "application/vnd.plotly.v1+json"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
DOCS = ROOT / "docs"

WIDGET_NOTE = ('<div class="site-widget-note"><strong>Interactive panel.</strong> It runs Python in a live '
               'notebook, so this page cannot show it: open the notebook in JupyterLab (<code>make lab</code>) '
               'or on Binder to use it.</div>')

#: nbconvert's JupyterLab template, less everything it would fetch from the network, plus the site's navigation
#: and plotly.js (the figures' JSON sits in the page; `render_figures` draws them).
PAGE_TEMPLATE = """{%- extends 'index.html.j2' -%}
{%- block html_head_js -%}
<script src="{{ resources.site.prefix }}plotly.min.js"></script>
{%- endblock html_head_js -%}
{% block jupyter_widgets %}{% endblock jupyter_widgets %}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{%- block html_head_css -%}
<link rel="stylesheet" href="{{ resources.site.prefix }}site.css">
{%- endblock html_head_css -%}
{%- block body_header -%}
{{ super() }}
{{ resources.site.nav }}
{%- endblock body_header -%}
{% block body_footer %}
{{ resources.site.nav }}
</main>
<script>{{ resources.site.render_js }}</script>
</body>
{% endblock body_footer %}
"""

#: Draws every figure whose JSON the page carries, into the div before it.
RENDER_JS = """
document.querySelectorAll('script[type="application/vnd.plotly.v1+json"]').forEach(function (el) {
  var fig = JSON.parse(el.textContent), div = document.getElementById(el.dataset.target);
  var config = Object.assign({responsive: true, displaylogo: false}, fig.config || {});
  if (window.Plotly) { Plotly.newPlot(div, fig.data || [], fig.layout || {}, config); }
  else { div.textContent = 'plotly.min.js did not load: this figure cannot be drawn.'; }
});
"""

CSS = """
body { margin: 0; }
body.jp-Notebook > main { max-width: 1200px; margin: 0 auto; padding: 0 16px 24px; box-sizing: border-box; }
.site-nav { display: grid; grid-template-columns: 1fr auto 1fr; gap: 0.5em 1.5em; align-items: baseline;
  padding: 10px 16px; font: 14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; }
.site-nav a { color: #0b57d0; text-decoration: none; }
.site-nav a:hover { text-decoration: underline; }
.site-nav .site-next { text-align: right; }
main > .site-nav:first-child { border-bottom: 1px solid #ddd; margin-bottom: 12px; }
main > .site-nav:last-of-type { border-top: 1px solid #ddd; margin-top: 24px; }
.site-widget-note { border-left: 4px solid #e0a800; background: #fff8e1; padding: 8px 12px; margin: 4px 0;
  font-family: system-ui, -apple-system, "Segoe UI", sans-serif; font-size: 14px; }
.site-progress { display: flex; align-items: center; gap: 8px; font: 13px/1.4 monospace; white-space: pre; }
.site-progress progress { flex: 0 1 40%; min-width: 4em; }
.site-figure { width: 100%; min-width: 600px; }
/* nbconvert lays a cell's prompt and its code or output out as a table, which clips what is wider than a narrow
   window; as flex boxes, each code cell and output scrolls sideways on its own instead */
.jp-InputArea, .jp-OutputArea-child { display: flex; }
.jp-InputPrompt, .jp-OutputPrompt { flex: 0 0 auto; }
.jp-InputArea-editor, .jp-OutputArea-output { display: block; flex: 1 1 auto; min-width: 0; overflow-x: auto; }
@media only screen and (max-width: 760px) {  /* the prompt above its cell, as JupyterLab's own narrow layout */
  .jp-InputArea, .jp-OutputArea-child { flex-direction: column; }
  .jp-InputPrompt, .jp-OutputPrompt { text-align: left; }
}
.site-repo-path { font-style: italic; }
.site-page { max-width: 1100px; margin: 0 auto; padding: 0 16px 32px;
  font: 16px/1.55 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1f1f1f; }
.site-page h1 { font-size: 1.8em; margin: 0.6em 0 0.3em; }
.site-page table { border-collapse: collapse; margin: 1em 0; display: block; overflow-x: auto; }
.site-page th, .site-page td { border: 1px solid #ccc; padding: 6px 10px; vertical-align: top; text-align: left; }
.site-page th { background: #f3f3f3; }
.site-page code { background: #f3f3f3; padding: 0 3px; border-radius: 3px; font-size: 0.92em; }
.site-page pre { background: #f6f6f6; padding: 10px; overflow-x: auto; }
.site-page pre code { background: none; padding: 0; }
.site-page a { color: #0b57d0; }
.site-index td.site-num { font-weight: 600; white-space: nowrap; }
.site-index td.site-title { min-width: 12em; }
.site-note { background: #f1f6ff; border-left: 4px solid #0b57d0; padding: 8px 12px; }
a.anchor-link { display: none; }
"""


@dataclass
class Lesson:
    """One executed notebook of the site."""

    path: Path  # the executed notebook
    number: str  # "04"
    title: str  # the first heading, less its "04 · "
    goal_html: str  # the learning goal's paragraph, as HTML

    @property
    def page(self) -> str:
        return self.path.with_suffix(".html").name


# --- what comes from the notebooks ------------------------------------------------------------------------------

def first_markdown(nb: dict[str, Any]) -> str:
    return next(("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown"), "")


def title_and_goal(nb: dict[str, Any]) -> tuple[str, str]:
    """The notebook's title (its first heading, without the number) and its learning goal (markdown)."""
    text = first_markdown(nb)
    heading = next((line.lstrip("#").strip() for line in text.splitlines() if line.startswith("#")), "")
    title = re.sub(r"^\d+\s*[·.:-]\s*", "", heading)
    m = re.search(r"\*\*Learning goal[:.]?\*\*[:.]?\s*(.*?)(?:\n\s*\n|$)", text, re.S)
    if m:
        goal = m.group(1).strip()
    else:  # the first paragraph after the heading
        paragraphs = [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip() and not p.lstrip().startswith("#")]
        goal = paragraphs[0] if paragraphs else ""
    return title, goal


def markdown_html(text: str) -> str:
    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    return markdown2html_mistune(text)


def lessons(executed: Path) -> list[Lesson]:
    out = []
    for path in sorted(executed.glob("[0-9][0-9]_*.ipynb")):
        title, goal = title_and_goal(json.loads(path.read_text(encoding="utf-8")))
        goal_html = re.sub(r"^<p>|</p>\s*$", "", markdown_html(goal).strip())
        out.append(Lesson(path, path.name[:2], title, goal_html))
    return out


# --- the building machine's paths -------------------------------------------------------------------------------

# anything left that looks like a home or temporary folder, wherever the notebook ran
_STRAY = re.compile(r"(?<![\w.~\-/])(/(?:home|Users)/[^/\s\"'<>\\]+|/root(?![\w.-])|/(?:private/)?(?:tmp|var/folders)"
                    r"(?![\w.-])(?:/[^\s\"'<>\\]*)?)")


def machine_paths(*extra: Path) -> list[tuple[str, str]]:
    """(absolute path, what stands for it) for every folder of this machine a page could name, longest first."""
    pairs: dict[str, str] = {}
    for p in extra:
        for form in {str(p), str(Path(p).resolve())}:
            pairs[form] = "."
    for p in (ROOT, Path.cwd()):  # the checkout keeps the tail (…/edit_lab), wherever it lies, /tmp too
        for form in {str(p), str(p.resolve())}:
            if len(form) > 1:
                pairs.setdefault(form, "…")
    for p in (Path(sys.prefix), Path(sys.base_prefix), Path(sys.exec_prefix),
              Path(sysconfig.get_paths()["purelib"]), Path(tempfile.gettempdir()), Path.home()):
        for form in {str(p), str(p.resolve())}:
            if len(form) > 1 and not _STRAY.fullmatch(form):  # a temporary folder goes whole, with its tail
                pairs.setdefault(form, "…")
    return sorted(pairs.items(), key=lambda kv: -len(kv[0]))


def scrub(text: str, paths: list[tuple[str, str]]) -> str:
    """`text` with each of `paths` (a whole folder name: not `/rootfs` for `/root`) and any stray home or
    temporary folder replaced by what stands for it."""
    for path, token in paths:
        text = re.sub(rf"(?<![\w.-]){re.escape(path)}(?![\w.-])", lambda _m, t=token: t, text)
    return _STRAY.sub("…", text)


# --- one page ---------------------------------------------------------------------------------------------------

#: The widgets a progress bar is made of (tqdm's in a notebook: a label, the bar, the counts, in a box).
PROGRESS_PARTS = {"HBoxModel", "VBoxModel", "BoxModel", "HTMLModel", "LabelModel", "FloatProgressModel",
                  "IntProgressModel"}


def widget_html(model_id: str, state: dict[str, Any]) -> str:
    """What a page shows for a widget: a progress bar drawn as it ended (from the notebook's saved widget state);
    anything else (a panel of sliders and buttons) is the note, since it needs a kernel."""
    parts: list[str] = []

    def walk(mid: str) -> bool:
        model = state.get(mid.removeprefix("IPY_MODEL_"))
        if model is None or model.get("model_name") not in PROGRESS_PARTS:
            return False
        name, st = model["model_name"], model.get("state", {})
        if name.endswith("ProgressModel"):
            low, high = float(st.get("min", 0)), float(st.get("max", 100))
            parts.append(f'<progress max="{high - low:g}" value="{float(st.get("value", 0)) - low:g}"></progress>')
        elif name == "HTMLModel":
            parts.append(f"<span>{st.get('value', '')}</span>")
        elif name == "LabelModel":
            parts.append(f"<span>{html.escape(str(st.get('value', '')))}</span>")
        return all(walk(child) for child in st.get("children", []))

    if walk(model_id) and any(p.startswith("<progress") for p in parts):
        return f'<div class="site-progress">{"".join(parts)}</div>'
    return WIDGET_NOTE


def prepared(nb: dict[str, Any], paths: list[tuple[str, str]]) -> dict[str, Any]:
    """The notebook as the page shows it: figures as their JSON for plotly.js, a progress bar as it ended and a
    note for any other widget, no widget state, no papermill metadata, no path of this machine."""
    nb = copy.deepcopy(nb)
    saved = nb["metadata"].pop("widgets", None) or {}
    state = saved.get("application/vnd.jupyter.widget-state+json", {}).get("state", {})
    nb["metadata"].pop("papermill", None)
    for i, cell in enumerate(nb["cells"]):
        cell.get("metadata", {}).pop("papermill", None)
        for k, out in enumerate(cell.get("outputs", [])):
            data = out.get("data", {})
            if PLOTLY_MIME in data:
                fig = data[PLOTLY_MIME]
                fig_json = json.dumps(fig if isinstance(fig, dict) else json.loads(fig), ensure_ascii=False)
                target, fig_json = f"figure-{i}-{k}", fig_json.replace("</", "<\\/")
                out["data"] = {"text/html": (
                    f'<div class="site-figure" id="{target}"></div>\n<script type="{PLOTLY_MIME}" '
                    f'data-target="{target}">{fig_json}</script>')}
            elif WIDGET_MIME in data:
                out["data"] = {"text/html": widget_html(str(data[WIDGET_MIME].get("model_id", "")), state)}
            out.get("metadata", {}).pop(PLOTLY_MIME, None)
    return json.loads(scrub(json.dumps(nb, ensure_ascii=False), paths))


def github_slug(text: str, seen: dict[str, int]) -> str:
    """The id GitHub gives a heading (lower case, punctuation dropped, spaces to '-'), so that links written
    for GitHub (`glossary.md#symbols`) land on the same heading here."""
    slug = re.sub(r"[^\w\- ]", "", html.unescape(re.sub(r"<[^>]+>", "", text)).replace("¶", "").strip().lower())
    slug = slug.replace(" ", "-")
    n = seen.get(slug, 0)
    seen[slug] = n + 1
    return slug if n == 0 else f"{slug}-{n}"


def github_ids(page: str) -> str:
    """Give every heading GitHub's id (nbconvert's keep the case and the punctuation)."""
    seen: dict[str, int] = {}

    def one(m: re.Match) -> str:
        level, attrs, inner = m.group(1), m.group(2), m.group(3)
        slug = github_slug(inner, seen)
        attrs = re.sub(r'\s*id="[^"]*"', "", attrs)
        inner = re.sub(r'(<a class="anchor-link" href=")#[^"]*"', rf'\1#{slug}"', inner)
        return f'<h{level} id="{slug}"{attrs}>{inner}</h{level}>'

    return re.sub(r"<h([1-6])((?:\s[^>]*)?)>(.*?)</h\1>", one, page, flags=re.S)


@dataclass
class Links:
    """Where the repository's files are in the site (repo path -> site path), and where the rest lives."""

    pages: dict[str, str]
    repo_url: str | None = None

    def rewrite(self, page: str, source_dir: str, page_dir: str) -> str:
        """Every relative link of `page` (written for the file in repository folder `source_dir`) made right for
        the site page in site folder `page_dir`."""

        def one(m: re.Match) -> str:
            before, href, after, text = m.group(1) or "", html.unescape(m.group(2)), m.group(3), m.group(4)
            if re.match(r"^([a-z][a-z0-9+.-]*:|#|//)", href, re.I) or not href or "data-site" in before + after:
                return m.group(0)
            target, _, fragment = href.partition("#")
            repo_path = posixpath.normpath(posixpath.join(source_dir, target)) if target else None
            if repo_path is None:
                return m.group(0)
            if repo_path in self.pages:
                new = posixpath.relpath(self.pages[repo_path], page_dir or ".") + (f"#{fragment}" if fragment else "")
            elif self.repo_url and not repo_path.startswith(".."):
                new = f"{self.repo_url.rstrip('/')}/{repo_path}" + (f"#{fragment}" if fragment else "")
            else:
                return (f'<span class="site-repo-path" title="{html.escape(repo_path)} in the repository">'
                        f"{text}</span>")
            return f'<a{before}href="{html.escape(new)}"{after}>{text}</a>'

        return re.sub(r'<a(\s[^>]*?)?href="([^"]*)"([^>]*)>(.*?)</a>', one, page, flags=re.S)


def nav(prev: Lesson | None, nxt: Lesson | None, prefix: str = "") -> str:
    def link(lesson: Lesson | None, arrow_before: str, arrow_after: str, cls: str) -> str:
        if lesson is None:
            return f'<span class="{cls}"></span>'
        label = html.escape(f"{lesson.number} · {lesson.title}")
        return (f'<span class="{cls}"><a data-site href="{prefix}{lesson.page}" rel="{cls[5:]}">'
                f"{arrow_before}{label}{arrow_after}</a></span>")

    return (f'<nav class="site-nav">{link(prev, "← ", "", "site-prev")}'
            f'<span class="site-home"><a data-site href="{prefix}index.html" rel="index">Index of the course</a></span>'
            f'{link(nxt, "", " →", "site-next")}</nav>')


def notebook_page(lesson: Lesson, prev: Lesson | None, nxt: Lesson | None, paths: list[tuple[str, str]],
                  links: Links) -> str:
    import nbformat
    from jinja2 import DictLoader
    from nbconvert import HTMLExporter

    nb = prepared(nbformat.reads(lesson.path.read_text(encoding="utf-8"), as_version=4), paths)
    nb["metadata"]["title"] = f"{lesson.number} · {lesson.title}"
    exporter = HTMLExporter(template_name="lab", extra_loaders=[DictLoader({"site.html.j2": PAGE_TEMPLATE})],
                            template_file="site.html.j2")
    resources = {"site": {"prefix": "", "nav": nav(prev, nxt), "render_js": RENDER_JS}}
    body, _ = exporter.from_notebook_node(nbformat.from_dict(nb), resources=resources)
    return scrub(links.rewrite(github_ids(body), "notebooks", ""), paths)


# --- the index and the docs -------------------------------------------------------------------------------------

def plain_page(title: str, body: str, prefix: str = "") -> str:
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1.0">\n'
            f"<title>{html.escape(title)}</title>\n"
            f'<link rel="stylesheet" href="{prefix}site.css">\n</head>\n<body>\n{body}\n</body>\n</html>\n')


def index_page(course: list[Lesson], docs: list[str]) -> str:
    rows = "\n".join(
        f'<tr><td class="site-num">{c.number}</td><td class="site-title"><a href="{c.page}">{html.escape(c.title)}</a>'
        f"</td><td>{c.goal_html}</td></tr>" for c in course)
    label = {"README": "what each page covers"}
    doc_links = " · ".join(f'<a href="docs/{stem}.html">{html.escape(label.get(stem, stem))}</a>'
                           for stem in (Path(d).stem for d in docs))
    body = f"""<main class="site-page site-index">
<h1>edit_lab: the course, executed</h1>
<p>An interactive teaching lab for <strong>EDiT</strong> and <strong>A-EDiT</strong>, the Local-SGD training methods
of Cheng et al. (ICLR 2025): each page below is one notebook as it ran with its own default parameters, on CPUs,
with its code and its outputs. Read them in order.</p>
<p class="site-note">The plotly figures are interactive (hover, zoom, double-click to reset). The widget panels
(sliders and buttons that start new runs) need a running Python kernel: on these pages a short note stands in
their place (a run's progress bar is drawn as it ended). To use the panels, open the notebooks in JupyterLab
(<code>make lab</code> in a clone) or on Binder.</p>
<table>
<thead><tr><th>nb</th><th>notebook</th><th>learning goal</th></tr></thead>
<tbody>
{rows}
</tbody>
</table>
<p>Background pages the lessons link to: {doc_links}.</p>
</main>"""
    return plain_page("edit_lab: the course, executed", body)


def doc_page(path: Path, links: Links, paths: list[tuple[str, str]]) -> str:
    text = path.read_text(encoding="utf-8")
    heading = next((line.lstrip("#").strip() for line in text.splitlines() if line.startswith("# ")), path.stem)
    body = github_ids(markdown_html(text))
    body = links.rewrite(body, "docs", "docs")
    navbar = nav(None, None, prefix="../")
    return scrub(plain_page(heading, f'<main class="site-page">{navbar}\n{body}\n{navbar}</main>', prefix="../"),
                 paths)


# --- the site ---------------------------------------------------------------------------------------------------

def build(executed: Path, out: Path, repo_url: str | None = None) -> list[Path]:
    """Write the site of the notebooks executed in `executed` into `out` (emptied first); the pages written."""
    import plotly.offline

    course = lessons(executed)
    if not course:
        raise SystemExit(f"no executed notebook (NN_*.ipynb) in {executed}")
    docs = sorted(p.name for p in DOCS.glob("*.md")) if DOCS.is_dir() else []
    pages = {f"notebooks/{c.path.name}": c.page for c in course}
    pages.update({f"docs/{d}": f"docs/{Path(d).stem}.html" for d in docs})
    pages.update({"notebooks": "index.html", "docs": "docs/README.html" if "README.md" in docs else "index.html"})
    links = Links(pages, repo_url)
    paths = machine_paths(executed, out)

    if out.exists():
        shutil.rmtree(out)
    (out / "docs").mkdir(parents=True)
    (out / "plotly.min.js").write_text(plotly.offline.get_plotlyjs(), encoding="utf-8")
    (out / "site.css").write_text(CSS.lstrip(), encoding="utf-8")
    (out / ".nojekyll").touch()  # GitHub Pages serves the files as they are
    written = [out / "index.html"]
    written[0].write_text(index_page(course, docs), encoding="utf-8")
    for i, lesson in enumerate(course):
        prev = course[i - 1] if i > 0 else None
        nxt = course[i + 1] if i + 1 < len(course) else None
        written.append(out / lesson.page)
        written[-1].write_text(notebook_page(lesson, prev, nxt, paths, links), encoding="utf-8")
    for d in docs:
        written.append(out / "docs" / f"{Path(d).stem}.html")
        written[-1].write_text(doc_page(DOCS / d, links, paths), encoding="utf-8")
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help="only notebooks whose file name contains one of these (when executing)")
    ap.add_argument("--executed", help="a folder of notebooks executed already (NN_*.ipynb): build from them, "
                                       "run nothing")
    ap.add_argument("--build", default=str(ROOT / "build" / "site-notebooks"),
                    help="where the notebooks are executed when --executed is not given")
    ap.add_argument("--out", default=str(ROOT / "site"), help="the site's folder (emptied first)")
    ap.add_argument("--repo-url", default=os.environ.get("SITE_REPO_URL") or None,
                    help="where links to the repository's other files point, e.g. "
                         "https://github.com/OWNER/REPO/blob/main (default: $SITE_REPO_URL; none: plain text)")
    args = ap.parse_args(argv)
    rc = 0
    if args.executed:
        executed = Path(args.executed)
    else:
        from edit_course.tools import run_notebooks

        executed = Path(args.build)
        rc = run_notebooks.main([*args.names, "--out", str(executed)])
        if rc:
            print("some notebooks failed: their pages show the error", file=sys.stderr)
    written = build(executed, Path(args.out), args.repo_url)
    print(f"wrote {len(written)} pages into {args.out}; open {Path(args.out) / 'index.html'}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
