"""One notebook open in JupyterLab, driven the way a reader drives it, and checked the way a reader sees it.

Why two sources of truth: what the kernel *sent* is read from the notebook saved through the UI
(output types and mime types, exactly), and what the reader *sees* is read from the page (error
boxes, SVG drawn by plotly, widget views). A figure or widget that was sent but not drawn (missing
front-end extension, broken JS, model not found) shows up as a difference between the two.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PLOTLY_MIME = "application/vnd.plotly.v1+json"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
ERROR_TEXT = re.compile(r"Traceback \(most recent call last\)|^\s*\w*(Error|Exception)\b", re.M)

# Top-level outputs of a cell (not those nested inside an ipywidgets Output widget).
CELL_OUTPUTS = ":scope .jp-Cell-outputArea > .jp-OutputArea-child > .jp-OutputArea-output"

# Everything the page knows about each cell, in one round trip.
_CELLS_JS = """
(cells) => cells.map((cell) => {
  const outs = Array.from(cell.querySelectorAll(%r));
  const plotly = outs.filter((o) => o.classList.contains('jp-RenderedPlotly'));
  const widgets = outs.filter((o) => o.querySelector('.jupyter-widgets'));
  const visible = (e) => { const r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0; };
  const prompt = cell.querySelector('.jp-InputPrompt');
  return {
    kind: cell.classList.contains('jp-CodeCell') ? 'code' : 'other',
    prompt: prompt ? prompt.textContent.trim() : '',
    source: (cell.querySelector('.jp-InputArea-editor') || {textContent: ''}).textContent.slice(0, 120),
    stderr: Array.from(cell.querySelectorAll(
      '.jp-RenderedText[data-mime-type="application/vnd.jupyter.stderr"]')).map((e) => e.textContent),
    plotly_outputs: plotly.length,
    plotly_drawn: plotly.filter((o) => o.querySelector('.main-svg') && visible(o)).length,
    widget_outputs: widgets.length,
    // a widget closed by the kernel (e.g. a finished tqdm bar) leaves its output empty and hidden
    widgets_closed: outs.filter((o) => o.classList.contains('lm-mod-hidden') && o.childElementCount === 0).length,
    // a view whose JS failed (ipywidgets' error view), or a renderer stuck on its placeholder text
    widget_errors: Array.from(cell.querySelectorAll('.jupyter-widgets-error-widget'))
      .map((e) => 'a widget view failed: ' + e.textContent.trim().slice(0, 200))
      .concat(outs.map((o) => o.textContent.trim())
        .filter((t) => /^(Error displaying widget|Loading widget\\.\\.\\.)/.test(t)).map((t) => t.slice(0, 200))),
    widget_plots: widgets.reduce((n, o) => n + o.querySelectorAll('.js-plotly-plot').length, 0),
    widget_plots_drawn: widgets.reduce((n, o) => n + Array.from(o.querySelectorAll('.js-plotly-plot'))
      .filter((p) => p.querySelector('.main-svg')).length, 0),
  };
})
""" % CELL_OUTPUTS


@dataclass
class Problems:
    """What a check found wrong, as sentences a failing test can print."""
    items: list[str] = field(default_factory=list)

    def add(self, text: str) -> None:
        self.items.append(text)

    def __bool__(self) -> bool:
        return bool(self.items)

    def __str__(self) -> str:
        return "\n".join(f"- {t}" for t in self.items)


# Open a notebook, or close one (its tab disposed unsaved: the test saved what it reads), in a JupyterLab that is
# already loaded in the tab, through the app the server exposes (`--LabApp.expose_app_in_browser`).
_OPEN_JS = """
async (path) => { await window.jupyterapp.commands.execute('docmanager:open', {path, factory: 'Notebook'}); }
"""
_CLOSE_JS = """
(path) => { for (const w of Array.from(window.jupyterapp.shell.widgets('main'))) {
  if (w.context && w.context.path === path) { w.context.model.dirty = false; w.dispose(); } } }
"""


def lab_is_loaded(page: Any) -> bool:
    """Whether JupyterLab has started in `page` (a test server's app, exposed as `window.jupyterapp`)."""
    return page.evaluate("() => Boolean(window.jupyterapp && window.jupyterapp.shell)")


class NotebookPage:
    """`name` (a path under the server's root) open in a browser tab: a tab of its own, or `tab`, one that an
    earlier NotebookPage of the same server used and closed.

    Why share a tab: a fresh tab loads and starts JupyterLab again, about 8 s of chromium's CPU on 2 cores, for
    each of the dozen notebooks the browser tests open. In a shared tab the next notebook opens as a reader opens
    a second one (`docmanager:open`, what the file browser's double click runs), after the last one's panel was
    closed and its kernel shut down; the window's size and file browser are put back as a fresh tab has them
    (conftest.py)."""

    def __init__(self, context: Any, server: Any, name: str, artifacts: Path, prefix: str,
                 tab: Any = None) -> None:
        self.context, self.server, self.name = context, server, name
        self.artifacts, self.prefix = artifacts, prefix
        self.shared = tab is not None
        self.page = tab if tab is not None else context.new_page()
        self.console_errors: list[str] = []
        self._listeners = {
            "console": lambda m: self.console_errors.append(m.text[:300]) if m.type == "error" else None,
            "pageerror": lambda e: self.console_errors.append(f"page error: {str(e)[:300]}"),
        }
        for event, listener in self._listeners.items():
            self.page.on(event, listener)
        self.shots: list[Path] = []

    # ---------------------------------------------------------------- state
    def session(self) -> dict | None:
        for s in self.server.api("api/sessions"):
            if s.get("path") == self.name:
                return s
        return None

    def kernel_state(self) -> str:
        s = self.session()
        return s["kernel"]["execution_state"] if s else "no kernel"

    def cells(self) -> list[dict]:
        return self.page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell").evaluate_all(_CELLS_JS)

    def dialogs(self) -> list[str]:
        return [t.strip()[:300] for t in self.page.locator(".jp-Dialog").all_inner_texts()]

    def screenshot(self, label: str, locator: Any = None) -> Path:
        """Save what is on screen (or one element) as `<prefix>-<nn>-<label>.png` in the artifacts folder."""
        path = self.artifacts / f"{self.prefix}-{len(self.shots):02d}-{label}.png"
        try:
            if locator is not None:
                locator.scroll_into_view_if_needed(timeout=10_000)
                locator.screenshot(path=str(path), timeout=30_000)
            else:
                self.page.screenshot(path=str(path), timeout=30_000)
            self.shots.append(path)
        except Exception as e:  # noqa: BLE001 - a screenshot must never hide the real failure
            (path.with_suffix(".txt")).write_text(f"screenshot failed: {e}")
        return path

    # ---------------------------------------------------------------- actions
    def open(self, timeout_s: float = 180.0) -> None:
        """Load the notebook page and wait for all its cells and an idle kernel."""
        expected = len(json.loads((self.server.root_dir / self.name).read_text())["cells"])
        if self.shared and self.page.url.startswith(self.server.base_url) and lab_is_loaded(self.page):
            self.page.evaluate(_OPEN_JS, self.name)
        elif self.shared:
            self.page.goto(self.server.url(f"lab/tree/{self.name}"), timeout=timeout_s * 1000)
        else:  # a workspace of its own: in the shared tab's, JupyterLab would move this tab to a new one
            # (a navigation in the middle of the checks)
            workspace = f"{self.prefix}-{uuid.uuid4().hex[:8]}"
            self.page.goto(self.server.url(f"lab/workspaces/{workspace}/tree/{self.name}"), timeout=timeout_s * 1000)
        self.wait_for(lambda: len(self.cells()) == expected and self.kernel_state() == "idle", timeout_s,
                   f"{self.name}: {expected} cells on the page and an idle kernel")
        # alone, as a reader opening it has it: no notebook of an earlier test restored beside it, rendering and
        # running a kernel of its own (a fresh tab in the workspace earlier tabs saved reopened them all)
        panels = self.page.locator(".jp-NotebookPanel").count()
        assert panels == 1, f"{self.name}: {panels} notebooks are open in the tab, expected this one alone"

    def run_all(self, timeout_s: float) -> None:
        """Run → Run All Cells from the menu bar, then wait until every queued cell has finished."""
        self.page.get_by_role("menuitem", name="Run", exact=True).click()
        self.page.locator("#jp-mainmenu-run").get_by_role("menuitem", name="Run All Cells", exact=True).click()
        self.wait_for(lambda: any(c["prompt"] not in ("", "[ ]:") for c in self.cells() if c["kind"] == "code"),
                   60, "the first cell to be queued after Run All Cells")
        self.wait_idle(timeout_s, "Run All Cells")

    def wait_idle(self, timeout_s: float, what: str) -> None:
        """Wait until the kernel is idle and no cell is queued, for 2 s in a row (cells hand over via idle)."""
        calm_since: list[float] = []

        def calm() -> bool:
            state = self.kernel_state()
            if state in ("dead", "no kernel"):
                raise AssertionError(f"{self.name}: the kernel is {state} during {what}\n{self.server.log_tail()}")
            busy = state != "idle" or any("*" in c["prompt"] for c in self.cells())
            if busy:
                calm_since.clear()
                return False
            calm_since.append(time.monotonic())
            return calm_since[-1] - calm_since[0] >= 2.0

        self.wait_for(calm, timeout_s, f"{what} to finish (kernel idle, no cell queued)")

    def save(self, timeout_s: float = 60.0) -> dict:
        """Save through the UI (File → Save Notebook) and return the saved notebook as JSON."""
        path = self.server.root_dir / self.name
        before = path.stat().st_mtime_ns
        self.page.get_by_role("menuitem", name="File", exact=True).click()
        self.page.locator('#jp-mainmenu-file .lm-Menu-item[data-command="docmanager:save"]').click()
        self.wait_for(lambda: path.stat().st_mtime_ns != before, timeout_s, f"{self.name} to be saved")
        for _ in range(20):  # the file can be caught half-written
            try:
                return json.loads(path.read_text())
            except json.JSONDecodeError:
                time.sleep(0.25)
        return json.loads(path.read_text())

    def shutdown_kernel(self) -> None:
        s = self.session()
        if s is not None:
            try:
                self.server.api(f"api/sessions/{s['id']}", method="DELETE", timeout=30)
            except Exception:  # noqa: BLE001 - the server's own shutdown ends it anyway
                pass

    def close(self) -> None:
        """Shut the kernel down and close the tab; a shared tab stays open, without this notebook's panel."""
        try:
            if self.shared:
                self.page.evaluate(_CLOSE_JS, self.name)
            else:
                self.page.close()
        except Exception:  # noqa: BLE001 - the kernel must be shut down whatever the page did
            pass
        self.shutdown_kernel()
        for event, listener in self._listeners.items():
            try:
                self.page.remove_listener(event, listener)
            except Exception:  # noqa: BLE001
                pass

    # ---------------------------------------------------------------- checks
    def errors_shown(self) -> list[str]:
        """Tracebacks (or `SomethingError:` lines) shown in any cell's output."""
        out = []
        for i, c in enumerate(self.cells()):
            for text in c["stderr"]:
                if ERROR_TEXT.search(text):
                    out.append(f"cell {i} ({c['source'][:60]!r}): {text[-1500:]}")
        return out

    def check_rendered(self, saved: dict) -> Problems:
        """Every plotly figure the kernel sent is drawn as SVG, every widget view is there, no error shown."""
        problems = Problems()
        cells = self.cells()
        saved_cells = saved["cells"]
        if len(cells) != len(saved_cells):
            problems.add(f"the page shows {len(cells)} cells, the saved notebook has {len(saved_cells)}")
            return problems
        for i, (c, s) in enumerate(zip(cells, saved_cells)):
            where = f"cell {i} ({c['source'][:60]!r})"
            for o in s.get("outputs", []):
                if o.get("output_type") == "error":
                    problems.add(f"{where} raised {o.get('ename')}: {o.get('evalue')}")
            sent = [o.get("data", {}) for o in s.get("outputs", []) if o.get("output_type") in
                    ("display_data", "execute_result")]
            n_plotly = sum(1 for d in sent if PLOTLY_MIME in d and WIDGET_MIME not in d)
            n_widgets = sum(1 for d in sent if WIDGET_MIME in d)
            if c["plotly_drawn"] < n_plotly:
                problems.add(f"{where}: the kernel sent {n_plotly} plotly figure(s), the page draws "
                             f"{c['plotly_drawn']} as SVG ({c['plotly_outputs']} plotly output(s) on the page)")
            if c["widget_outputs"] + c["widgets_closed"] < n_widgets:
                problems.add(f"{where}: the kernel sent {n_widgets} widget view(s), the page shows "
                             f"{c['widget_outputs']} (and {c['widgets_closed']} closed by the kernel); "
                             "is the ipywidgets front end loaded?")
            if c["widget_plots_drawn"] < c["widget_plots"]:
                problems.add(f"{where}: {c['widget_plots'] - c['widget_plots_drawn']} of {c['widget_plots']} "
                             "FigureWidget(s) in the widgets have no SVG")
            for t in c["widget_errors"]:
                problems.add(f"{where}: widget error on the page: {t}")
        for e in self.errors_shown():
            problems.add(f"error output: {e}")
        if problems and self.console_errors:
            problems.add(f"(last browser console errors: {self.console_errors[-3:]})")
        return problems

    # ---------------------------------------------------------------- waiting
    def wait_for(self, ok: Callable[[], bool], timeout_s: float, what: str, poll_s: float = 0.5) -> None:
        """Poll `ok()` until true; on timeout, screenshot and fail with what the page showed."""
        deadline = time.monotonic() + timeout_s
        while True:
            if ok():
                return
            dialogs = self.dialogs()
            if dialogs:
                self.screenshot("dialog")
                raise AssertionError(f"{self.name}: a dialog is open while waiting for {what}: {dialogs}")
            if time.monotonic() > deadline:
                shot = self.screenshot("timeout")
                try:
                    prompts = [c["prompt"] for c in self.cells() if c["kind"] == "code"]
                    state = self.kernel_state()
                except Exception as e:  # noqa: BLE001
                    prompts, state = [], f"unknown ({e})"
                raise AssertionError(
                    f"{self.name}: timed out after {timeout_s:.0f} s waiting for {what}; kernel {state}; "
                    f"prompts {prompts}; errors shown {self.errors_shown()[:2]}; console errors "
                    f"{self.console_errors[-5:]}; screenshot {shot}")
            time.sleep(poll_s)
