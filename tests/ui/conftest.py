"""Fixtures of the browser tests: one JupyterLab server, one headless chromium and one JupyterLab tab for the session
(each pytest-xdist worker has its own).

The whole folder skips (with the reason) when no system chromium is installed; `.ci/run` installs
Debian's. Everything started here is stopped in fixture finalizers, so also when a check fails,
and the finalizers then assert that nothing this suite started is still running.
"""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import psutil
import pytest

from edit_course.tools.notebooks import NOTEBOOKS, parameterize, test_parameters

from .browser import VIEWPORT, find_chromium, launch_context
from .lab_server import LabServer
from .notebook_page import NotebookPage, lab_is_loaded
from .readability import set_view


@pytest.fixture(scope="session")
def chromium_executable() -> str:
    path = find_chromium()
    if path is None:
        pytest.skip("no system chromium (/usr/bin/chromium or `chromium` on PATH); `.ci/run` installs "
                    "Debian's, or `apt-get install chromium`")
    return path


def _children() -> set[tuple[int, float]]:
    out = set()
    for p in psutil.Process().children(recursive=True):
        try:
            out.add((p.pid, p.create_time()))
        except psutil.NoSuchProcess:
            pass
    return out


def _alive(procs: set[tuple[int, float]]) -> list[str]:
    left = []
    for pid, created in procs:
        try:
            p = psutil.Process(pid)
            if p.create_time() == created and p.status() != psutil.STATUS_ZOMBIE:
                left.append(f"pid {pid}: {' '.join(p.cmdline())[:160]}")
        except psutil.NoSuchProcess:
            pass
    return left


@pytest.fixture(scope="session")
def lab_root(tmp_path_factory) -> Path:
    """A scratch copy of notebooks/, each course notebook with papermill's cell of its small test parameters."""
    root = tmp_path_factory.mktemp("lab") / "notebooks"
    shutil.copytree(NOTEBOOKS, root, ignore=shutil.ignore_patterns(".ipynb_checkpoints", "runs", "__pycache__"))
    for nb in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        parameterize(nb, root, test_parameters(nb))
    return root


@pytest.fixture(scope="session")
def lab_server(lab_root, chromium_executable):
    """JupyterLab on a free localhost port with a token, serving the scratch copy; stopped for sure."""
    server = LabServer(lab_root, lab_root.parent)
    try:
        server.start()
    except RuntimeError as e:
        pytest.fail(f"JupyterLab did not start: {e}")
    try:
        yield server
    finally:
        left = server.stop()
        assert not left, f"processes started by the JupyterLab server are still running: {left}"


@pytest.fixture(scope="session")
def browser(chromium_executable, tmp_path_factory):
    """A headless chromium with a fresh profile; closed (with its driver) at the end of the session."""
    from playwright.sync_api import sync_playwright

    before = _children()
    pw = sync_playwright().start()
    started = _children() - before
    context = None
    try:
        context = launch_context(pw, chromium_executable, tmp_path_factory.mktemp("chromium-profile"))
        started = _children() - before
        yield context
    finally:
        try:
            if context is not None:
                context.close()
        finally:
            pw.stop()
        deadline = time.monotonic() + 10
        while _alive(started) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = _alive(started)
        assert not left, f"browser processes still running after closing: {left}"


class LabTab:
    """The browser tab in which the tests open the notebooks of `lab_server`, one after the other, so that
    JupyterLab starts once per session, not once per notebook (NotebookPage says why). `take()` gives it as a
    fresh tab has it: the window at `VIEWPORT`, the file browser open; a tab left with a dialog open, or whose
    JupyterLab is gone, is closed and the next test gets a new one."""

    def __init__(self, context) -> None:
        self.context, self.page = context, None

    def take(self):
        if self.page is not None and (self.page.is_closed() or self.page.locator(".jp-Dialog").count() > 0):
            self.close()
        if self.page is None:
            self.page = self.context.new_page()
        elif lab_is_loaded(self.page):
            set_view(self.page, VIEWPORT, True)
        return self.page

    def close(self) -> None:
        if self.page is not None and not self.page.is_closed():
            self.page.close()
        self.page = None


@pytest.fixture(scope="session")
def lab_tab(browser):
    tab = LabTab(browser)
    yield tab
    tab.close()


@pytest.fixture
def open_notebook(browser, lab_server, lab_tab, tmp_path):
    """`open_notebook("00_welcome.ipynb")`: a NotebookPage whose screenshots go to this test's tmp_path.

    Its panel is closed and its kernel shut down after the test, also when it fails. A test that makes requests
    fail (`block`) gets a tab of its own, closed after it.
    """
    pages: list[NotebookPage] = []

    def _open(name: str, prefix: str | None = None, block: str | re.Pattern | None = None) -> NotebookPage:
        tab = lab_tab.take() if block is None and not any(p.shared for p in pages) else None
        page = NotebookPage(browser, lab_server, name, tmp_path, prefix or name.split("_")[0], tab=tab)
        pages.append(page)
        if block is not None:  # a test that proves the checks fail: make these requests fail
            page.page.route(block, lambda route: route.abort())
        page.open()
        return page

    yield _open
    for page in pages:
        page.close()
    print(f"screenshots: {sorted(str(p) for page in pages for p in page.shots)}")
