"""What the browser tests read off a page: the text boxes of a plotly figure, and which of them overlap."""

from __future__ import annotations

WIDTHS = (1024, 1400, 1920)  # the page widths the figures must read well at

# every text box of a figure but its hover labels, in page pixels
TEXT_BOXES = """(div) => [...div.querySelectorAll('svg text')]
    .filter(t => !t.closest('.hoverlayer') && t.textContent.trim())
    .map(t => { const r = t.getBoundingClientRect();
                return {text: t.textContent, x: r.x, y: r.y, w: r.width, h: r.height}; })
    .filter(b => b.w > 0 && b.h > 0)"""


def overlapping(boxes: list[dict], slack: float = 1.0) -> list[tuple[str, str]]:
    """Pairs of text boxes that overlap by more than ``slack`` pixels both ways (glyph boxes of neighbouring
    lines may touch)."""
    out = []
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            dx = min(a["x"] + a["w"], b["x"] + b["w"]) - max(a["x"], b["x"])
            dy = min(a["y"] + a["h"], b["y"] + b["h"]) - max(a["y"], b["y"])
            if dx > slack and dy > slack:
                out.append((a["text"], b["text"]))
    return out
