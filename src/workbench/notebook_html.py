"""Each executed notebook of a run as a page a browser reads: nbconvert's HTML beside its ``.ipynb``.

A browser shows an ``.ipynb`` as raw JSON, so the report's "executed notebook" link opened a wall of JSON. The
report (:func:`workbench.report.write`) renders each executed notebook of the run once, with nbconvert's own
``lab`` template (the page JupyterLab's "Export as HTML" writes), to ``NAME.html`` beside ``NAME.ipynb``, and links
that; it renders again only a notebook newer than its page. Figures are plotly MIME bundles, which nbconvert does not
draw: their plain-text stand-in names each one, and the report draws them all. A notebook nbconvert cannot read
keeps its ``.ipynb`` link only (the report says nothing it cannot show).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from .files import atomic_write

if TYPE_CHECKING:
    from .manifest import Manifest

TEMPLATE = "lab"


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
        written.append(atomic_write(page_of(nb), body))
    return written
