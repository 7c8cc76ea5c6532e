"""What a researcher reads first, and what each finding's card says beyond its verdict: the report's words.

The report (:mod:`workbench.report`) decides nothing here: which verdict stands and whether it settles is
:mod:`workbench.standing`'s (and :mod:`workbench.settle`'s); this module only says it.

- :func:`established`: the run's established findings as sentences, each linked to its finding's card: the answers
  that stand and settle (re-derived), the claims' subject first, then each reference engine's, the most telling
  verdicts first (confirmed and refuted, then partial, then the mechanism's absence);
- :func:`subject_line`: the subject engine's state in one sentence (what the count of claims resolved means);
- :func:`engine_tallies`: each engine's standing verdicts apart (never summed across engines: a reference's verdict
  is no answer on the subject's claim);
- :func:`rerun_command` and :func:`shown_params`: what a card gives to run its finding again;
- :func:`first_sentence`: a reason cut at a sentence's end, never inside one; :func:`first_clause`: its lead, before
  its evidence, for a sentence of the first screen.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from . import claims as _claims
from . import standing as _standing
from .findings import Finding

if TYPE_CHECKING:
    from .manifest import NotebookRun

Found = _standing.Found
TELLING = {"confirmed": 0, "refuted": 0, "partial": 1, "not-applicable": 2}  # the order sentences come in
SHOWN = 4  # established sentences on the first screen before "and N more"


@dataclass(frozen=True)
class Answer:
    """One engine's standing answer on a claim: who (engine, version, model), the verdict, its reason and the
    anchor of its finding's card."""

    who: str
    verdict: str
    reason: str
    href: str
    subject: bool


@dataclass(frozen=True)
class Established:
    """A claim on which this run established something: the answers that stand and settle, subject first."""

    claim: _claims.Claim
    answers: tuple[Answer, ...]

    @property
    def rank(self) -> tuple:
        return (not any(a.subject for a in self.answers), min(TELLING.get(a.verdict, 3) for a in self.answers))


def who(s: _standing.Standing) -> str:
    """An engine as a sentence names it: engine, version, and the model it ran."""
    return f"{s.engine} {s.engine_version or '(version unknown)'}" + (f" on {s.model}" if s.model else "")


def first_sentence(text: str | None, limit: int = 220) -> str:
    """``text``'s first sentence (to its first ". " before a capital, beyond a short lead, or its end), whole: cut at a
    word with " …" only where one sentence runs past ``limit`` characters."""
    text = " ".join((text or "").split())
    m = re.search(r"(?<=[a-z0-9)%\]])(?<!e\.g)(?<!i\.e)(?<! vs)\. (?=[A-Z(])", text[40:])
    head = text[:40 + m.start() + 1] if m else text
    if len(head) <= limit:
        return head
    cut = head[:limit].rsplit(" ", 1)[0]
    return cut.rstrip(",;:") + " …"


def first_clause(text: str | None, limit: int = 170) -> tuple[str, bool]:
    """``text``'s lead: up to its first ": ", "; " or sentence end after a short lead (what a rule's reason says
    before its evidence), and whether anything follows it (the card gives the rest)."""
    text = " ".join((text or "").split())
    m = re.search(r"(?<!e\.g)(?<!i\.e)(?: —|[:;]| \(|\.(?= [A-Z(])) ", text[30:])
    head = (text[:30 + m.start()] if m else text).rstrip(".,")
    if head.count("(") > head.count(")"):  # cut inside a parenthesis: the lead ends before it opened
        head = head[:head.rfind("(")].rstrip(" ,;:")
    if len(head) > limit:
        head = head[:limit].rsplit(" ", 1)[0].rstrip(",;:")
    return head, len(head) < len(text.rstrip("."))


def established(found: Found, card: Any) -> list[Established]:
    """Per claim, the answers that stand and settle (:attr:`workbench.standing.Standing.answers`), most telling
    first: the subject's, then the references'. ``card`` gives a finding id's card anchor."""
    out = []
    for st in _standing.claim_states(found):
        answers = [Answer(who(s), s.verdict, s.claim_reason or s.summary, f"#{card(s.finding_id)}", True)
                   for s in st.answers]
        answers += [Answer(who(s), s.verdict, s.claim_reason or s.summary, f"#{card(s.finding_id)}", False)
                    for s in st.references if s.answers]
        if answers:
            answers.sort(key=lambda a: (not a.subject, TELLING.get(a.verdict, 3)))
            out.append(Established(st.claim, tuple(answers)))
    return sorted(out, key=lambda e: e.rank)


def subject_line(found: Found) -> str:
    """The subject engine's state, once: how many claims it settled, and otherwise what it needs."""
    states = _standing.claim_states(found)
    by_subject: dict[str, list[_standing.ClaimState]] = {}
    for st in states:
        by_subject.setdefault(st.claim.about.name, []).append(st)
    said = []
    for name, sts in by_subject.items():
        resolved = sum(st.resolved for st in sts)
        ran = {s.engine_version or "(version unknown)" for st in sts for s in st.subject if s.verdict != "not-run"}
        if resolved:
            said.append(f"{name}, the claims' subject, settled {resolved} of them here")
        elif ran:
            said.append(f"{name}, the claims' subject, ran here ({', '.join(sorted(ran))}) but settled none")
        else:
            said.append(f"{name}, the claims' subject, did not run here (each of its claims needs "
                        f"{sts[0].claim.about.needs})")
    return "; ".join(said) + ": what the reference engines establish below is about each of them, not about " + \
        " or ".join(by_subject) + "."


def engine_tallies(matrix: Any) -> list[tuple[str, bool, tuple[tuple[str, int], ...]]]:
    """Per engine of the verdict matrix (subject first), whether it is a claims' subject and its standing verdicts
    that ran, counted per verdict: each engine apart, never summed across engines."""
    from . import cells

    subjects = {c.subject for c in _claims.CLAIMS.values()}
    out = []
    for i, engine in enumerate(matrix.engines):
        counts: dict[str, int] = {}
        for row in matrix.rows:
            for b in row.cells[i]:
                if b.verdict != "not-run":
                    counts[b.verdict] = counts.get(b.verdict, 0) + b.count
        if counts:
            out.append((engine, cells.runs(engine) in subjects, tuple(sorted(counts.items()))))
    return out


# --------------------------------------------------------------------------- a card's parameters and command


def _shown(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def shown_params(f: Finding) -> list[tuple[str, str, bool]]:
    """The finding's parameters as (name, value, differs from the probe's default), the model first; a source that
    is no probe (the loop, the eval table) has no defaults to tell."""
    from . import probes

    try:
        defaults = {p["name"]: p["default"] for p in probes.describe_params(f.probe)}
    except probes.ParamError:
        defaults = {}
    params = dict(f.params or {})
    model = params.pop("model", None)
    out = [("model", str(model), False)] if model is not None else []
    out += [(k, _shown(v), k in defaults and _shown(defaults[k]) != _shown(v)) for k, v in sorted(params.items())]
    return out


def rerun_command(f: Finding, notebook: NotebookRun | None = None) -> str | None:
    """One shell line that runs ``f``'s experiment again: ``workbench probe`` with its engine, model, every parameter
    that is not its probe's default and its cell options; for what no probe writes (the loop, the eval table), the
    ``workbench run`` of the notebook that wrote it (``notebook``, its manifest entry); None where neither is known."""
    from . import probes

    try:
        defaults = {p["name"]: _shown(p["default"]) for p in probes.describe_params(f.probe)}
    except probes.ParamError:
        return _notebook_command(notebook)
    params = dict(f.params or {})
    model = params.pop("model", None)
    words = ["workbench", "probe", f.probe, "--engine", f.engine]
    if model is not None and probes.get(f.probe).needs_engine:
        words += ["--model", str(model)]
    words += [w for k, v in sorted(params.items()) if k in defaults and _shown(v) != defaults[k]
              for w in ("-p", f"{k}={_shown(v)}")]
    words += [w for k, v in sorted((f.cell_options or {}).items()) for w in ("-c", f"{k}={_option(v)}")]
    return shlex.join([*words, "--out", "findings"])


def _option(value: Any) -> str:
    import json

    return value if isinstance(value, str) else json.dumps(value)


def _notebook_command(n: NotebookRun | None) -> str | None:
    if n is None or not n.parameters:
        return None
    p: Mapping[str, Any] = n.parameters
    words = ["workbench", "run", "--out", "RUN", "--only", n.name.rsplit("/", 1)[-1]]
    words += [w for k in ("engine", "model") if k in p for w in (f"--{k}", str(p[k]))]
    words += [w for k, v in sorted(p.items()) if k not in ("engine", "model", "out") for w in ("-p", f"{k}={_shown(v)}")]
    return shlex.join(words)


def summary_repeats(f: Finding, reasons: Sequence[str]) -> bool:
    """Whether the finding's summary only repeats what its claim rows already say (then a card shows it once)."""
    said = " ".join(f.summary.split())
    return any(" ".join((r or "").split()) == said for r in reasons)
