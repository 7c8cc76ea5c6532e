"""Each executed notebook of a run as a page a browser reads: nbconvert's HTML beside its ``.ipynb``.

A browser shows an ``.ipynb`` as raw JSON, so the report's "executed notebook" link opened a wall of JSON. The
report (:func:`workbench.report.write`) renders each executed notebook of the run once with nbconvert, to
``NAME.html`` beside ``NAME.ipynb``, and links that; it renders again only a notebook newer than its page. nbconvert's
``basic`` template (the cells' markup alone, 15 kB a notebook where its ``lab`` page inlines 280 kB of JupyterLab's
CSS: 9 MB a run) in a page of its own with a small stylesheet and pygments' highlighting. Figures are plotly MIME
bundles, which nbconvert does not draw: their plain-text stand-in names each one, and the report draws them all. A
notebook nbconvert cannot read keeps its ``.ipynb`` link only (the report says nothing it cannot show).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from .files import atomic_write

if TYPE_CHECKING:
    from .manifest import Manifest

TEMPLATE = "basic"
STYLE = """
body { font-family: system-ui, sans-serif; margin: 1em auto; max-width: 1100px; padding: 0 1em; color: #222; }
p.nav { color: #666; font-size: 0.9em; border-bottom: 1px solid #ddd; padding-bottom: 0.4em; }
.jp-Cell { margin: 0.6em 0; }
.jp-InputPrompt, .jp-OutputPrompt { color: #888; font-family: monospace; font-size: 0.8em; }
.jp-InputArea-editor, .highlight { background: #f6f8fa; border: 1px solid #e4e4e4; border-radius: 3px; }
pre { margin: 0; padding: 0.5em; overflow-x: auto; font-size: 0.85em; line-height: 1.35; white-space: pre-wrap; }
.jp-OutputArea-output pre { background: none; border: none; }
.jp-RenderedHTMLCommon table, table.dataframe { border-collapse: collapse; font-size: 0.85em; margin: 0.4em 0; }
.jp-RenderedHTMLCommon td, .jp-RenderedHTMLCommon th, table.dataframe td, table.dataframe th {
  border-bottom: 1px solid #ddd; padding: 0.2em 0.5em; text-align: left; vertical-align: top; }
.jp-MarkdownCell { line-height: 1.45; }
.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"] { background: #fdf0f0; }
"""


def page_of(ipynb: Path) -> Path:
    return ipynb.with_suffix(".html")


def rendered(out: Path, output: str) -> str | None:
    """The page of executed notebook ``output`` (relative to run folder ``out``), relative to ``out``, where it is
    there and not older than the notebook; else None."""
    nb = Path(out) / output
    page = page_of(nb)
    try:
        fresh = page.stat().st_mtime >= nb.stat().st_mtime
    except OSError:
        return None
    return Path(os.path.relpath(page, out)).as_posix() if fresh else None


def _stale(notebooks: Iterable[Path]) -> list[Path]:
    out = []
    for nb in notebooks:
        try:
            if not page_of(nb).exists() or page_of(nb).stat().st_mtime < nb.stat().st_mtime:
                out.append(nb)
        except OSError:
            continue
    return out


def render_all(out: Path, manifest: Manifest | None) -> list[Path]:
    """Render each executed notebook the manifest lists whose page is missing or older than it; the pages written.
    One that nbconvert cannot read is skipped (its ``.ipynb`` stays linked)."""
    if manifest is None:
        return []
    todo = _stale(Path(out) / n.output for n in manifest.notebooks.values()
                  if n.output and n.status != "running" and (Path(out) / n.output).is_file())
    if not todo:
        return []
    import nbformat
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(template_name=TEMPLATE)
    written = []
    for nb in todo:
        try:
            body, _ = exporter.from_notebook_node(nbformat.read(nb, as_version=4))
        except Exception:  # noqa: BLE001 - a notebook cut off mid-write, or one nbconvert cannot render
            continue
        written.append(atomic_write(page_of(nb), page(nb, Path(out), body)))
    return written


def page(nb: Path, out: Path, body: str) -> str:
    """A notebook's cells (nbconvert's markup) as a page of their own: its name, links to the ``.ipynb`` and the
    run's report, the stylesheet."""
    import html

    from pygments.formatters import HtmlFormatter

    report = Path(os.path.relpath(out / "report.html", nb.parent)).as_posix()
    name = html.escape(Path(os.path.relpath(nb, out)).as_posix())
    return (f"<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'><title>{name}</title><style>{STYLE}"
            f"{HtmlFormatter().get_style_defs('.highlight')}</style></head><body>\n<p class='nav'><b>{name}</b>, "
            f"executed · <a href='{html.escape(nb.name)}'>.ipynb</a> · <a href='{html.escape(report)}'>the run's "
            f"report</a> (its figures)</p>\n{body}\n</body></html>\n")
