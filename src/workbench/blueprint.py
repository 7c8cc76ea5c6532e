"""Write findings back into the Markdown blueprint, next to the claims they settle.

Managed blocks. Everything the workbench writes sits between two marker lines,
``<!-- workbench:begin ID -->`` and ``<!-- workbench:end ID -->``. A marker counts only when the
Markdown parser sees that line as an HTML block of its own: one quoted in a code block is
documentation and ignored, one swallowed by a person's HTML block or paragraph is an error rather
than a block silently lost. Outside blocks nothing is rewritten: write-back replaces block contents
and inserts missing blocks *between* existing lines, so human text survives byte for byte by
construction, and a block, once written, stays wherever it is (people may move it).

Where each finding goes (sections by heading text, rows and items by :mod:`workbench.claims`
``match``, all located through markdown-it token line maps):

- Open Unknowns: block ``<claim id>`` nested in the list item. Its first line is the subject
  engine's state (e.g. "unresolved — needs tensorrt_llm on an NVIDIA GPU" and the command that
  resolves it); below it a small table, one row per (engine, engine version) that ran, the
  subject's rows first and other engines' rows labelled ``reference``. A table rather than prose
  so :func:`unknowns_table` reads the state back through the parser.
- Risks and Contract Mapping Reference: a column cannot live in a block of its own, so the whole
  table is wrapped in one block (``risks-table``, ``contract-table``) whose *last* column
  (``Status``, ``Verified``) is ours. Each row's human part, the raw line up to the pipe before our
  cell, is re-read on every run and kept byte for byte, so people can keep editing those cells;
  taking a table under management only adds a missing trailing pipe to its rows.
- ``verification-log``: a "Verification log" section appended at the end once, then kept in place;
  it lists every finding, whatever claim it cites.

Which verdict stands is :mod:`workbench.standing`'s rule, shared with the report: only the claim's
subject engine resolves it or sets its status; a ``not-run`` one never masks or poses as an answer,
and its reason is printed once per engine, in the Verification log.
"""

from __future__ import annotations

import difflib
import functools
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Sequence
from urllib.parse import quote, unquote

from markdown_it import MarkdownIt
from markdown_it.token import Token

from . import claims as _claims
from . import standing as _standing
from .probes import churn as _churn
from .engine import WorkbenchError
from .files import check_file_writable, read_regular, write_output
from .settle import verified_by_path
from .findings import Finding, model_of, scan
from .standing import ANSWERS, ClaimState, Standing


class BlueprintError(WorkbenchError):
    """The blueprint cannot be written back as it stands; nothing was written."""


class MissingError(BlueprintError):
    """A section, table, row or list item that the claims need is not in the blueprint."""


class ManagedBlockError(BlueprintError):
    """Managed-block markers are unbalanced, nested, duplicated or swallowed by surrounding Markdown."""


Mode = Literal["write", "dry-run", "check"]
LOG_ID = "verification-log"
TABLES = {"risks": ("risks-table", "Status"), "contract": ("contract-table", "Verified")}
ITEM_SECTIONS = ("unknowns", "entry")  # sections whose list items get a block of their own
_LABELS = {
    "confirmed": "**confirmed**",
    "refuted": "**refuted**",
    "partial": "**partial**",
    "inconclusive": "_inconclusive_",
    "not-applicable": "**not-applicable**",
    "not-run": "_not run_",
}
_REFERENCE = "reference"
_CONFORMANCE = "conformance"  # a contract row's line citing the daemon's conformance run (CITED)
CITED = {"contract": "contract.conformance"}
"""Per claims table, the probe every row also cites beside the verdict that stands: the contract table's rows cite
the conformance run through the cell's daemon (``contract.conformance``) on each engine it ran on."""
_SUBJECT = "subject"
_ITEM_COLUMNS = ("Role", "Verdict", "Engine", "Version", "Model", "Hardware", "Date", "What it says", "Evidence")
_LOG_COLUMNS = ("Date", "Engine", "Version", "Model", "Hardware", "Probe", "Verdict", "Claims", "Evidence")
_MARKER = re.compile(r"([ \t]*)<!-- workbench:(begin|end) ([A-Za-z0-9._-]+) -->[ \t]*")
_NEWLINE = re.compile(r"\r\n|\r|\n")  # the line breaks markdown-it itself splits on
_PIPE_OR_ESCAPE = re.compile(r"\\.|\|", re.S)
_BULLET = re.compile(r"([ ]*)([-+*]|\d{1,9}[.)])([ ]*)")
_MD = MarkdownIt("commonmark").enable("table")
_BLOCKS = MarkdownIt("commonmark").enable("table").disable(["inline", "text_join"])
"""The block parse alone: every token, map and inline token's ``content`` as :data:`_MD` gives them, without the
inline parse of each (its ``children``), which only :func:`unknowns_table` reads; about half the parse's time."""


# --------------------------------------------------------------------------- what gets written


def _link(path: Path, base: Path) -> str:
    return quote(Path(os.path.relpath(path, base)).as_posix())


def _text(s: str | None) -> str:
    """One table cell: whitespace (line breaks included) collapsed, pipes escaped."""
    s = " ".join((s or "").split())
    return s.replace("|", "\\|") if s else "—"


def _label(s: Standing, role: str) -> str:
    """A subject's verdict is bold; a reference's is plain text, so it never reads as the claim's answer."""
    return _LABELS[s.verdict] if role == _SUBJECT else s.verdict


def _plain(s: Standing) -> str:
    """A reference's verdict as its line shows it: marked, with the first reason, where it settles nothing even as a
    reference (edited after its run, an environment that could not have produced it, numbers its rows do not give)."""
    return s.verdict + (f" (settles nothing: {_text(s.unsettled[0])})" if s.unverified else "")


def _shown(v: Any) -> str:
    """A finding's verdict in the log: marked, with why, where one of its answers settles nothing."""
    return v.finding.verdict + (f" (settles nothing: {v.answer_why[0]})" if v.answer_why else "")


def headline(state: ClaimState) -> str:
    """The claim's first line: the subject engine's state, and how to resolve it while it is open."""
    name = state.claim.about.name
    if state.resolved:
        return f"**{name}: {state.headline}**"
    return f"**{name}: {state.headline}** · resolve: `{state.command}`"


def _who(s: Standing) -> str:
    """Engine, version and the model it ran (a static survey runs none)."""
    return f"{_text(s.engine)} {_text(s.engine_version)}" + (f" on {_text(s.model)}" if s.model else "")


def _said(s: Standing) -> str:
    """What a standing says on its claim: its claim row's own reason (a finding's summary may be about another of its
    claims, or another verdict), else its summary."""
    return s.claim_reason or s.summary


_MEANS = {
    "confirmed": "the claim holds on {e}",
    "refuted": "the claim does not hold on {e}",
    "partial": "the claim holds in part on {e}",
    "not-applicable": "{e} lacks the mechanism the claim is about",
    "inconclusive": "{e}'s reading decided nothing",
}


def reference_meaning(state: ClaimState, s: Standing) -> str:
    """What a reference's verdict means for the claim's subject: it is about the reference engine's own mechanism and
    settles nothing on the subject (never shown bare beside the subject's statement)."""
    said = _MEANS.get(s.verdict, "{e} says " + s.verdict).format(e=s.engine)
    return f"{said}, which says nothing about {state.claim.about.name}"


def _reference_line(state: ClaimState, s: Standing, base: Path) -> str:
    """A reference's line in a Status/Verified cell: who, its verdict with the lead of its reason and what it means
    for the subject, when."""
    from .reading import first_clause

    lead, _ = first_clause(_said(s), 100)
    return (f"{_REFERENCE} · {_who(s)} · {_plain(s)} ({_text(lead)}): {_text(reference_meaning(state, s))} · "
            f"{_text(s.date)} · [finding]({_link(s.path, base)})")


def _status_cell(state: ClaimState, base: Path, cited: Sequence[Standing] = ()) -> str:
    """The Status/Verified cell: the subject's state first, each reference on its own labelled line that says what
    it means for the subject's claim, then each engine's row of the conformance run through the cell's daemon
    (``cited``) where the verdict shown above is another probe's: every contract row cites what the daemon measured
    of it."""
    parts = [headline(state) if not state.answers else
             "<br>".join(f"{_LABELS[s.verdict]} · {_who(s)} · {_text(s.date)} · "
                         f"[finding]({_link(s.path, base)})" for s in state.answers)]
    parts += [_reference_line(state, s, base) for s in state.references]
    shown = {s.finding_id for s in (*state.answers, *state.references)}
    parts += [f"{_CONFORMANCE} · {_who(s)} · {s.verdict} · {_text(s.date)} · "
              f"[finding]({_link(s.path, base)})" for s in cited if s.finding_id not in shown and s.verdict != "not-run"]
    return "<br>".join(parts)


def _churn_cell(state: ClaimState, base: Path) -> str:
    """The version-churn row's cell: its status, then what the cross-release rule found changed between the
    releases compared (its own words, the surveys named), marked where it settles nothing (a test double)."""
    cell = _status_cell(state, base)
    across = [s for s in state.subject if " → " in (s.engine_version or "") and s.verdict in ANSWERS]
    for s in across:
        said = "what changed" if s.answers else "what changed (settles nothing)"
        cell += f"<br>{said} · {_text(s.engine_version)}: {_text(s.summary)} · [survey]({_link(s.path, base)})"
    return cell


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _item_lines(state: ClaimState, base: Path) -> list[str]:
    shown = [(_SUBJECT, s) for s in state.subject if s.verdict != "not-run" and not s.unverified] + \
            [(_REFERENCE, s) for s in state.references]
    if not shown:
        return [headline(state)]
    rows = [_row(_ITEM_COLUMNS), _row(["---"] * len(_ITEM_COLUMNS))]
    for role, s in shown:
        says = _said(s) if role == _SUBJECT else f"{_said(s)} — reference: {reference_meaning(state, s)}"
        if role == _REFERENCE and s.unverified:
            says = f"settles nothing ({s.unsettled[0]}): {says}"
        rows.append(_row([role, _label(s, role), _text(s.engine), _text(s.engine_version), _text(s.model),
                          _text(s.hardware), _text(s.date), _text(says), f"[finding]({_link(s.path, base)})"]))
    return [headline(state), "", *rows]


def did_not_run(findings: Sequence[tuple[Path, Finding]]) -> dict[str, dict[str, list[str]]]:
    """:func:`workbench.standing.not_run_reasons` without what ran here after all: a probe (a loop arm) not run on
    an engine in one pass (a batch's llama.cpp lane reports the vLLM arms not-run on its model) that ran on that
    engine in another, on another model, did run; an engine left with nothing is not listed."""
    ran = {(f.engine, f.probe) for _, f in findings if f.verdict != "not-run"}
    out: dict[str, dict[str, list[str]]] = {}
    for engine, reasons in _standing.not_run_reasons(findings).items():
        for reason, probes in reasons.items():
            kept = [p for p in probes if (engine, p) not in ran]
            if kept:
                out.setdefault(engine, {})[reason] = kept
    return out


def _log_lines(findings: Sequence[tuple[Path, Finding]], base: Path) -> list[str]:
    head = ["## Verification log", ""]
    if not findings:
        return head + ["_No findings yet._"]
    why = [f"- {_text(engine)} did not run ({_text(', '.join(probes))}): {_text(reason)}"
           for engine, reasons in did_not_run(findings).items() for reason, probes in reasons.items()]
    rows = [_row(_LOG_COLUMNS), _row(["---"] * len(_LOG_COLUMNS))]
    checked = verified_by_path(findings)
    for path, f in sorted(findings, key=lambda pf: (_standing.when(pf[1].created), pf[1].id)):
        cited = ", ".join(c + (f" ({f.claim_verdicts[c]})" if c in f.claim_verdicts else "")
                          for c in dict.fromkeys(f.claims))
        rows.append(_row([_text(f.created[:10]), _text(f.engine), _text(f.engine_version),
                          _text(model_of(f) if _standing.behavioural(f.probe) else None),
                          _text((f.environment.get("hardware") or {}).get("summary")), _text(f.probe),
                          _text(_shown(checked[(str(path), f.id)])),
                          _text(cited), f"[finding]({_link(path, base)})"]))
    return head + ([*why, ""] if why else []) + rows


# --------------------------------------------------------------------------- reading the document


@dataclass(frozen=True)
class _Block:
    id: str
    begin: int  # line of the begin marker
    end: int  # line of the end marker
    indent: str


@dataclass(frozen=True)
class _Section:
    name: str
    start: int
    end: int


@dataclass(frozen=True)
class _Edit:
    """Replace lines[start:end] (an insertion when start == end)."""

    start: int
    end: int
    new: list[str]


def _split_lines(text: str) -> list[str]:
    """Lines with their terminators, split exactly where markdown-it splits, so token maps index them."""
    out, start = [], 0
    for m in _NEWLINE.finditer(text):
        out.append(text[start:m.end()])
        start = m.end()
    if start < len(text):
        out.append(text[start:])
    return out


def _body(line: str) -> str:
    return line.rstrip("\r\n")


def _blank(line: str) -> bool:
    return not _body(line).strip(" \t")


def _norm(s: str) -> str:
    return " ".join(s.split())


def _pipes(s: str) -> list[int]:
    """Positions of the pipes that separate table cells (a backslash escapes the next character: the scan left to
    right takes a backslash and the character after it as one match, so an escaped pipe never matches alone)."""
    return [m.start() for m in _PIPE_OR_ESCAPE.finditer(s) if m.group() == "|"]


def _cells(s: str) -> list[str]:
    """A table row's raw cells, GFM style: optional leading and trailing pipes."""
    p = _pipes(s)
    edges = [-1, *p, len(s)]
    cells = [s[a + 1:b] for a, b in zip(edges, edges[1:])]
    if p and not s[:p[0]].strip(" \t"):
        cells = cells[1:]
    if p and not s[p[-1] + 1:].strip(" \t"):
        cells = cells[:-1]
    return cells


class _Doc:
    """The blueprint as lines, markdown-it tokens, managed blocks and sections."""

    def __init__(self, text: str, inline: bool = False) -> None:
        self.lines = _split_lines(text)
        m = _NEWLINE.search(text)
        self.nl = m.group() if m else "\n"
        self.tokens: list[Token] = (_MD if inline else _BLOCKS).parse(text)
        self.blocks = self._blocks()
        self.sections = self._sections()
        self.tables = [(t.map[0], t.map[1]) for t in self.tokens if t.type == "table_open" and t.map]

    def _blocks(self) -> dict[str, _Block]:
        code = [t.map for t in self.tokens if t.type in ("fence", "code_block") and t.map]
        alone = {t.map[0] for t in self.tokens if t.type == "html_block" and t.map and t.map[1] == t.map[0] + 1}
        blocks: dict[str, _Block] = {}
        opened: tuple[str, int, str] | None = None
        for i, line in enumerate(self.lines):
            m = _MARKER.fullmatch(_body(line))
            if not m or any(a <= i < b for a, b in code):
                continue
            indent, kind, bid = m.groups()
            if i not in alone:
                raise ManagedBlockError(
                    f"line {i + 1}: the {kind} marker of managed block {bid!r} is not an HTML comment block of its "
                    "own to the Markdown parser (the text around it swallows it); put it on its own line after "
                    "a blank line or a closed block")
            if kind == "begin":
                if opened:
                    raise ManagedBlockError(f"line {i + 1}: managed block {bid!r} begins inside block {opened[0]!r} "
                                            f"(begun on line {opened[1] + 1}), which never ends")
                if bid in blocks:
                    raise ManagedBlockError(f"line {i + 1}: managed block {bid!r} appears twice "
                                            f"(first on line {blocks[bid].begin + 1})")
                opened = (bid, i, indent)
            elif not opened or opened[0] != bid:
                raise ManagedBlockError(f"line {i + 1}: managed block {bid!r} ends but was never begun")
            else:
                blocks[bid] = _Block(bid, opened[1], i, opened[2])
                opened = None
        if opened:
            raise ManagedBlockError(f"line {opened[1] + 1}: managed block {opened[0]!r} begins but never ends "
                                    f"(no '<!-- workbench:end {opened[0]} -->')")
        return blocks

    def _sections(self) -> list[_Section]:
        heads = [(int(t.tag[1:]), t.map[0], _norm(self.tokens[k + 1].content))
                 for k, t in enumerate(self.tokens) if t.type == "heading_open" and t.map]
        out = []
        for n, (level, start, name) in enumerate(heads):
            end = next((s for lv, s, _ in heads[n + 1:] if lv <= level), len(self.lines))
            out.append(_Section(name, start, end))
        return out

    def inside(self, line: int) -> bool:
        """Whether ``line`` is inside a managed block: our own tables and rows never count as the human's."""
        return any(b.begin < line < b.end for b in self.blocks.values())

    def section(self, key: str, problems: list[str]) -> _Section | None:
        name = _claims.SECTIONS[key]
        found = [s for s in self.sections if s.name == name]
        if len(found) == 1:
            return found[0]
        if found:
            problems.append(f"section '{name}' appears {len(found)} times (lines "
                            f"{', '.join(str(s.start + 1) for s in found)}); it must be one heading")
        else:
            ids = ", ".join(c.id for c in _claims.in_section(key))
            problems.append(f"section '{name}' is missing (no heading reading exactly '{name}'; needed by {ids})")
        return None

    def items(self, sec: _Section) -> list[tuple[int, int, str]]:
        """List items in a section outside managed blocks: (first line, end line, first paragraph's source)."""
        out = []
        for k, t in enumerate(self.tokens):
            if t.type != "list_item_open" or not t.map or not sec.start <= t.map[0] < sec.end or self.inside(t.map[0]):
                continue
            para = self.tokens[k + 1].type == "paragraph_open"
            out.append((t.map[0], t.map[1], self.tokens[k + 2].content if para else ""))
        return out


@functools.lru_cache(maxsize=4)
def _parsed(text: str, inline: bool = False) -> _Doc:
    """``text`` parsed once: a write-back's output, parsed to check its blocks, is parsed again as the next
    write-back's input and by :func:`run_writeback`'s changed-claims summary. A :class:`_Doc` is never changed once
    built, so one parse serves them all."""
    return _Doc(text, inline)


# --------------------------------------------------------------------------- planning the write-back


def _item_edits(doc: _Doc, key: str, states: dict[str, ClaimState], base: Path, problems: list[str]) -> list[_Edit]:
    sec = doc.section(key, problems)
    if sec is None:
        return []
    items = doc.items(sec)
    edits = []
    for claim in _claims.in_section(key):
        hits = [it for it in items if _norm(it[2]).startswith(_norm(claim.match))]
        if len(hits) != 1:
            problems.append(f"section '{sec.name}' has {len(hits) or 'no'} list item{'s' if len(hits) > 1 else ''} "
                            f"starting with {claim.match!r} (claim {claim.id}); it needs exactly one")
            continue
        content = _item_lines(states[claim.id], base)
        blk = doc.blocks.get(claim.id)
        if blk:
            edits.append(_Edit(blk.begin + 1, blk.end, [(blk.indent + c if c else "") + doc.nl for c in content]))
            continue
        start, end, _ = hits[0]
        bullet = _BULLET.match(_body(doc.lines[start]))
        if not bullet:
            problems.append(f"line {start + 1}: the item for claim {claim.id} must start with a bullet indented by "
                            "spaces (no tabs, no block quote) so its managed block can nest under it")
            continue
        gap = len(bullet.group(3))
        indent = " " * (len(bullet.group(1)) + len(bullet.group(2)) + (gap if 1 <= gap <= 4 else 1))
        while end > start + 1 and _blank(doc.lines[end - 1]):
            end -= 1
        edits.append(_Edit(end, end, _wrap(claim.id, indent, content, doc.nl)))
    return edits


def _wrap(bid: str, indent: str, content: list[str], nl: str) -> list[str]:
    return [f"{indent}<!-- workbench:begin {bid} -->{nl}", *((indent + c if c else "") + nl for c in content),
            f"{indent}<!-- workbench:end {bid} -->{nl}"]


def _human_part(text: str) -> str:
    """A managed row without our last cell: the raw text up to and including the pipe before it."""
    p = _pipes(text)
    trailing = not text[p[-1] + 1:].strip(" \t")
    return text[:p[-2 if trailing else -1] + 1]


def _closed(text: str) -> str:
    """A row about to gain our cell: trailing blanks dropped, a trailing pipe added if it has none."""
    text = text.rstrip(" \t")
    p = _pipes(text)
    return text if p and p[-1] == len(text) - 1 else text + " |"


def _first_cell(line: str) -> str:
    cells = _cells(_body(line))
    return _norm(cells[0]) if cells else ""


def _claims_table(doc: _Doc, key: str, blk: Any, problems: list[str]) -> tuple[int, int] | None:
    """The lines of section ``key``'s claims table: the one inside its managed block, else the one table of the
    section whose rows start with its claims' text (None, with the problem named, where there is not one)."""
    bid, claims = TABLES[key][0], _claims.in_section(key)
    sec = doc.section(key, problems)
    if blk:
        tables = [t for t in doc.tables if blk.begin < t[0] < blk.end]
        if len(tables) != 1:
            raise ManagedBlockError(f"managed block {bid!r} (lines {blk.begin + 1}-{blk.end + 1}) must hold exactly "
                                    f"one table, it holds {len(tables)}")
        return tables[0]
    if sec is None:
        return None
    tables = [t for t in doc.tables if sec.start <= t[0] < sec.end and not doc.inside(t[0])
              and any(_first_cell(doc.lines[i]).startswith(_norm(c.match)) for c in claims for i in range(*t))]
    if len(tables) != 1:
        problems.append(f"section '{sec.name}' has {len(tables) or 'no'} table{'s' if len(tables) > 1 else ''} "
                        f"whose rows start with its claims' text; it needs exactly one")
        return None
    return tables[0]


def _human_parts(key: str, blk: Any, texts: list[str], a: int, problems: list[str]) -> list[str | None]:
    """Each row's human-written part (None: a row of another width, kept as it is)."""
    bid, column = TABLES[key]
    width = len(_cells(texts[0]))
    if blk:
        last = _cells(texts[0])[-1].strip() if width else ""
        if width < 2 or last != column:
            raise ManagedBlockError(f"managed block {bid!r}: the table's last column is {last!r}, not {column!r}; "
                                    "restore the column or delete the block's markers to start over")
        return [_human_part(t) if len(_cells(t)) == width else None for t in texts]
    problems += [f"line {a + i + 1}: a row of the '{_claims.SECTIONS[key]}' table has more cells than its header "
                 "(Markdown drops the extra ones); merge them before write-back adds a column"
                 for i, t in enumerate(texts) if len(_cells(t)) > width]
    return [_closed(t) if len(_cells(t)) == width else None for t in texts]


def _status_cells(key: str, texts: list[str], human: list[str | None], states: dict[str, ClaimState], base: Path,
                  problems: list[str], cited: dict[str, list[Standing]] | None = None) -> dict[int, str]:
    """The status column's cell per row index: the header, the rule, and one per claim whose row is found once."""
    width = len(_cells(texts[0]))
    cells: dict[int, str] = {0: TABLES[key][1], 1: "---"}
    for claim in _claims.in_section(key):
        hits = [i for i in range(2, len(texts)) if _first_cell(human[i] or texts[i]).startswith(_norm(claim.match))]
        if len(hits) == 1 and human[hits[0]] is not None:
            cells[hits[0]] = (_churn_cell(states[claim.id], base) if claim.id == _churn.CLAIM else
                              _status_cell(states[claim.id], base, (cited or {}).get(claim.id, ())))
            continue
        table, row = f"the '{_claims.SECTIONS[key]}' table", f"starting with {claim.match!r} (claim {claim.id})"
        problems.append(f"{table} has no row {row}" if not hits else
                        f"{table} has {len(hits)} rows {row}; it needs exactly one" if len(hits) > 1 else
                        f"{table}'s row {row} has {len(_cells(texts[hits[0]]))} cells but its header has {width}")
    return cells


def _table_edit(doc: _Doc, key: str, states: dict[str, ClaimState], base: Path, problems: list[str],
                cited: dict[str, list[Standing]] | None = None) -> _Edit | None:
    bid = TABLES[key][0]
    blk = doc.blocks.get(bid)
    found = _claims_table(doc, key, blk, problems)
    if found is None:
        return None
    a, b = found
    texts = [_body(doc.lines[i]) for i in range(a, b)]
    human = _human_parts(key, blk, texts, a, problems)
    cells = _status_cells(key, texts, human, states, base, problems, cited)
    rows = []
    for i, text in enumerate(texts):
        end = doc.lines[a + i][len(text):] or doc.nl
        rows.append(text + end if human[i] is None else f"{human[i]} {cells.get(i, '—')} |{end}")
    if blk:
        return _Edit(blk.begin + 1, blk.end, rows)
    indent = texts[0][:len(texts[0]) - len(texts[0].lstrip(" \t"))]
    return _Edit(a, b, [f"{indent}<!-- workbench:begin {bid} -->{doc.nl}", *rows,
                        f"{indent}<!-- workbench:end {bid} -->{doc.nl}"])


def _log_edit(doc: _Doc, findings: Sequence[tuple[Path, Finding]], base: Path) -> _Edit:
    content = [line + doc.nl if line else doc.nl for line in _log_lines(findings, base)]
    blk = doc.blocks.get(LOG_ID)
    if blk:
        return _Edit(blk.begin + 1, blk.end, content)
    n = len(doc.lines)
    gap = [doc.nl] if n and not _blank(doc.lines[-1]) else []
    return _Edit(n, n, [*gap, f"<!-- workbench:begin {LOG_ID} -->{doc.nl}", *content,
                        f"<!-- workbench:end {LOG_ID} -->{doc.nl}"])


def _apply(doc: _Doc, edits: list[_Edit]) -> str:
    out: list[str] = []
    at = 0
    for e in sorted(edits, key=lambda e: (e.start, e.end)):  # stable: insertions keep their planned order
        out.extend(doc.lines[at:e.start])
        if e.new and out and not out[-1].endswith(("\n", "\r")):
            out[-1] += doc.nl  # the last line had no terminator; something now follows it
        out.extend(e.new)
        at = max(at, e.end)
    out.extend(doc.lines[at:])
    return "".join(out)


def _cited(findings: Sequence[tuple[Path, Finding]], key: str) -> dict[str, list[Standing]]:
    """Per claim of table ``key``, the standing verdict of :data:`CITED`'s probe on each engine (the same rule as
    every verdict, :func:`workbench.standing.standings`, over that probe's findings only)."""
    probe = CITED.get(key)
    if probe is None:
        return {}
    return _standing.standings([(p, f) for p, f in findings if f.probe == probe])


def writeback(text: str, findings: Sequence[tuple[Path, Finding]], *, base: Path,
              items: Sequence[str] = ITEM_SECTIONS, tables: Sequence[str] = tuple(TABLES),
              certify: bool | None = None) -> str:
    """The blueprint ``text`` with every managed block rewritten from ``findings`` (pure; idempotent).

    ``findings`` are ``(path, finding)`` pairs as :func:`workbench.findings.scan` returns them; links
    to the finding files are made relative to ``base``, the folder the result will be written to.
    ``items`` and ``tables``: the claim sections the document holds (another document, e.g. the gateway
    guide, holds others). ``certify``: write :mod:`workbench.certify.writeback`'s blocks too (the four gate lines
    under the entry condition, the certification matrix, the product path); None: where the document holds the
    entry conditions.
    """
    doc = _parsed(text)
    states = {s.claim.id: s for s in _standing.claim_states(findings)}
    problems: list[str] = []
    edits = [e for key in items for e in _item_edits(doc, key, states, base, problems)]
    edits += [e for key in tables if (e := _table_edit(doc, key, states, base, problems, _cited(findings, key)))]
    extra = _certify_blocks(findings, base) if (certify if certify is not None else "entry" in items) else []
    edits += _extra_edits(doc, extra, problems)
    if problems:
        raise MissingError("the blueprint lacks what the claims need; nothing was written:\n  - "
                           + "\n  - ".join(problems))
    edits.append(_log_edit(doc, findings, base))
    text = _apply(doc, edits)
    seen = _parsed(text).blocks
    lost = [bid for bid in (*(c.id for k in items for c in _claims.in_section(k)),
                            *(TABLES[k][0] for k in tables), *(b.id for b in extra), LOG_ID) if bid not in seen]
    if lost:  # e.g. an unclosed code fence above where a new block goes: it would be added again on every run
        raise ManagedBlockError(f"managed block(s) {', '.join(lost)} would not read as managed blocks once written "
                                "(is a code fence or HTML block above them left open?); nothing was written")
    return text


def _certify_blocks(findings: Sequence[tuple[Path, Finding]], base: Path) -> list:
    """:mod:`workbench.certify.writeback`'s blocks (imported here: the certification is the blueprint's, not the
    guide's), each reference line in this page's words (:func:`_reference_line`)."""
    from .certify import writeback as certify_writeback

    return certify_writeback.blocks(findings, base, _reference_line)


def _extra_edits(doc: _Doc, extra: Sequence[Any], problems: list[str]) -> list[_Edit]:
    """Each extra block (``id``, ``where``, ``lines``) replaced where it is, else inserted where it goes: nested in
    a claim's list item after that item's own block (``("item", claim id)``), or at the end of a section
    (``("section", key)``), in the order given."""
    edits = []
    for blk_spec in extra:
        content = list(blk_spec.lines)
        blk = doc.blocks.get(blk_spec.id)
        if blk:
            edits.append(_Edit(blk.begin + 1, blk.end, [(blk.indent + c if c else "") + doc.nl for c in content]))
            continue
        kind, key = blk_spec.where
        place = _item_place(doc, key, problems) if kind == "item" else _section_place(doc, key, problems)
        if place is not None:
            at, indent = place
            edits.append(_Edit(at, at, [doc.nl, *_wrap(blk_spec.id, indent, content, doc.nl)]))
    return edits


def _item_place(doc: _Doc, claim_id: str, problems: list[str]) -> tuple[int, str] | None:
    """Where a block nested in ``claim_id``'s list item goes (its last non-blank line), and its indent."""
    claim = _claims.get(claim_id)
    sec = doc.section(claim.section, problems)
    hits = [it for it in doc.items(sec) if _norm(it[2]).startswith(_norm(claim.match))] if sec else []
    if len(hits) != 1:
        if sec:
            problems.append(f"section '{sec.name}' needs exactly one item starting with {claim.match!r} for the "
                            f"blocks nested under claim {claim_id}")
        return None
    start, end, _ = hits[0]
    bullet = _BULLET.match(_body(doc.lines[start]))
    if not bullet:
        problems.append(f"line {start + 1}: the item for claim {claim_id} must start with a bullet indented by spaces")
        return None
    gap = len(bullet.group(3))
    indent = " " * (len(bullet.group(1)) + len(bullet.group(2)) + (gap if 1 <= gap <= 4 else 1))
    while end > start + 1 and _blank(doc.lines[end - 1]):
        end -= 1
    own = doc.blocks.get(claim_id)
    return (max(end, own.end + 1) if own and own.begin >= start else end), indent


def _section_place(doc: _Doc, key: str, problems: list[str]) -> tuple[int, str] | None:
    """The end of section ``key`` (its last non-blank line) for a block of its own, unindented."""
    sec = doc.section(key, problems)
    if sec is None:
        return None
    end = sec.end
    while end > sec.start + 1 and _blank(doc.lines[end - 1]):
        end -= 1
    return end, ""


# --------------------------------------------------------------------------- reading it back


def _state(text: str) -> dict[str, str]:
    """What the managed blocks say, per claim id (and the log): for telling which claims changed."""
    if not text:
        return {}
    doc = _parsed(text)
    out: dict[str, str] = {}
    for bid, blk in doc.blocks.items():
        out[bid] = "".join(doc.lines[blk.begin + 1:blk.end])
    for key, (bid, _) in TABLES.items():
        blk = doc.blocks.get(bid)
        if not blk:
            continue
        out.pop(bid)
        for line in doc.lines[blk.begin + 1:blk.end]:
            cells = _cells(_body(line))
            for claim in _claims.in_section(key):
                if len(cells) > 1 and _norm(cells[0]).startswith(_norm(claim.match)):
                    out[claim.id] = cells[-1].strip()
    return out


def _table_rows(doc: _Doc, blk: _Block) -> list[list[Token]]:
    """The inline token of each body cell of the table inside ``blk``."""
    rows: list[list[Token]] = []
    in_body = False
    for t in doc.tokens:
        if t.type == "tbody_open":
            in_body = bool(t.map) and blk.begin < t.map[0] < blk.end
        elif t.type == "tbody_close":
            in_body = False
        elif in_body and t.type == "tr_open":
            rows.append([])
        elif in_body and t.type == "inline":
            rows[-1].append(t)
    return rows


def unknowns_table(text: str) -> list[dict]:
    """The unknowns' state as a written-back blueprint shows it, one row per (unknown, engine, version).

    ``role`` is ``subject`` (the claim's own engine) or ``reference``; ``resolved`` is True only for
    a subject row whose verdict settles the claim. An unknown with no subject row gets one, with no
    verdict, so open unknowns stay visible.
    """
    doc = _parsed(text, inline=True)  # the evidence cell's link target is read from the inline parse
    labels = {label: verdict for verdict, label in _LABELS.items()} | {v: v for v in _LABELS}
    out = []
    for claim in _claims.in_section("unknowns"):
        blank = {"claim": claim.id, "unknown": claim.text, "role": _SUBJECT, "verdict": None, "resolved": False,
                 "engine": claim.subject, "engine_version": None, "model": None, "hardware": None, "date": None, "summary": None,
                 "evidence": None}
        blk = doc.blocks.get(claim.id)
        rows = _table_rows(doc, blk) if blk else []
        found = []
        for cells in rows:
            if (len(cells) != len(_ITEM_COLUMNS) or cells[0].content not in (_SUBJECT, _REFERENCE)
                    or cells[1].content not in labels):
                raise ManagedBlockError(f"managed block {claim.id!r}: a row does not read as "
                                        f"{' | '.join(_ITEM_COLUMNS)} with a known role and verdict")
            role, verdict, engine, version, model, hardware, date, said, _ = (c.content for c in cells)
            href = next((ch.attrs.get("href") for ch in cells[8].children or [] if ch.type == "link_open"), None)
            found.append(blank | {
                "role": role, "verdict": labels[verdict], "resolved": role == _SUBJECT and labels[verdict] in ANSWERS,
                "engine": engine, "engine_version": None if version == "—" else version,
                "model": None if model == "—" else model, "hardware": hardware,
                "date": date, "summary": said, "evidence": unquote(str(href)) if href else None,
            })
        if not any(r["role"] == _SUBJECT for r in found):
            out.append(blank)
        out += found
    return out


# --------------------------------------------------------------------------- the command


class ChangedError(BlueprintError):
    """The file changed while the write-back was computed; writing would lose that edit."""


def _read(path: Path, document: str = "blueprint") -> str:
    """The text of ``document`` (the blueprint, or the guide :mod:`workbench.events.guide` writes back), UTF-8."""
    try:
        raw = read_regular(path)
    except FileNotFoundError:
        raise BlueprintError(f"no {document} at {path}") from None
    except OSError as e:
        raise BlueprintError(f"{path} is not a Markdown file ({e.strerror or e}); give the {document}'s .md file") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BlueprintError(f"{path} is not UTF-8 (byte {e.start} cannot be decoded); save it as UTF-8 and "
                             "write back again (nothing was written)") from None


def _write_atomic(path: Path, text: str, expected: str | None) -> None:
    """Readers never see half a blueprint; a human's file keeps its mode. ``expected`` is the text the write-back
    was computed from (``None``: the file did not exist): read again just before the replace, so a person's edit
    made meanwhile is never overwritten."""
    now = _read(path) if path.exists() else None
    if now != expected:
        raise ChangedError(f"{path} changed while the write-back was computed; nothing was written, so the edit "
                           "is kept: run the write-back again")
    write_output(path, text, mode=path.stat().st_mode & 0o7777 if path.exists() else 0o644)


def run_writeback(blueprint: Path, finding_dirs: list[Path], mode: Mode = "write", out: Path | None = None, *,
                  items: Sequence[str] = ITEM_SECTIONS, tables: Sequence[str] = tuple(TABLES),
                  document: str = "blueprint") -> int:
    """``workbench writeback``: write (to ``out`` or in place), print a diff (dry-run) or check; the exit code.

    ``check`` returns 1 when the target differs from the write-back, naming the claims whose managed
    text changes. Corrupt finding files are reported on stderr and skipped; a findings folder that is
    missing or holds no finding, or a blueprint that lacks what the claims need, raises
    :class:`BlueprintError` before anything is written.
    """
    blueprint = Path(os.path.realpath(blueprint))  # a symlinked blueprint is written through, into its target
    source = _read(blueprint, document)
    target = Path(os.path.realpath(out)) if out else blueprint
    if mode == "write":  # before the findings are read: a target that cannot be written is said at once
        check_file_writable(target, "--out" if out else "the file to write back", "nothing was written")
    missing = [str(d) for d in finding_dirs if not Path(d).exists()]
    if missing:
        raise BlueprintError(f"no findings folder {', '.join(missing)}; nothing was written")
    found = scan(finding_dirs)
    for path, err in found.errors:
        print(f"skipping corrupt finding {path}: {err}", file=sys.stderr)
    if not found.findings:
        raise BlueprintError(f"no findings in {', '.join(map(str, finding_dirs))}; writing back nothing would wipe "
                             "every verdict, so nothing was written")
    new = writeback(source, found.findings, base=target.parent, items=items, tables=tables)
    in_place = os.path.abspath(target) == os.path.abspath(blueprint)
    existing = source if in_place else (_read(target, document) if target.exists() else None)
    current = existing or ""
    if mode == "dry-run":
        sys.stdout.writelines(difflib.unified_diff(_split_lines(current), _split_lines(new),
                                                   f"{target} (current)", f"{target} (written back)"))
        return 0
    if current == new:
        print(f"{target} is up to date with {len(found.findings)} findings")
        return 0
    # a new file is compared with what it was written back from (a blueprint without blocks: nothing to compare)
    old_state, new_state = _state(current if existing is not None else source), _state(new)
    changed = sorted(k for k in old_state.keys() | new_state.keys() if old_state.get(k) != new_state.get(k))
    what = ", ".join(changed) or "text outside managed blocks"
    if mode == "check":
        print(f"{target} is out of date with the findings; changed: {what}")
        return 1
    _write_atomic(target, new, existing)
    if not old_state:
        print(f"wrote {target} ({len(found.findings)} findings): a new write-back of {blueprint.name}, "
              f"{len(new_state)} managed blocks (nothing earlier to compare with)")
    else:
        print(f"wrote {target} ({len(found.findings)} findings); changed: {what}")
    return 0
