"""Can a reader read it? Geometry checks of plotly figures and ipywidgets panels, measured in the browser.

Presence is not enough: a figure whose subplot titles are drawn over each other, or a slider whose
value is pushed out of view, is "drawn" and still useless. These checks measure what is on screen:

- every text a plotly figure draws (titles, axis titles, tick labels, legend entries, annotations)
  is measured as the rectangle it really covers on screen (its SVG box through its screen transform,
  so a tick label rotated by 30° is a rotated rectangle, not its much larger upright bounding box;
  a `<br>` title is one box per line). Two boxes of different texts that overlap by more than
  `TOL_PX` along every separating axis are reported, with both texts; so is a text that sticks out
  of its figure, a legend entry outside the legend's visible box (a scrolling legend), and a text
  over the legend box;
- a figure must fit horizontally in what its output area shows (no horizontal scrolling) and use
  most of the output area's width (`MIN_WIDTH_SHARE`);
- every slider's value (`.widget-readout`) must be inside the viewport and inside every box that
  clips it, once the notebook is scrolled (vertically only) to the slider; every dropdown shows a
  value; every control (slider, dropdown, checkbox, button) must be inside the visible width; and no
  label, readout, tab title or button text may be cut (`scrollWidth > clientWidth`: ellipsis);
- no annotation reads "new text", what plotly.js draws for an annotation given no text.

Hidden things (display none, visibility hidden, opacity 0, zero size) and empty texts are skipped;
a Tab's hidden pages are checked by clicking through the tabs (`check_page`).
"""

from __future__ import annotations

import time
from typing import Any

TOL_PX = 2.0           # overlaps (and overhangs) up to this many pixels are not reported
MIN_WIDTH_SHARE = 0.85  # a figure uses at least this share of its output area's width

# One JS function, evaluated on a plot element (`.js-plotly-plot`): the problems of that figure, as sentences.
FIGURE_JS = r"""
(plot, opts) => {
  const TOL = opts.tol, MIN_SHARE = opts.minShare;
  const problems = [];
  const shown = (el) => {
    for (let e = el; e && e.nodeType === 1; e = e.parentElement) {
      const cs = getComputedStyle(e);
      if (cs.display === 'none' || cs.visibility === 'hidden' || parseFloat(cs.opacity) === 0) return false;
    }
    return true;
  };
  // the 4 corners (client coordinates) of an SVG element's own box, through its screen transform
  const quad = (el) => {
    try {
      const b = el.getBBox(), m = el.getScreenCTM();
      if (b && m && (b.width > 0 || b.height > 0)) {
        return [[b.x, b.y], [b.x + b.width, b.y], [b.x + b.width, b.y + b.height], [b.x, b.y + b.height]]
          .map(([x, y]) => [m.a * x + m.c * y + m.e, m.b * x + m.d * y + m.f]);
      }
    } catch (e) { /* fall back to the upright box */ }
    const r = el.getBoundingClientRect();
    return [[r.left, r.top], [r.right, r.top], [r.right, r.bottom], [r.left, r.bottom]];
  };
  const rectQuad = (r) => [[r.left, r.top], [r.right, r.top], [r.right, r.bottom], [r.left, r.bottom]];
  const bounds = (q) => ({left: Math.min(...q.map((p) => p[0])), right: Math.max(...q.map((p) => p[0])),
                          top: Math.min(...q.map((p) => p[1])), bottom: Math.max(...q.map((p) => p[1]))});
  // how deep two convex quads overlap: the smallest overlap of their projections over the edge normals
  const depth = (p, q) => {
    let best = Infinity;
    for (const poly of [p, q]) {
      for (let i = 0; i < 4; i++) {
        const [x1, y1] = poly[i], [x2, y2] = poly[(i + 1) % 4];
        let nx = y1 - y2, ny = x2 - x1;
        const len = Math.hypot(nx, ny);
        if (len < 1e-6) continue;
        nx /= len; ny /= len;
        const pp = p.map(([x, y]) => x * nx + y * ny), qq = q.map(([x, y]) => x * nx + y * ny);
        const o = Math.min(Math.max(...pp), Math.max(...qq)) - Math.max(Math.min(...pp), Math.min(...qq));
        best = Math.min(best, o);
        if (best <= 0) return best;
      }
    }
    return best;
  };
  const ROLES = ['g-gtitle', 'gtitle', 'g-xtitle', 'g-ytitle', 'xtitle', 'ytitle', 'xtick', 'ytick', 'legendtitletext',
                 'legendtext', 'annotation', 'textpoint', 'cbtitle'];
  const role = (el) => {
    for (let e = el; e && e !== plot; e = e.parentElement) {
      const cl = e.classList ? Array.from(e.classList) : [];
      const hit = ROLES.find((r) => cl.includes(r));
      if (hit) return hit.replace(/^g-/, '');
      if (/^[xy]\d*title$/.test(cl[0] || '')) return cl[0];
      if (/^[xy]\d*tick$/.test(cl[0] || '')) return cl[0];
    }
    return 'text';
  };
  const title = (plot.querySelector('.g-gtitle text') || {textContent: ''}).textContent.trim();
  const svg = plot.querySelector('.main-svg');
  if (!svg || !shown(plot)) return {title, problems, skipped: true, texts: 0};
  const fig = svg.getBoundingClientRect();
  if (fig.width < 2 || fig.height < 2) return {title, problems, skipped: true, texts: 0};
  const name = (b) => `${JSON.stringify(b.text.slice(0, 70))} [${b.role}]`;

  // the figure against what its output area shows, horizontally
  let clip = {left: 0, right: window.innerWidth};
  for (let e = plot.parentElement; e && e !== document.body; e = e.parentElement) {
    const cs = getComputedStyle(e);
    if (cs.overflowX !== 'visible') {
      const r = e.getBoundingClientRect();
      clip = {left: Math.max(clip.left, r.left), right: Math.min(clip.right, r.right)};
    }
  }
  if (fig.left < clip.left - TOL || fig.right > clip.right + TOL) {
    const cut = Math.max(0, clip.left - fig.left) + Math.max(0, fig.right - clip.right);
    problems.push(`the figure (${Math.round(fig.width)} px wide) does not fit in the ` +
                  `${Math.round(clip.right - clip.left)} px its output area shows: ${Math.round(cut)} px are cut ` +
                  'off or need scrolling');
  }
  // the cell's output (the outermost: a panel's Output widget has its own inside; a cell's plotly output is the
  // plot itself), as wide as from its left edge to the right edge of its row
  let area = null;
  for (let e = plot; e; e = e.parentElement) if (e.classList && e.classList.contains('jp-OutputArea-output')) area = e;
  if (area && area.parentElement) {
    const avail = area.parentElement.getBoundingClientRect().right - area.getBoundingClientRect().left;
    if (fig.width < MIN_SHARE * avail) {
      problems.push(`the figure is ${Math.round(fig.width)} px wide in a ${Math.round(avail)} px output area ` +
                    `(under ${Math.round(100 * MIN_SHARE)}% of the notebook's width: a fixed or default width?)`);
    }
  }

  // every text, one box per line of text
  const boxes = [];
  let id = 0;
  for (const t of plot.querySelectorAll('.main-svg text')) {
    if (t.closest('.hoverlayer')) continue;
    const text = t.textContent.replace(/\s+/g, ' ').trim();
    if (!text || !shown(t)) continue;
    const r = t.getBoundingClientRect();
    if (r.width < 1 || r.height < 1) continue;
    const lines = Array.from(t.querySelectorAll('tspan.line')).filter((l) => l.textContent.trim());
    const owner = id++;
    const common = {owner, text, role: role(t), legend: !!t.closest('.legend')};
    if (lines.length > 1) {
      for (const l of lines) {
        const lb = l.getBoundingClientRect();
        if (lb.width >= 1 && lb.height >= 1) boxes.push({...common, text: l.textContent.trim(), q: quad(l)});
      }
    } else {
      boxes.push({...common, q: quad(t)});
    }
  }
  for (const b of boxes) {
    // plotly.js draws this for an annotation that was given no text (add_hline(annotation_text=None) in plotly 7)
    if (b.role === 'annotation' && b.text === 'new text') {
      problems.push(`${name(b)} is plotly's placeholder: an annotation was given no text`);
    }
    const r = bounds(b.q);
    const out = Math.max(fig.left - r.left, r.right - fig.right, fig.top - r.top, r.bottom - fig.bottom);
    if (out > TOL) problems.push(`${name(b)} is cut: it sticks out of the figure's box by ${Math.round(out)} px`);
  }
  // the legend's visible box: entries outside it are scrolled away; other texts must stay off it
  for (const lg of plot.querySelectorAll('.legend')) {
    const bg = lg.querySelector('rect.bg');
    if (!bg || !shown(lg)) continue;
    const lq = quad(bg), lr = bounds(lq);
    if (lr.right - lr.left < 2 || lr.bottom - lr.top < 2) continue;
    for (const b of boxes) {
      if (b.legend) {
        const r = bounds(b.q);
        const out = Math.max(lr.left - r.left, r.right - lr.right, lr.top - r.top, r.bottom - lr.bottom);
        if (out > TOL) {
          problems.push(`${name(b)} lies outside the legend's visible box (the legend scrolls or cuts it)`);
        }
      } else {
        const d = depth(b.q, lq);
        if (d > TOL) problems.push(`${name(b)} is drawn over the legend (by ${Math.round(d)} px)`);
      }
    }
  }
  for (let i = 0; i < boxes.length; i++) {
    for (let j = i + 1; j < boxes.length; j++) {
      const a = boxes[i], b = boxes[j];
      if (a.owner === b.owner) continue;
      const d = depth(a.q, b.q);
      if (d > TOL) problems.push(`${name(a)} overlaps ${name(b)} (by ${Math.round(d)} px)`);
    }
  }
  return {title, problems, skipped: false, texts: boxes.length,
          width: Math.round(fig.width), height: Math.round(fig.height)};
}
"""

# The controls of the page: every slider's value visible, every control inside the visible width, no text cut.
CONTROLS_JS = r"""
(root, opts) => {
  const TOL = opts.tol;
  const problems = [];
  const shown = (el) => {
    for (let e = el; e && e.nodeType === 1; e = e.parentElement) {
      const cs = getComputedStyle(e);
      if (cs.display === 'none' || cs.visibility === 'hidden' || parseFloat(cs.opacity) === 0) return false;
    }
    const r = el.getBoundingClientRect();
    return r.width > 0 || r.height > 0;
  };
  // what of `el` can be seen: the viewport cut by every ancestor that clips its overflow
  const visibleBox = (el) => {
    let box = {left: 0, top: 0, right: window.innerWidth, bottom: window.innerHeight};
    for (let e = el.parentElement; e && e !== document.body; e = e.parentElement) {
      const cs = getComputedStyle(e);
      const r = e.getBoundingClientRect();
      if (cs.overflowX !== 'visible') {
        box = {...box, left: Math.max(box.left, r.left), right: Math.min(box.right, r.right)};
      }
      if (cs.overflowY !== 'visible') {
        box = {...box, top: Math.max(box.top, r.top), bottom: Math.min(box.bottom, r.bottom)};
      }
    }
    return box;
  };
  // bring `el` to the middle of the notebook's scroller, vertically only (a horizontal scroll would hide the problem)
  const scrollTo = (el) => {
    for (let e = el.parentElement; e && e !== document.body; e = e.parentElement) {
      const cs = getComputedStyle(e);
      if (/(auto|scroll)/.test(cs.overflowY) && e.scrollHeight > e.clientHeight + 1) {
        const er = e.getBoundingClientRect(), r = el.getBoundingClientRect();
        e.scrollTop += (r.top + r.height / 2) - (er.top + er.height / 2);
      }
    }
  };
  const describe = (el) => {
    const w = el.closest('.widget-slider, .widget-inline-hbox, .widget-button, .widget-toggle-button, ' +
                         '.lm-TabBar-tab') || el;
    const label = w.querySelector ? (w.querySelector('.widget-label') || w) : w;
    const text = (label.textContent || '').replace(/\s+/g, ' ').trim().slice(0, 60);
    return JSON.stringify(text || el.className);
  };
  const cellOf = (el) => {
    const cell = el.closest('.jp-Cell');
    if (!cell) return '';
    const cells = Array.from(document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell'));
    return `cell ${cells.indexOf(cell)}: `;
  };
  let sliders = 0, controls = 0;
  for (const ro of root.querySelectorAll('.widget-readout')) {
    if (!shown(ro)) continue;
    sliders++;
    scrollTo(ro);
    const r = ro.getBoundingClientRect(), v = visibleBox(ro);
    const text = ro.textContent.trim();
    const out = Math.max(v.left - r.left, r.right - v.right, v.top - r.top, r.bottom - v.bottom);
    if (!text) problems.push(`${cellOf(ro)}the slider ${describe(ro)} shows no value`);
    else if (out > TOL || r.width < 4) {
      problems.push(`${cellOf(ro)}the value ${JSON.stringify(text)} of the slider ${describe(ro)} is out of view ` +
                    `(${Math.round(out)} px outside what the page shows, ` +
                    `at x ${Math.round(r.left)}–${Math.round(r.right)})`);
    }
  }
  const CONTROL = '.widget-slider, .widget-dropdown, .widget-checkbox, .widget-button, .widget-toggle-buttons, ' +
                  '.widget-select-multiple, .widget-progress, .widget-text';
  for (const c of root.querySelectorAll(CONTROL)) {
    if (!shown(c)) continue;
    controls++;
    const r = c.getBoundingClientRect(), v = visibleBox(c);
    const out = Math.max(v.left - r.left, r.right - v.right);
    if (out > TOL) {
      problems.push(`${cellOf(c)}the control ${describe(c)} is ${Math.round(out)} px out of view horizontally`);
    }
  }
  // a dropdown that shows nothing (e.g. an option whose value is None: ipywidgets then selects no option)
  for (const sel of root.querySelectorAll('.widget-dropdown select')) {
    if (!shown(sel)) continue;
    if (sel.selectedIndex < 0 || !(sel.options[sel.selectedIndex] || {text: ''}).text.trim()) {
      problems.push(`${cellOf(sel)}the dropdown ${describe(sel)} shows no value`);
    }
  }
  const CUT = '.widget-label, .widget-readout, .widget-button, .widget-toggle-button, .lm-TabBar-tabLabel, ' +
              '.widget-label-basic, .widget-checkbox label';
  for (const t of root.querySelectorAll(CUT)) {
    if (!shown(t) || !t.closest('.jupyter-widgets')) continue;
    if (!t.textContent.trim()) continue;
    if (t.scrollWidth > t.clientWidth + 1 && getComputedStyle(t).overflowX !== 'visible') {
      problems.push(`${cellOf(t)}the text ${JSON.stringify(t.textContent.trim().slice(0, 60))} is cut ` +
                    `(${t.scrollWidth} px of text in a ${t.clientWidth} px box)`);
    }
  }
  return {problems, sliders, controls};
}
"""

PLOTS = ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell .js-plotly-plot"
WIDGET_TABS = ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell .jupyter-widgets.widget-tab > .lm-TabBar"

VIEWPORTS = {
    # the narrowest the course expects: a laptop with JupyterLab's file browser open
    "1280x800+files": ({"width": 1280, "height": 800}, True),
    "1920x1080": ({"width": 1920, "height": 1080}, False),
}


#: How long the figures' sizes must stay the same before a check reads them. Plotly relayouts once per
#: resize, in one pass; half a second without a change is well past it, even on a busy 2-core machine.
SETTLED_S = 0.5


def settle(page: Any, timeout_s: float = 10.0) -> None:
    """Wait until the figures stop changing size (plotly relayouts after a resize, asynchronously)."""
    sizes_js = "() => Array.from(document.querySelectorAll(%r)).map((p) => { const s = p.querySelector('.main-svg'); " \
               "return s ? [s.getBoundingClientRect().width, s.getBoundingClientRect().height, " \
               "p.querySelectorAll('text').length] : [0, 0, 0]; })" % PLOTS
    deadline = time.monotonic() + timeout_s
    last, same_since = None, time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.1)
        now = page.evaluate(sizes_js)
        if now != last:
            last, same_since = now, time.monotonic()
        elif time.monotonic() - same_since >= SETTLED_S:
            return


# Scroll the notebook (vertically only) so that an element's top is at the top of what the notebook shows.
_SCROLL_TOP_JS = """
(el) => {
  for (let e = el.parentElement; e && e !== document.body; e = e.parentElement) {
    const cs = getComputedStyle(e);
    if (/(auto|scroll)/.test(cs.overflowY) && e.scrollHeight > e.clientHeight + 1) {
      e.scrollTop += el.getBoundingClientRect().top - e.getBoundingClientRect().top - 8;
    }
  }
}
"""


def view_shot(nb: Any, label: str, locator: Any) -> None:
    """A screenshot of the whole window with `locator` scrolled to the top of the notebook: what a reader sees
    (an element screenshot of something taller than the window is not, in JupyterLab's own scroller)."""
    try:
        locator.evaluate(_SCROLL_TOP_JS)
        nb.page.wait_for_timeout(300)
    except Exception:  # noqa: BLE001 - a screenshot must never hide the real failure
        pass
    nb.screenshot(label)


def set_viewport(page: Any, name: str) -> None:
    """The window size and file browser of viewport `name`, changed together: the figures relayout once for both
    (one after the other, each figure relayouts twice, and chromium spends a quarter more CPU on it)."""
    set_view(page, *VIEWPORTS[name])


def set_view(page: Any, size: dict, files: bool) -> None:
    """The window's `size` ({"width", "height"}) and JupyterLab's file browser open (`files`) or closed."""
    panel = page.locator("#filebrowser")  # JupyterLab's file browser (the left sidebar), opened as a reader does
    if (panel.count() > 0 and panel.is_visible()) != files:
        page.locator('.jp-SideBar.jp-mod-left .lm-TabBar-tab[data-id="filebrowser"]').click()
    page.set_viewport_size(size)
    deadline = time.monotonic() + 10
    while (panel.count() > 0 and panel.is_visible()) != files and time.monotonic() < deadline:
        time.sleep(0.1)
    settle(page)


def figure_problems(page: Any, where: str, root: Any = None) -> list[str]:
    """The problems of every figure shown now in `root` (default: the notebook; hidden tabs' figures are
    skipped), each prefixed with `where`."""
    out = []
    plots = page.locator(PLOTS) if root is None else root.locator(".js-plotly-plot")
    for i in range(plots.count()):
        plot = plots.nth(i)
        res = plot.evaluate(FIGURE_JS, {"tol": TOL_PX, "minShare": MIN_WIDTH_SHARE})
        if res["skipped"]:
            continue
        cell = plot.evaluate("(p) => Array.from(document.querySelectorAll("
                             "'.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell')).indexOf(p.closest('.jp-Cell'))")
        head = f"{where}, cell {cell}, figure {res['title'][:80]!r} ({res.get('width')}×{res.get('height')} px)"
        out += [f"{head}: {p}" for p in res["problems"]]
    return out


def controls_problems(page: Any, where: str) -> tuple[list[str], int]:
    """The problems of every widget control on the page, and how many slider values were checked."""
    root = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook")
    res = root.evaluate(CONTROLS_JS, {"tol": TOL_PX})
    return [f"{where}: {p}" for p in res["problems"]], int(res["sliders"])


def check_page(nb: Any, viewports: tuple[str, ...] = tuple(VIEWPORTS), shots: bool = True) -> tuple[list[str], dict]:
    """Every figure (every tab of every widget Tab too) and every control of `nb`, at each viewport.

    Returns (problems, counts); screenshots go to the test's artifacts: each viewport's panels, and every tab
    and cell figure at the narrowest (the first of `viewports`), where a problem shows first.
    """
    page = nb.page
    problems: list[str] = []
    counts: dict[str, int] = {}
    for vp in viewports:
        set_viewport(page, vp)
        problems += figure_problems(page, vp)
        bars = page.locator(WIDGET_TABS)
        for b in range(bars.count()):
            tabs = bars.nth(b).locator(".lm-TabBar-tab")
            for t in range(tabs.count()):
                tabs.nth(t).click()
                settle(page, 5)
                name = tabs.nth(t).inner_text().strip()
                problems += figure_problems(page, f"{vp}, tab {name!r}", bars.nth(b).locator("xpath=.."))
                if shots and vp == viewports[0]:  # every tab as the narrowest reader sees it
                    view_shot(nb, f"{vp}-tab-{name}", bars.nth(b))
        found, n_sliders = controls_problems(page, vp)
        problems += found
        counts[vp] = n_sliders
        if shots:
            panels = page.locator(".jp-Cell-outputArea > .jp-OutputArea-child > .jp-OutputArea-output:has(.widget-box)")
            for k in range(panels.count()):
                view_shot(nb, f"{vp}-panel-{k}", panels.nth(k))
            figs = page.locator(".jp-Cell-outputArea > .jp-OutputArea-child > .jp-RenderedPlotly:has(.main-svg)")
            for k in range(figs.count() if vp == viewports[0] else 0):  # the cell figures: at the narrowest
                view_shot(nb, f"{vp}-figure-{k}", figs.nth(k))
    # figures drawn in a hidden tab count as checked only if shown once: dedupe identical sentences
    seen: set[str] = set()
    unique = [p for p in problems if not (p in seen or seen.add(p))]
    return unique, counts
