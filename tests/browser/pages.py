"""What the browser tests read off a page: the text boxes of a plotly figure, and which of them overlap.

A text box is the text's own box turned as the text is (tick labels at an angle, a vertical axis title): its four corners in page pixels, so two slanted labels side by side do not count as overlapping
because their upright bounding rectangles would.
"""

from __future__ import annotations

WIDTHS = (1024, 1400, 1920)  # the page widths the figures must read well at

# every text of a figure but its hover labels: the corners of its box, in page pixels
TEXT_BOXES = """(div) => [...div.querySelectorAll('svg text')]
    .filter(t => !t.closest('.hoverlayer') && t.textContent.trim() && t.getBBox().width > 0)
    .map(t => { const b = t.getBBox(), m = t.getScreenCTM(), svg = t.ownerSVGElement;
                const corner = (x, y) => { const p = svg.createSVGPoint(); p.x = x; p.y = y;
                                           const q = p.matrixTransform(m); return [q.x, q.y]; };
                return {text: t.textContent, corners: [corner(b.x, b.y), corner(b.x + b.width, b.y),
                        corner(b.x + b.width, b.y + b.height), corner(b.x, b.y + b.height)]}; })"""


def _overlap(a: list, b: list, slack: float) -> bool:
    """Whether two convex quadrilaterals overlap by more than ``slack`` pixels (separating axis test)."""
    for quad in (a, b):
        for i in range(4):
            (x0, y0), (x1, y1) = quad[i], quad[(i + 1) % 4]
            nx, ny = y0 - y1, x1 - x0
            norm = (nx * nx + ny * ny) ** 0.5 or 1.0
            pa = [(x * nx + y * ny) / norm for x, y in a]
            pb = [(x * nx + y * ny) / norm for x, y in b]
            if min(max(pa), max(pb)) - max(min(pa), min(pb)) <= slack:
                return False
    return True


def overlapping(boxes: list[dict], slack: float = 1.0) -> list[tuple[str, str]]:
    """Pairs of text boxes that overlap by more than ``slack`` pixels (glyph boxes of neighbouring lines may
    touch)."""
    return [(a["text"], b["text"]) for i, a in enumerate(boxes) for b in boxes[i + 1:]
            if _overlap(a["corners"], b["corners"], slack)]
