"""What can mislead a reader of a page, read off the page as Chromium lays it out: one function per kind, each
returning the problems it sees (empty: none), so the same checks run on the report of a small run in the tests, on
a real ``make run``'s report (``WORKBENCH_REPORT_RUN=runs/latest``, tests/browser/test_report_page.py), and on
any page by hand (``python tests/browser/checks.py runs/latest/report.html``).

- :func:`figure_problems`, per plotly figure: two quantities on one axis (each trace carries the metric it draws and
  the quantity that metric's declared unit makes it, in ``meta``, stamped by :mod:`workbench.panels`: a trace that
  names no metric is a problem, never read as its axis's title; a numeric axis with data and no title names no
  quantity at all; an axis whose ticks read as percent under a quantity that is no fraction);
  a series drawn exactly under another (same kind, same points, same axes: the legend lists a series the plot does
  not show); a panel (a subplot's axis pair) with no data.
- :func:`table_problems`: a table column narrower than its longest word (a word wider than its cell's content box:
  broken across lines, or running out of its cell), for every table of the page, folded ``<details>`` opened
  first.
"""

from __future__ import annotations

import sys
from pathlib import Path

try:
    from browser.pages import TEXT_BOXES, overlapping
except ImportError:  # run as a script: tests/ is not on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from browser.pages import TEXT_BOXES, overlapping

# Per figure div: its traces' axes, quantities and points, its subplots and axes, as plotly laid them out.
FIGURE = """(d) => {
  const fl = d._fullLayout, data = d._fullData || [];
  const name = (a) => a.charAt(0) + 'axis' + a.slice(1);
  const has = (t) => ['x', 'y', 'values'].some(k => t[k] && Array.from(t[k]).some(v => v !== null && v !== undefined && v === v));
  const root = (a) => { const ax = fl[name(a)]; return ax && ax.matches ? ax.matches : a; };
  return {
    barmode: fl.barmode || 'group',
    // every panel the figure lays out: each x axis its layout gives a place (plotly.js lays out no axes for a
    // subplot no trace is on, so its own list misses exactly the empty ones), with the y axis it is anchored to
    subplots: [...new Set([...((fl._subplots && fl._subplots.cartesian) || []),
      ...Object.keys(d.layout || {}).filter(k => /^xaxis\d*$/.test(k) && d.layout[k] && d.layout[k].domain)
        .map(k => 'x' + k.slice(5) + ((d.layout[k].anchor && d.layout[k].anchor !== 'free') ? d.layout[k].anchor
                                      : 'y' + k.slice(5)))])],
    axes: Object.fromEntries(Object.keys(fl).filter(k => /^[xy]axis\\d*$/.test(k)).map(k => [k, {
      title: (fl[k].title && fl[k].title.text) || '', type: fl[k].type, tickformat: fl[k].tickformat || '',
      matches: fl[k].matches || null, visible: fl[k].visible !== false}])),
    traces: data.filter(t => t.visible !== false).map(t => ({
      name: t.name || '', type: t.type, mode: t.mode || '', x: t.xaxis || 'x', y: t.yaxis || 'y',
      xroot: root(t.xaxis || 'x'), yroot: root(t.yaxis || 'y'), has: has(t), meta: t.meta || null,
      points: JSON.stringify([t.x || null, t.y || null, t.base || null, t.orientation || null]),
      numeric: Array.from(t.y || []).every(v => v === null || typeof v === 'number')}))
  };
}"""

# Every word of every table cell wider than its cell's content box (broken across lines because it could not fit,
# or running past the cell); a word the browser wraps at its hyphen in a cell it would fit is prose, not a squeeze.
TABLES = """() => {
  document.querySelectorAll('details').forEach(d => { d.open = true; });
  const out = [];
  for (const cell of document.querySelectorAll('table td, table th')) {
    if (cell.closest('.plotly-graph-div') || !cell.getClientRects().length) continue;
    const cs = getComputedStyle(cell), box = cell.getBoundingClientRect();
    const right = box.right - parseFloat(cs.paddingRight) - parseFloat(cs.borderRightWidth) + 1;
    const room = box.width - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight)
                 - parseFloat(cs.borderLeftWidth) - parseFloat(cs.borderRightWidth) + 1;
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let n = walker.nextNode(); n; n = walker.nextNode()) {
      for (const m of n.textContent.matchAll(/\\S+/g)) {
        const r = document.createRange();
        r.setStart(n, m.index); r.setEnd(n, m.index + m[0].length);
        const rects = [...r.getClientRects()].filter(q => q.width > 0);
        const wide = rects.reduce((w, q) => w + q.width, 0);  // the word laid out whole
        if (wide > room || rects.some(q => q.right > right)) {
          const table = cell.closest('table'), section = table.closest('section, details, [id]');
          out.push({word: m[0], cell: Math.round(box.width), lines: rects.length,
                    table: (table.className || '') + (section && section.id ? '#' + section.id : '')});
        }
      }
    }
  }
  return out;
}"""


def _hidden(traces: list[dict], barmode: str) -> list[str]:
    """Series drawn with the same points on the same axes as an earlier one, where they overlap (lines and markers
    always; bars only overlaid: grouped or stacked bars sit beside or on each other)."""
    seen: dict[tuple, str] = {}
    out = []
    for t in traces:
        if not t["has"] or (t["type"] == "bar" and barmode != "overlay") or t["type"] not in ("scatter", "bar"):
            continue
        key = (t["x"], t["y"], t["type"], t["mode"], t["points"])
        if key in seen:
            out.append(f"series {t['name']!r} is drawn exactly under {seen[key]!r} on axes {t['x']}/{t['y']}")
        else:
            seen[key] = t["name"]
    return out


def _named(fig: dict) -> tuple[list[dict], list[str]]:
    """The traces with data that name the metric they draw, and a problem for each that does not (its quantity
    would be a guess: its axis's title, which every trace on the axis shares)."""
    shown, out = [], []
    for t in (t for t in fig["traces"] if t["has"]):
        if isinstance(t["meta"], dict) and t["meta"].get("metric"):
            shown.append(t)
        else:
            out.append(f"trace {t['name']!r} names no metric it draws (meta.metric): its quantity cannot be checked")
    return shown, out


def _mixed(fig: dict, shown: list[dict], letter: str) -> list[str]:
    """On each ``letter`` axis (an axis and those matched to it are one): traces that do not say their quantity,
    two quantities that meet, and percent ticks under a quantity that is no fraction."""
    out, by_axis = [], {}
    for t in shown:
        if letter not in t["meta"]:
            out.append(f"trace {t['name']!r} does not say the quantity it draws on {letter} (meta.{letter})")
            continue
        by_axis.setdefault(t[f"{letter}root"], set()).add(str(t["meta"][letter]))
    for axis, units in sorted(by_axis.items()):
        if len(units) > 1:
            out.append(f"axis {axis} mixes quantities: {' | '.join(sorted(units))}")
        other = sorted(u for u in units if not u.startswith("fraction"))
        if "%" in fig["axes"].get(axis[0] + "axis" + axis[1:], {}).get("tickformat", "") and other:
            out.append(f"axis {axis} reads its ticks as percent but draws {' | '.join(other)}")
    return out


def _units(fig: dict) -> list[str]:
    """Quantities that meet on one axis, traces that do not say theirs or the metric it comes from, numeric axes
    with data and no title, and percent ticks under another quantity."""
    shown, out = _named(fig)
    out += _mixed(fig, shown, "x") + _mixed(fig, shown, "y")
    axes = fig["axes"]
    drawn = {(t["yroot"], t["numeric"]) for t in fig["traces"] if t["has"]}
    for axis, numeric in sorted(drawn):
        key = "yaxis" + axis[1:]
        if numeric and key in axes and not axes[key]["title"]:
            titled = [k for k, a in axes.items() if a["matches"] == axis and a["title"]]
            if not titled:
                out.append(f"axis {axis} draws numbers but names no quantity (no title)")
    return out


def _empty_panels(fig: dict) -> list[str]:
    with_data = {t["x"] + t["y"] for t in fig["traces"] if t["has"]}
    if not fig["traces"] or not any(t["has"] for t in fig["traces"]):
        return ["the figure draws no data"]
    return [f"panel {sp} has no data" for sp in fig["subplots"] if sp not in with_data]


def figure_problems(div) -> list[str]:
    """What in one plotly figure (a Playwright locator or element handle of its div) can mislead: see the module."""
    fig = div.evaluate(FIGURE)
    return [*_units(fig), *_hidden(fig["traces"], fig["barmode"]), *_empty_panels(fig)]


def page_figure_problems(page, overlaps: bool = False) -> dict[str, list[str]]:
    """Each figure of ``page`` with problems, by its div id; with ``overlaps``, also text boxes of a figure that
    overlap (tests/browser/pages.py: panel titles running into each other at the page's width)."""
    out = {}
    for d in page.locator(".plotly-graph-div").all():
        found = figure_problems(d)
        if overlaps:
            found += [f"text {a!r} overlaps {b!r}" for a, b in overlapping(d.evaluate(TEXT_BOXES))]
        if found:
            out[d.get_attribute("id") or "?"] = found
    return out


def table_problems(page) -> list[str]:
    """Every word a table column is too narrow for, on ``page`` (its folded sections opened)."""
    return [f"{p['table'] or 'table'}: {p['word']!r} does not fit its {p['cell']} px cell"
            + (f" (broken over {p['lines']} lines)" if p["lines"] > 1 else "") for p in page.evaluate(TABLES)]


def wait_for_figures(page, timeout_ms: int = 60_000) -> None:
    page.wait_for_function("() => [...document.querySelectorAll('.plotly-graph-div')]"
                           ".every(d => d._fullLayout && d.querySelector('.main-svg'))", timeout=timeout_ms)


def main(argv: list[str]) -> int:
    """``python tests/browser/checks.py PAGE.html [WIDTH …]``: every check on a page in headless Chromium (Debian's
    ``chromium``, or ``WORKBENCH_CHROMIUM``), at each width (default 1024 1400 1920); exit 1 on any problem."""
    import os
    import shutil

    from playwright.sync_api import sync_playwright

    if not argv:
        print(main.__doc__, file=sys.stderr)
        return 2
    path, widths = Path(argv[0]).resolve(), [int(w) for w in argv[1:]] or [1024, 1400, 1920]
    exe = os.environ.get("WORKBENCH_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    bad = 0
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=exe, headless=True)
        for width in widths:
            page = browser.new_page(viewport={"width": width, "height": 1000})
            page.goto(path.as_uri())
            wait_for_figures(page)
            height = page.evaluate("() => document.documentElement.scrollHeight")
            found = [f"{k}: {p}" for k, ps in page_figure_problems(page, overlaps=True).items() for p in ps]
            found += table_problems(page)
            print(f"{width} px: page {height} px tall, {len(found)} problem(s)")
            for p in found:
                print(f"  {p}")
            bad += len(found)
            page.close()
        browser.close()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
