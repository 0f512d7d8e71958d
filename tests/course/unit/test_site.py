"""The static site of the executed course (`edit_course.tools.site`, `make site`), built from two tiny hand-made
executed notebooks: the index lists them, every link resolves, each page has its navigation, the figure's JSON is
in the page for plotly.js, a widget becomes a note, nothing is fetched from the network and no path of the
building machine is left."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from urllib.parse import unquote

import pytest

from edit_course.tools import site
from edit_course.tools.notebooks import ROOT

from tests.course.helpers import SITE_FIGURE as FIGURE
from tests.course.helpers import executed_site_notebooks as executed


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("site")
    folder = executed(tmp / "executed")
    out = tmp / "site"
    written = site.build(folder, out)
    assert {p.name for p in written} >= {"index.html", "00_first.html", "01_second.html", "glossary.html"}
    assert {p.name for p in out.iterdir()} >= {"plotly.min.js", "site.css", ".nojekyll", "docs"}
    return tmp, out


def pages(out: Path) -> dict[Path, str]:
    return {p: p.read_text(encoding="utf-8") for p in sorted(out.rglob("*.html"))}


def test_the_index_lists_every_notebook_with_its_title_and_goal(built):
    _, out = built
    index = (out / "index.html").read_text(encoding="utf-8")
    rows = re.findall(r"<tr><td class=\"site-num\">(\d+)</td><td class=\"site-title\"><a href=\"([^\"]+)\">(.*?)</a>"
                      r"</td><td>(.*?)</td></tr>", index, re.S)
    assert [(n, href, title) for n, href, title, _ in rows] == [
        ("00", "00_first.html", "The first lesson"), ("01", "01_second.html", "The second lesson")]
    assert rows[0][3] == "draw <em>one</em> bar chart." and rows[1][3] == "move a slider."
    assert "need a running Python kernel" in index  # says why the panels are not there


def test_every_link_resolves_and_each_page_has_its_navigation(built):
    _, out = built
    all_pages = pages(out)
    ids = {p: set(re.findall(r'\sid="([^"]+)"', text)) for p, text in all_pages.items()}
    for page, text in all_pages.items():
        for href in re.findall(r'(?:href|src)="([^"]+)"', text):
            href = html.unescape(href)
            if re.match(r"^[a-z]+:", href):
                assert href.startswith(("https://", "mailto:")), (page, href)
                continue
            target, _, fragment = href.partition("#")
            path = (page.parent / unquote(target)).resolve() if target else page
            assert path.is_file(), f"{page.name}: {href} leads nowhere"
            if fragment and path.suffix == ".html" and path.parent == out and path.name != "index.html":
                assert fragment in ids[path], f"{page.name}: no #{fragment} in {path.name}"

    def nav(name: str) -> list[tuple[str, str]]:
        return re.findall(r'<a data-site="" href="([^"]+)" rel="(\w+)"', all_pages[out / name])

    # at the top and at the bottom of each page
    assert nav("00_first.html") == [("index.html", "index"), ("01_second.html", "next")] * 2
    assert nav("01_second.html") == [("00_first.html", "prev"), ("index.html", "index")] * 2
    second = all_pages[out / "01_second.html"]
    assert 'href="00_first.html#a-section"' in second and 'href="docs/glossary.html"' in second
    # a lesson the site does not hold and a file of the repository: plain text, no dead link
    assert re.search(r'<span class="site-repo-path" title="notebooks/05_missing.ipynb[^"]*">a lesson not built</span>',
                     second)
    assert re.search(r'<span class="site-repo-path" title="edit_lab/config.py[^"]*">the config</span>', second)


def test_links_to_the_repository_go_to_its_address_when_given(built, tmp_path):
    tmp, _ = built
    site.build(tmp / "executed", tmp_path / "site", repo_url="https://example.org/lab/blob/main/")
    second = (tmp_path / "site" / "01_second.html").read_text(encoding="utf-8")
    assert '<a href="https://example.org/lab/blob/main/edit_lab/config.py">the config</a>' in second


def test_the_figure_is_in_the_page_for_plotly_js_and_a_panel_becomes_a_note(built):
    _, out = built
    first = (out / "00_first.html").read_text(encoding="utf-8")
    assert '<script src="plotly.min.js"></script>' in first and (out / "plotly.min.js").stat().st_size > 1_000_000
    blobs = re.findall(r'<script data-target="([^"]+)" type="application/vnd.plotly.v1\+json">(.*?)</script>', first,
                       re.S)
    assert len(blobs) == 1
    target, blob = blobs[0]
    assert f'<div class="site-figure" id="{target}"></div>' in first
    assert json.loads(blob) == FIGURE  # "</script>" in the data does not end the script early
    second = (out / "01_second.html").read_text(encoding="utf-8")
    assert second.count('class="site-widget-note"') == 1 and "Interactive panel" in second
    # the progress bar, as it ended
    assert ('<div class="site-progress"><span>edit 2×2: 100%</span><progress max="20" value="20"></progress>'
            "<span> 20/20 [00:03&lt;00:00, 5.1step/s]</span></div>") in second
    assert site.WIDGET_MIME not in second and "FloatSlider" not in second and "widget-state" not in second


def test_the_pages_load_nothing_from_the_network(built):
    _, out = built
    for page, text in pages(out).items():
        assert not re.findall(r'<script[^>]*\ssrc="(?:https?:)?//', text), page
        assert not re.findall(r'<link[^>]*\shref="(?:https?:)?//', text), page
        assert "require.min.js" not in text and "mathjax" not in text.lower(), page


def test_no_path_of_the_building_machine_is_left(built):
    tmp, out = built
    first = (out / "00_first.html").read_text(encoding="utf-8")
    assert "run in ./runs/edit-1" in first and "lab at …/edit_lab" in first and "scratch …" in first
    for page, text in pages(out).items():
        for path in (str(tmp), str(tmp.resolve()), str(ROOT), str(Path.home()) + "/", "/tmp/"):
            assert path not in text, f"{page.name} names {path}"
