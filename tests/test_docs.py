"""The docs agree with the tree: docs/architecture.md names every room of src/workbench in the layer
tests/test_imports.py gives it, and the README stays an entry point (short, its two commands, every docs page linked)."""

from __future__ import annotations

import pathlib
import re

from test_imports import LAYER_OF, LAYERS, layer_of

ROOT = pathlib.Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "workbench"
README_BYTES = 12_000
"""The README is an entry point: what the workbench is, the two commands, what a run writes, a map to docs/."""


def _map() -> tuple[list[str], list[tuple[str, str]]]:
    """architecture.md's layer headings (``## `engine`: …``) in order, and each row under one as (layer, room): the
    room is the row's first cell, a path under src/workbench (``cells/llamacpp/``, ``engine.py``)."""
    headings, rows, layer = [], [], None
    for line in (ROOT / "docs" / "architecture.md").read_text().splitlines():
        if line.startswith("## "):
            m = re.match(r"## `(\w+)`", line)
            layer = m.group(1) if m else None
            headings += [layer] if layer else []
        elif layer and (m := re.match(r"\| `([^`]+)` \|", line)):
            rows.append((layer, m.group(1)))
    return headings, rows


def _module(room: str) -> str:
    parts = pathlib.PurePosixPath(room.removesuffix("/")).with_suffix("").parts
    return ".".join(("workbench", *parts)).removesuffix(".__init__")


def _is_room(room: str) -> bool:
    path = SRC / room
    return (path / "__init__.py").is_file() if room.endswith("/") else path.is_file() and path.suffix == ".py"


def test_the_map_has_one_section_per_layer_in_the_layers_order():
    assert _map()[0] == list(LAYERS)


def test_the_map_names_every_room_in_its_layer():
    """Every row of LAYER_OF (each top-level module, each package, each module that sits in another layer than its
    package) and every package (an engine's wing too) has one row in architecture.md, under its layer's heading; a
    row names a room that exists."""
    _, rows = _map()
    named = [_module(room) for _, room in rows]
    problems = [f"architecture.md's row `{room}` names nothing under src/workbench" for _, room in rows if not _is_room(room)]
    problems += [f"architecture.md's row `{room}` is under `{layer}`, its layer is `{layer_of(_module(room))}`"
                 for layer, room in rows if _is_room(room) and layer_of(_module(room)) != layer]
    problems += [f"architecture.md names {m} twice" for m in sorted({m for m in named if named.count(m) > 1})]
    packages = {_module(str(p.parent.relative_to(SRC)) + "/") for p in SRC.rglob("__init__.py") if p.parent != SRC}
    problems += [f"architecture.md has no row for {m} (its layer: {layer_of(m)})"
                 for m in sorted((set(LAYER_OF) | packages) - set(named))]
    assert problems == [], "\n".join(problems)


def test_the_readme_is_an_entry_point():
    text = (ROOT / "README.md").read_text()
    size = len(text.encode())
    assert size < README_BYTES, f"README.md is {size} bytes: move details to the docs page they belong to"
    quick = text[text.index("```sh"):text.index("```", text.index("```sh") + 5)]
    assert [line.split()[:2] for line in quick.splitlines()[1:] if line.strip()[:4] == "make"] == [
        ["make", "run"], ["make", "test"]]
    pages = sorted(p.name for p in (ROOT / "docs").glob("*.md"))
    assert [p for p in pages if f"docs/{p}" not in text] == []
