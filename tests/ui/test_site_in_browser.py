"""The static site of the executed course (`make site`, edit_course/tools/site.py) in chromium, from the file system
and with no network: the index lists the notebooks, a page's plotly figures are drawn by the plotly.js beside it
(interactive: plotly's mode bar is there) and readable (readability.py's geometry checks), a widget's note stands in
its place (a run's progress bar is drawn as it ended), the navigation leads from the index to a page, to the next
one and back. Screenshots of each state go to the test's tmp_path (listed in its output).

`EDIT_LAB_SITE=site pytest tests/ui/test_site_in_browser.py` checks a site built already (`make site`) the same way,
every page of it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from edit_course.tools import site
from tests.course.helpers import executed_site_notebooks

from .browser import VIEWPORT
from .checks import figure_state
from .readability import figure_problems, settle

pytestmark = [pytest.mark.ui, pytest.mark.timeout(300)]

NARROW = {"width": 420, "height": 900}  # a phone's window


def open_page(browser, url: str, requests: list[str], errors: list[str]):
    """A new tab at `url` that records every request leaving the file system and every script error."""
    page = browser.new_page()
    local = ("file:", "data:", "blob:", "about:")
    page.on("request", lambda r: None if r.url.startswith(local) else requests.append(r.url))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url)
    page.wait_for_load_state("load")
    return page


def check_notebook_page(page, name: str, shots: Path) -> int:
    """Every figure of the page drawn, interactive and readable; a screenshot of the page and of each figure.
    Returns how many figures there are."""
    figures = page.locator(".site-figure")
    n = figures.count()
    if n:
        page.wait_for_function("() => Array.from(document.querySelectorAll('.site-figure'))"
                               ".every((d) => d.querySelector('.main-svg'))", timeout=60_000)
        settle(page)
    for i in range(n):
        state = figure_state(figures.nth(i))
        assert state["svg"] >= 1 and state["traces"] >= 1, f"{name}: figure {i} is not drawn: {state}"
        assert figures.nth(i).locator(".modebar-container").count() == 1, f"{name}: figure {i} has no mode bar"
        if i < 12:
            figures.nth(i).screenshot(path=str(shots / f"{name}-figure-{i}.png"))
    problems = figure_problems(page, name, page.locator("main"))
    assert not problems, f"{name} is not readable:\n" + "\n".join(problems)
    page.screenshot(path=str(shots / f"{name}.png"), full_page=n <= 3)
    # nothing sticks out sideways, in a wide window or a phone's: the page scrolls only down (a wide code cell, table
    # or figure scrolls sideways in its own box)
    for width in (VIEWPORT["width"], NARROW["width"]):
        page.set_viewport_size({**VIEWPORT, "width": width})
        settle(page)
        sizes = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
        assert sizes[0] <= sizes[1], f"{name} scrolls sideways in a window {width} px wide: {sizes}"
    page.screenshot(path=str(shots / f"{name}-narrow.png"))
    page.set_viewport_size(VIEWPORT)
    return n


def test_the_site_reads_in_chromium_with_no_network(browser, tmp_path):
    executed = executed_site_notebooks(tmp_path / "executed")
    out = tmp_path / "site"
    site.build(executed, out)
    shots = tmp_path / "shots"
    shots.mkdir()
    requests: list[str] = []
    errors: list[str] = []
    page = open_page(browser, (out / "index.html").as_uri(), requests, errors)
    try:
        rows = page.locator("table tbody tr")
        assert rows.count() == 2 and "The first lesson" in rows.nth(0).inner_text()
        assert "running Python kernel" in page.locator(".site-note").inner_text()
        page.screenshot(path=str(shots / "index.png"), full_page=True)

        page.locator("a[href='00_first.html']").click()
        page.wait_for_url(re.compile(r"00_first\.html$"))
        assert check_notebook_page(page, "00_first", shots) == 1
        assert page.locator(".site-figure .gtitle").text_content() == "a bar"
        assert "./runs/edit-1" in page.locator("main").inner_text()

        page.locator("nav.site-nav").first.locator("a[rel='next']").click()
        page.wait_for_url(re.compile(r"01_second\.html$"))
        note = page.locator(".site-widget-note")
        assert note.count() == 1 and note.is_visible() and "live notebook" in note.inner_text()
        progress = page.locator(".site-progress")  # a run's progress bar, drawn as it ended
        assert progress.locator("progress").count() == 1 and "20/20" in progress.inner_text()
        page.screenshot(path=str(shots / "01_second.png"), full_page=True)
        page.locator("nav.site-nav").last.locator("a[rel='index']").click()
        page.wait_for_url(re.compile(r"index\.html$"))
    finally:
        page.close()
        print(f"screenshots: {sorted(str(p) for p in shots.iterdir())}")
    assert not requests, f"the site asked the network for {requests}"
    assert not errors, f"script errors: {errors}"


@pytest.mark.skipif(not os.environ.get("EDIT_LAB_SITE"), reason="EDIT_LAB_SITE names no built site to check")
def test_a_built_site_reads_in_chromium(browser, tmp_path):
    out = Path(os.environ["EDIT_LAB_SITE"]).resolve()
    shots = tmp_path / "shots"
    shots.mkdir()
    requests: list[str] = []
    errors: list[str] = []
    page = open_page(browser, (out / "index.html").as_uri(), requests, errors)
    try:
        listed = page.locator("td.site-title a").evaluate_all("(links) => links.map((a) => a.getAttribute('href'))")
        assert listed == sorted(p.name for p in out.glob("[0-9][0-9]_*.html")), listed
        page.screenshot(path=str(shots / "index.png"), full_page=True)
        for href in listed:
            page.goto((out / href).as_uri())
            n = check_notebook_page(page, href.removesuffix(".html"), shots)
            print(f"{href}: {n} figures, {page.locator('.site-widget-note').count()} widget notes")
    finally:
        page.close()
        print(f"screenshots: {sorted(str(p) for p in shots.iterdir())}")
    assert not requests, f"the site asked the network for {requests}"
    assert not errors, f"script errors: {errors}"
