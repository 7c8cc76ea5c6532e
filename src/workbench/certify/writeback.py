"""What this package writes back into the blueprint, each in a managed block of its own.

- ``step-function-gates``: nested under the entry condition's item (``entry.step_function``), after its own block:
  the four gates one line each, with the subject's state (its verdict on its engine version and model, or what
  resolves it), the rule (the source's number, or the workbench's own reading where the source gives none), and the
  evidence (each finding linked, the references beside the subject in the blueprint's own reference words, each
  with its model and what its verdict means for the subject, never shown bare as its answer).
- ``certification-matrix``: at the end of the entry conditions' section, the matrix (:mod:`.matrix`).
- ``product-path``: after it, the product path as it stands (:mod:`.product`).

:mod:`workbench.blueprint` places them (:data:`BLOCKS` names where); the text is made here, from the findings, so the
write-back stays one pure function of the findings and the blueprint.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence
from urllib.parse import quote

from .. import claims, standing
from . import gates, matrix, product

GATES_BLOCK, MATRIX_BLOCK, PRODUCT_BLOCK = "step-function-gates", "certification-matrix", "product-path"


@dataclass(frozen=True)
class Block:
    """A managed block's id, where it goes (``("item", claim id)``: nested in that claim's list item, after its own
    block; ``("section", section key)``: at the end of that section) and its lines."""

    id: str
    where: tuple[str, str]
    lines: list[str]


def _link(path: Path, base: Path) -> str:
    return quote(Path(os.path.relpath(path, base)).as_posix())


def _cell(s: str | None, n: int = 300) -> str:
    s = " ".join((s or "").split())
    return s if len(s) <= n else s[: n - 1] + "…"


def rule_words(claim_id: str) -> str:
    """A gate's rule in words, saying whose number it is."""
    from ..loop.gate import GateRule

    return {
        gates.G1: "the subject serves a ladder tier no llama.cpp KV profile holds under one memory budget (any tier: "
                  "the source gives no number; each refusal read from the engine)",
        gates.G2: gates.UsableRule().describe().replace("at least 2×", "at least 2× (the source's)"),
        gates.G3: gates.PrefillRule().describe().replace("at least 3×", "at least 3× (the source's)"),
        claims.GATES[3]: GateRule().describe(),
    }[claim_id]


Reference = Callable[[standing.ClaimState, standing.Standing, Path], str]
"""A reference's line in the blueprint's words (:func:`workbench.blueprint._reference_line`: who, on which model,
its verdict with the lead of its reason and what it means for the subject), passed in by the blueprint that places
these blocks (this package sits below it)."""


def gate_line(state: standing.ClaimState, base: Path, reference: Reference) -> str:
    """One gate as a list item: label, the source's words, the subject's state (each verdict with its engine version
    and model), the rule, the evidence (each reference line as the blueprint words it)."""
    c = state.claim
    if state.answers:
        subject = "; ".join(f"**{s.verdict}** on {c.about.name} {s.engine_version or ''} on {s.model or '—'} "
                            f"([finding]({_link(s.path, base)}))" for s in state.answers)
    else:
        subject = f"**{c.about.name}: {state.headline}** · resolve: `{state.command}`"
    refs = "; ".join(reference(state, s, base) for s in state.references)
    text = c.text.split(":")[0]
    return (f"- **{c.match}** ({text}) — {subject} · rule: {rule_words(c.id)}"
            + (f" · evidence: {refs}" if refs else " · evidence: none in this run"))


def gate_lines(found: Sequence[tuple[Path, Any]], base: Path, reference: Reference) -> list[str]:
    states = {s.claim.id: s for s in standing.claim_states(found, "gates")}
    entry = next(s for s in standing.claim_states(found, "entry") if s.claim.id == standing.STEP_FUNCTION)
    kept = entry.headline if entry.subject else f"unresolved — needs {entry.claim.about.needs}"
    return [f"**Step-function gates** (specialization-cells blueprint: the cell is kept if it delivers at least one, "
            f"confirmed on target; kept: {kept}):", "",
            *(gate_line(states[g], base, reference) for g in claims.GATES)]


def blocks(found: Sequence[tuple[Path, Any]], base: Path, reference: Reference) -> list[Block]:
    """This package's managed blocks for a blueprint written to folder ``base``; ``reference``: how the blueprint
    words a reference's line."""
    cells = matrix.build(found)
    return [
        Block(GATES_BLOCK, ("item", standing.STEP_FUNCTION), gate_lines(found, base, reference)),
        Block(MATRIX_BLOCK, ("section", "entry"),
              ["**Certification matrix** (every cell publishes, specialization-cells blueprint; one row per engine and "
               "model, p50 · p90 · p95 over repeated runs with the run count; `workbench certify matrix RUN` exports it "
               "as JSON and CSV):", "", *matrix.markdown(cells, reasons=False)]),
        Block(PRODUCT_BLOCK, ("section", "entry"), product.note(found)),
    ]


__all__ = ["Block", "GATES_BLOCK", "MATRIX_BLOCK", "PRODUCT_BLOCK", "Reference", "blocks", "gate_line", "gate_lines",
           "rule_words"]
