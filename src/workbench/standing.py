"""Which verdict stands on each claim: the one rule the report, the notebooks and the blueprint share.

Per claim and (engine, engine version) the newest finding that ran stands; a ``not-run`` one only
when nothing ran, so it never masks or poses as an answer. A finding is verified first, in the one
place that does it (:func:`workbench.settle.verify`): one that is not re-derived (edited after its run, an environment
that could not have produced it, numbers its own rows do not give, no supports, a future date, an older rule, a survey
on a behavioural claim, an exploratory parameter, an on-target claim off target) stands only where nothing settled
does, shown with its reasons, and settles nothing. A static probe's finding (one that only
reads the installed package, e.g. ``surface.contract_mapping``: symbols and parameter names exist)
never outranks a behavioural one on a shared claim, however new: existence is not behaviour. Only findings from the claim's subject
engine (:attr:`workbench.claims.Claim.subject`) can resolve it; every other engine's standing
verdict is a *reference*, shown beside the claim on its own labelled line and never counted. Version
churn is the one claim across findings: its subject's surveys of every version are compared
(:func:`version_churn`).
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Sequence

from . import cells as _cells
from . import claims as _claims
from . import settle
from .findings import Finding, model_of
from .probes import churn
from .versions import natural

ANSWERS = settle.ANSWERS  # verdicts that settle a claim, once re-derived
Found = Sequence[tuple[Path, Finding]]


@dataclass(frozen=True)
class Standing:
    """The verdict that stands on one claim for one (engine, engine version)."""

    claim: str
    verdict: str
    engine: str
    engine_version: str | None
    hardware: str | None
    created: str
    summary: str
    reason: str | None
    probe: str
    finding_id: str
    path: Path
    model: str | None = None  # None for a static survey (it runs no model)
    unsettled: tuple[str, ...] = ()  # why its verdict is not re-derived from what it recorded (settle.unsettled)
    claim_reason: str | None = None  # the finding's one-line reason for its verdict on this claim (None: not recorded)

    @property
    def date(self) -> str:
        return self.created[:10]

    @property
    def answers(self) -> bool:
        return self.verdict in ANSWERS and not self.unsettled

    @property
    def unverified(self) -> bool:
        """An answer in words only: its verdict string says one thing, and what it recorded does not re-derive it."""
        return self.verdict in ANSWERS and bool(self.unsettled)


def when(created: str) -> _dt.datetime:
    """Comparable creation time (:func:`workbench.settle.created_at`); unparseable ones sort oldest."""
    return settle.created_at(created) or _dt.datetime.min.replace(tzinfo=_dt.timezone.utc)


@lru_cache(maxsize=None)
def behavioural(probe: str) -> bool:
    """Whether ``probe`` runs the engine (False for a static survey of the installed package; an unknown
    probe name counts as behavioural, so a finding from a newer workbench is never demoted)."""
    from . import probes

    try:
        return probes.get(probe).needs_engine
    except probes.ParamError:
        return True


def _rank(s: Standing) -> tuple:
    """The rule: a verdict re-derived beats one that is not (so neither a forgery nor a superseded rule masks
    what settles); then anything that ran beats not-run; then behavioural beats static; then the newest; the id
    breaks ties."""
    return not s.unsettled, s.verdict != "not-run", behavioural(s.probe), when(s.created), s.finding_id


def standings(found: Found) -> dict[str, list[Standing]]:
    """Per claim id, the standing verdict of each (engine, engine version, model, arm), ordered by engine,
    version, model and arm. An arm (a loop benchmark's configuration of an engine, ``params["arm"]``) stands
    on its own, so each reference arm's figures sit beside the verdict. A static survey runs no model: it
    stands for its (engine, version) only where no behavioural finding does, on any model."""
    groups: dict[tuple[str, str, str | None, str | None, str], list[Standing]] = {}
    verified = settle.verify(found)
    for v in verified:
        path, f = v.path, v.finding
        model = model_of(f) if behavioural(f.probe) else None
        arm = str(f.params.get("arm") or "")
        for cid in dict.fromkeys(f.claims):
            s = Standing(cid, f.verdict_on(cid), f.engine, f.engine_version,
                         (f.environment.get("hardware") or {}).get("summary"), f.created, f.summary, f.reason,
                         f.probe, f.id, path, model, v.why(cid), f.reason_on(cid))
            groups.setdefault((cid, f.engine, f.engine_version, model, arm), []).append(s)
    stood = {k: max(v, key=_rank) for k, v in groups.items()}
    ran = {k[:3] for k, s in stood.items() if behavioural(s.probe) and s.verdict != "not-run" and not s.unsettled}
    out: dict[str, list[Standing]] = {}
    for key in sorted(stood, key=lambda k: (k[0], k[1], natural(k[2]), k[3] or "", k[4])):
        if key[3] is None and key[:3] in ran:
            continue  # a behavioural finding ran here: existence never outranks it
        out.setdefault(key[0], []).append(stood[key])
    across = version_churn(found, verified)
    if across:  # one verdict across the subject's versions replaces each version's "one survey cannot tell"
        out[across.claim] = [s for s in out.get(across.claim, []) if _cells.runs(s.engine) != across.engine] + [across]
    kept = step_function(out)
    if kept:  # the entry condition across its four gates replaces whatever cited it directly (an older loop's)
        entry = _claims.get(STEP_FUNCTION)
        out[STEP_FUNCTION] = [s for s in out.get(STEP_FUNCTION, []) if _cells.runs(s.engine) != entry.subject] + kept
    return out


STEP_FUNCTION = "entry.step_function"


def step_function(by_claim: dict[str, list[Standing]]) -> list[Standing]:
    """The entry condition as the specialization-cells blueprint states it, "keep a candidate cell only if it delivers
    at least one" of the four gates (:data:`workbench.claims.GATES`), per subject version: confirmed when any gate's
    subject verdict that settles (re-derived, on target: :mod:`workbench.settle`) is confirmed; refuted when every
    gate's is refuted; inconclusive, naming each gate's state, where the subject ran some gate and neither holds;
    nothing where the subject ran none (the claim stays unresolved, with its command)."""
    entry = _claims.get(STEP_FUNCTION)
    rows = {g: [s for s in by_claim.get(g, []) if _cells.runs(s.engine) == entry.subject] for g in _claims.GATES}
    versions = sorted({s.engine_version or "" for ss in rows.values() for s in ss if s.verdict != "not-run"}, key=natural)
    out = []
    for v in versions:
        mine = {g: [s for s in ss if (s.engine_version or "") == v] for g, ss in rows.items()}
        answers = {g: [s for s in ss if s.answers] for g, ss in mine.items()}
        won = [s for g in _claims.GATES for s in answers[g] if s.verdict == "confirmed"]
        lost = all(any(s.verdict == "refuted" for s in answers[g]) for g in _claims.GATES)
        said = "; ".join(f"{_claims.get(g).match}: {_gate_state(mine[g])}" for g in _claims.GATES)
        if won:
            verdict, summary, basis = "confirmed", f"kept: {_claims.get(won[0].claim).match} confirmed ({said})", won[0]
        elif lost:
            verdict, summary = "refuted", f"not kept: every gate refuted ({said})"
            basis = max((s for ss in answers.values() for s in ss), key=lambda s: when(s.created))
        else:
            verdict, summary = "inconclusive", f"no gate confirmed, not every gate refuted ({said})"
            basis = max((s for ss in mine.values() for s in ss if s.verdict != "not-run"), key=lambda s: when(s.created))
        out.append(Standing(STEP_FUNCTION, verdict, basis.engine, v or None, basis.hardware, basis.created, summary,
                            None, basis.probe, basis.finding_id, basis.path, basis.model, claim_reason=summary))
    return out


def _gate_state(stood: Sequence[Standing]) -> str:
    """One gate's subject state in a few words: its verdicts that settle, else what ran without settling, else
    not run."""
    settled = sorted({s.verdict for s in stood if s.answers})
    if settled:
        return "/".join(settled)
    ran = sorted({s.verdict + (" (settles nothing)" if s.unverified else "") for s in stood if s.verdict != "not-run"})
    return "/".join(ran) or "not run"


def version_churn(found: Found, verified: Sequence[settle.Verified] | None = None) -> Standing | None:
    """Version churn is a claim across releases, so no single finding answers it: the cross-version rule
    (:func:`workbench.probes.churn.churn_verdict`) over the subject engine's newest contract-mapping survey
    of each version, each verified first (:mod:`workbench.settle`; ``verified``: already done). Other engines'
    surveys stay references. None while the subject has no survey that ran. Surveys made on a test double are
    compared only where no real one exists, among themselves, and the verdict they give settles nothing (it shows
    the mechanics, never the engine's answer)."""
    subject = _claims.get(churn.CLAIM).subject
    real: dict[str, tuple[Path, Finding]] = {}
    on_double: dict[str, tuple[Path, Finding]] = {}
    for checked in verified if verified is not None else settle.verify(found):
        path, f = checked.path, checked.finding
        if (f.probe == churn.SURVEY and _cells.runs(f.engine) == subject and f.verdict != "not-run"
                and not checked.why(churn.CLAIM)):  # a forged, edited, future or superseded survey counts for nothing
            pool = on_double if (f.environment or {}).get("test_double") else real
            v = f.engine_version or "(version unknown)"
            if v not in pool or (when(f.created), f.id) > (when(pool[v][1].created), pool[v][1].id):
                pool[v] = (path, f)
    newest = real or on_double
    if not newest:
        return None
    out = churn.churn_verdict({v: churn.signature_table(f.evidence.get("rows", [])) for v, (_, f) in newest.items()})
    versions = sorted(newest, key=natural)
    path, last = max(newest.values(), key=lambda pf: (when(pf[1].created), pf[1].id))
    doubled = () if real else (f"every survey compared was made on a test double ({last.environment['test_double']}): "
                               "the comparison exercises the churn rule, never TensorRT-LLM's releases",)
    return Standing(churn.CLAIM, out.verdict, subject, " → ".join(versions),
                    (last.environment.get("hardware") or {}).get("summary"), last.created, out.summary, None,
                    last.probe, last.id, path, unsettled=doubled, claim_reason=out.summary)


@dataclass(frozen=True)
class ClaimState:
    """A claim as a reader should see it: the subject engine's state first, references apart."""

    claim: _claims.Claim
    subject: list[Standing]  # the subject engine's standing verdicts, one per version (not-run included)
    references: list[Standing]  # other engines' standing verdicts that ran (never an answer)
    command: str  # the one command that resolves the claim on a machine that has what the subject needs

    @property
    def answers(self) -> list[Standing]:
        return [s for s in self.subject if s.answers]

    @property
    def resolved(self) -> bool:
        return bool(self.answers)

    @property
    def headline(self) -> str:
        """The subject engine's state in words, e.g. "unresolved — needs tensorrt_llm on an NVIDIA GPU"."""
        about = self.claim.about
        ran = [s for s in self.subject if s.verdict != "not-run" and not s.unverified]
        if self.answers:
            return "; ".join(f"{s.verdict} on {about.name} {s.engine_version or '(version unknown)'}"
                             for s in self.answers)
        unverified = [s for s in self.subject if s.unverified]
        if unverified:
            return "unresolved — " + "; ".join(
                f"{s.verdict} on {about.name} {s.engine_version or '(version unknown)'} settles nothing: "
                f"{s.unsettled[0]}" for s in unverified)
        if ran:
            return (f"open — inconclusive on {about.name} "
                    + ", ".join(s.engine_version or "(version unknown)" for s in ran))
        return f"unresolved — needs {about.needs}"


def claim_states(found: Found, section: str | None = None) -> list[ClaimState]:
    """Every claim (of ``section``, or all), with its subject's standing and its references."""
    by_claim = standings(found)
    out = []
    for claim in (_claims.in_section(section) if section else _claims.CLAIMS.values()):
        mine = by_claim.get(claim.id, [])
        # the subject served (trtllm-serve) answers like the subject in-process (trtllm): the same engine
        subject = [s for s in mine if _cells.runs(s.engine) == claim.subject]
        references = [s for s in mine if _cells.runs(s.engine) != claim.subject and s.verdict != "not-run"]
        out.append(ClaimState(claim, subject, references, resolve_command(claim.id)))
    return out


def not_run_reasons(found: Found) -> dict[str, dict[str, list[str]]]:
    """Per engine, each distinct reason its newest not-run findings give, with the probes that gave it:
    printed once per engine, not once per claim."""
    newest: dict[tuple[str, str], Finding] = {}
    for _, f in found:
        key = (f.engine, f.probe)
        if f.verdict == "not-run" and (key not in newest or when(f.created) > when(newest[key].created)):
            newest[key] = f
    out: dict[str, dict[str, list[str]]] = {}
    for (engine, probe), f in sorted(newest.items()):
        out.setdefault(engine, {}).setdefault(f.reason or f.summary, []).append(probe)
    return out


@lru_cache(maxsize=None)
def _citing() -> dict[str, tuple[str, ...]]:
    from . import probes

    out: dict[str, list[str]] = {}
    for name in probes.names():
        for cid in probes.get(name).claims:
            out.setdefault(cid, []).append(name)
    return {k: tuple(v) for k, v in out.items()}


SUBJECT_MODEL = "HF_DIR"
"""The model a resolve command names: the subject (TensorRT-LLM) runs a Hugging Face model folder, and none ships
with the workbench, so the command names the one word to fill in."""


def resolve_command(claim_id: str) -> str:
    """The command that answers ``claim_id`` on its subject engine (the probes that cite it, run there), one shell
    line that pastes on a GPU machine with ``--model`` and ``--out`` (tests/test_resolve_commands.py parses each)."""
    claim = _claims.get(claim_id)
    if claim.resolve:  # settled by something other than the probes that cite it
        return claim.resolve
    names = _citing().get(claim_id, ())
    if not names:
        return f"no probe cites {claim_id} yet"
    return " && ".join(f"workbench probe {n} --engine {claim.subject} --model {SUBJECT_MODEL} --out findings"
                       for n in names)
