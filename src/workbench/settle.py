"""Whether a stored finding settles a claim: the one place a finding is read, verified and turned into what the rest
consumes (:class:`Verified`), its verdict re-derived, never believed from its string.

A finding is a file anyone can write. Standing (so the report, the blueprint and the gateway guide's write-back),
``workbench compare`` and ``workbench findings`` read findings only through :func:`verify` (or :func:`read`, which
scans folders first): each finding becomes a :class:`Verified`, with, per claim it speaks to, the reasons its verdict
settles nothing (none: it may settle the claim). Each rule is a row of :data:`RULES`, checked in order; every one reads
only the finding, the record its run left beside it and this workbench's declarations (the probe's rule, its version
and parameters; the claim's kind; the engine's facts):

- a finding dated in the future (beyond clock skew) is refused;
- a finding of a probe this workbench does not declare, or of another version of it, cannot be re-checked by the rule
  that wrote it: re-run it (a newer version supersedes an older one); nor can one on a claim its probe does not test,
  or one whose engine is not the engine its own fingerprint was taken on;
- it is bound to the run that wrote it: a record beside it (``run.json``'s notebook entry, the folder's ledger,
  :mod:`workbench.ledger`) lists its digest, and a file whose digest is not the recorded one was edited after its run;
- its environment could have produced it: an engine that runs only on an NVIDIA GPU needs one in its fingerprint, and
  its version must be one that engine's guard knows (both the engine's registered facts, :mod:`workbench.cells`);
- a finding made on a test double (its fingerprint names one: ``test_double``) exercises the workbench, never the
  engine, so it settles nothing, however it came out;
- a static survey (symbols exist) never settles a behavioural claim;
- a parameter not declared measurement (``Probe.measures``) moved from its default, or a cell option that is not one
  of :data:`workbench.cells.options.MEASURED`, makes the run exploratory;
- an on-target claim needs the target's GPU in the finding's own fingerprint;
- an answer (and ``not-applicable`` on the claim's subject) must be re-derived by the family's own code from what the
  finding recorded: its outcome again from its own evidence rows (:meth:`workbench.probes.Declared.from_evidence`),
  the supports it rests on holding on its own engine-read metrics (:meth:`workbench.probes.Declared.rederive`), and
  what it says agreeing with the other findings of its run (:meth:`workbench.probes.Declared.check_run`: the loop's
  gate against its arms).

What a finding's rules say is worked out once per finding content (path, id and digest) and kept, so the report's
many views of one run pay it once (:func:`forget` drops it).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

from . import cells as _cells
from . import claims as _claims
from . import ledger as _ledger
from . import probes
from .cells.options import MEASURED
from .findings import Finding, Scan, has_gpu, scan
from .versions import natural

SKEW = _dt.timedelta(minutes=10)  # clock skew between machines that share a findings folder
ANSWERS = ("confirmed", "refuted", "partial", "not-applicable")  # verdicts that settle a claim
EDITED = "edited after its run"  # the words a finding whose digest is not its run's record begins its reason with


@dataclass(frozen=True)
class Subject:
    """What one rule reads: the finding, where it was read from, the claim, the family's declaration."""

    path: Path | None
    finding: Finding
    claim: _claims.Claim
    declared: "probes.Declared | None"
    now: _dt.datetime


@dataclass(frozen=True)
class Check:
    """One row of the rule: ``why`` returns the reason the finding settles nothing on the claim, or None."""

    name: str
    why: Callable[[Subject], str | None]


def created_at(created: str) -> _dt.datetime | None:
    """A finding's creation time (a naive stamp is UTC), or None where it is not an ISO time."""
    try:
        t = _dt.datetime.fromisoformat(created)
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=_dt.timezone.utc)


def _future(s: Subject) -> str | None:
    t = created_at(s.finding.created)
    if t is None:
        return f"its date {s.finding.created!r} is not an ISO time"
    return f"it is dated {s.finding.created}, in the future" if t > s.now + SKEW else None


def _declared(s: Subject) -> str | None:
    f, c, d = s.finding, s.claim, s.declared
    if d is None:
        return f"no probe {f.probe!r} is declared here, so its rule cannot be re-checked"
    if c.id not in d.claims:
        return f"{f.probe} does not test {c.id} (it declares {', '.join(d.claims)})"
    said = (f.environment or {}).get("engine")
    if said != f.engine:
        return f"it names engine {f.engine!r}, but its own fingerprint was taken on {said!r}"
    if f.probe_version == d.version:
        return None
    newer = natural(f.probe_version) > natural(d.version)
    return (f"{f.probe} version {f.probe_version} is {'newer' if newer else 'older'} than this workbench's "
            f"{d.version}: its verdict was reached by {'a rule this workbench does not know' if newer else 'a rule since superseded'}; "
            "re-run it")


def binding(path: Path | None, f: Finding) -> tuple[str | None, str | None]:
    """Where ``f`` is bound (the record that lists its digest, in words) and why it is not (None: it is). A finding
    not read from a file (no digest: made by this process) is bound to this process."""
    if f.digest is None or path is None:
        return "this process", None
    records = _ledger.records_for(Path(path), f.id, f.attempt)
    if not records:
        return None, (f"no record of the run that wrote it lists it (neither the run's {_ledger.manifest.MANIFEST} nor "
                      f"{_ledger.LEDGER} beside it): a copied-in or hand-written file settles nothing; re-run it, or "
                      "copy its findings folder whole")
    other = next((r for r in records if r.digest != f.digest), None)  # every record must agree with the file
    if other is None:
        return records[0].where, None
    return None, f"{EDITED}: its content is not what {other.where} recorded when it was written"


def _bound(s: Subject) -> str | None:
    return binding(s.path, s.finding)[1]


def _double(s: Subject) -> str | None:
    said = (s.finding.environment or {}).get("test_double")
    return (f"it was made on a test double ({said}), which stands for {s.finding.engine} in the workbench's own tests "
            "and never answers for it" if said else None)


def _environment(s: Subject) -> str | None:
    """The machine and the engine it records could have produced it: an NVIDIA GPU for an engine that runs only on one,
    a version the engine's guard knows (a static survey runs nothing: it reads whichever release is installed, so
    version churn can compare releases the cell is not pinned to)."""
    f = s.finding
    if f.engine not in _cells.ENGINES:
        return f"engine {f.engine!r} is not one this workbench registers, so what could produce it is unknown"
    runs = _cells.runs(f.engine)
    behaviour = not isinstance(s.declared, probes.Probe) or s.declared.needs_engine
    if behaviour and _cells.needs_gpu(f.engine) and not has_gpu(f):
        hw = (f.environment.get("hardware") or {}).get("summary") or "no hardware recorded"
        return (f"{runs} runs only on an NVIDIA GPU, and its fingerprint records none ({hw}): that machine could not "
                "have produced it")
    if behaviour and _cells.knows_version(f.engine, f.engine_version) is False:
        return (f"{runs} version {f.engine_version!r} is not one its guard knows ({_cells.version_guard(f.engine)}): "
                "this workbench's cell could not have run it")
    return None


def _survey(s: Subject) -> str | None:
    static = isinstance(s.declared, probes.Probe) and not s.declared.needs_engine
    return (f"{s.finding.probe} surveys the installed package (symbols exist), and existence never settles a "
            "behavioural claim" if static and not s.claim.survey else None)


#: A cell option that puts a KV connector in the engine: what it loads counts as cached tokens (vLLM counts
#: external hits in ``num_cached_tokens``), so a probe of the engine's own cache measures the connector instead.
CONNECTOR_OPTION = "kv_transfer_config"
#: A cell option that picks the engine's KV manager (TensorRT-LLM 1.4: V2 by default, which ignores per-request
#: retention); the claims are about the manager the cell pins unless told otherwise, so only the pinned one measures.
KV_MANAGER_OPTION, PINNED_MANAGER = "kv_manager", "v1"


def _exploratory(s: Subject) -> str | None:
    f, d = s.finding, s.declared
    moved = d.exploratory(f) if d is not None else []
    declared = set(getattr(d, "measures", ()))
    given = dict(f.cell_options or {})
    if given.get(KV_MANAGER_OPTION) == PINNED_MANAGER:
        given.pop(KV_MANAGER_OPTION)  # the manager the cell pins anyway: the claim's run
    causes = []  # a cell option whose effect has words of its own, said first
    if given.get(CONNECTOR_OPTION):
        causes.append(f"the cell ran with a KV connector ({CONNECTOR_OPTION}), which loads KV from outside the engine's "
                      "own cache: its cached-token counts are not the engine's prefix cache")
    if KV_MANAGER_OPTION in given:
        causes.append(f"the cell ran the release's default KV manager ({KV_MANAGER_OPTION}={given[KV_MANAGER_OPTION]!r}), "
                      "not the one the blueprint maps its mechanisms onto (retention, the event block key, the "
                      "connector): a finding beside the claim's run, never its answer")
    options = [f"{k}={v!r}" for k, v in given.items()
               if k not in MEASURED and k not in declared and k not in (CONNECTOR_OPTION, KV_MANAGER_OPTION)]
    if moved or options:
        said = ", ".join([*moved, *(f"cell option {o}" for o in options)])
        causes.append(f"{said} builds the outcome instead of measuring it (the claim's run keeps the default; only the "
                      "parameters its probe declares measurement may move)")
    return f"exploratory: {'; '.join(causes)}" if causes else None


def _on_target(s: Subject) -> str | None:
    return None if not s.claim.on_target or has_gpu(s.finding) else \
        "an on-target claim, but the finding's hardware records no GPU"


def _rederived(s: Subject) -> str | None:
    f, c, d = s.finding, s.claim, s.declared
    if d is None:
        return None
    why = list(_evidence(d, f))
    try:
        why += d.rederive(f, c)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:  # a file shaped unlike the family's own
        why.append(f"what it recorded cannot be read by {f.probe}'s rule ({type(e).__name__}: {e})")
    return "; ".join(dict.fromkeys(why)) or None


_EVIDENCE: "OrderedDict[tuple, tuple[str, ...]]" = OrderedDict()


def _evidence(d: "probes.Declared", f: Finding) -> tuple[str, ...]:
    """The family's :meth:`~workbench.probes.Declared.check_evidence` of ``f``, once per content (memoised)."""
    key = (d.name, d.version, f.id, f.digest or _content(f))
    if key not in _EVIDENCE:
        _EVIDENCE[key] = tuple(d.check_evidence(f))
        if len(_EVIDENCE) > 4096:
            _EVIDENCE.popitem(last=False)
    return _EVIDENCE[key]


def _content(f: Finding) -> str:
    return hashlib.sha256(json.dumps(f.to_dict(), sort_keys=True, default=str).encode()).hexdigest()


RULES: tuple[Check, ...] = (
    Check("dated", _future),
    Check("declared", _declared),
    Check("bound", _bound),
    Check("double", _double),
    Check("environment", _environment),
    Check("survey", _survey),
    Check("exploratory", _exploratory),
    Check("on target", _on_target),
    Check("re-derived", _rederived),
)
ALWAYS = ("dated", "declared", "bound")  # rows that apply to every verdict: a not-run edited, from the future or an old rule


@dataclass(frozen=True)
class Verified:
    """A finding as everything downstream consumes it: where it was read from, what binds it to its run, and per claim
    it speaks to the reasons its verdict there settles nothing (none: it may settle the claim)."""

    path: Path | None
    finding: Finding
    bound: str | None  # the record that lists its digest, in words ("this process": not read from a file); None: none
    reasons: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def claims(self) -> list[str]:
        return list(dict.fromkeys([*self.finding.claims, *self.finding.claim_verdicts]))

    def why(self, claim_id: str) -> tuple[str, ...]:
        """Why its verdict on ``claim_id`` settles nothing (empty: it may settle it)."""
        return self.reasons.get(claim_id, ())

    def settles(self, claim_id: str) -> bool:
        return self.finding.verdict_on(claim_id) in ANSWERS and not self.why(claim_id)

    @property
    def answer_why(self) -> tuple[str, ...]:
        """Why the first claim on which it answers settles nothing (empty where each of its answers may settle)."""
        return next((w for c in self.claims if self.finding.verdict_on(c) in ANSWERS and (w := self.why(c))), ())

    @property
    def shown_verdict(self) -> str:
        """Its verdict as a log prints it: marked where, on one of its claims, it settles nothing."""
        return self.finding.verdict + (" (settles nothing)" if self.answer_why else "")


def _reasons(path: Path | None, f: Finding, now: _dt.datetime,
             claim_ids: Iterable[str] = ()) -> dict[str, tuple[str, ...]]:
    d = probes.declared(f.probe)
    out = {}
    for cid in dict.fromkeys([*f.claims, *f.claim_verdicts, *claim_ids]):
        try:
            claim = _claims.get(cid)
        except KeyError:
            out[cid] = (f"{cid} is not a claim this workbench knows",)
            continue
        answers = f.verdict_on(cid) in ANSWERS
        said = []
        for check in RULES:
            if answers or check.name in ALWAYS:
                why = check.why(Subject(path, f, claim, d, now))
                if why:
                    said.append(why)
        out[cid] = tuple(said)
    return out


_VERIFIED: "OrderedDict[tuple, dict[str, tuple[str, ...]]]" = OrderedDict()


def _reasons_once(path: Path | None, f: Finding, now: _dt.datetime) -> dict[str, tuple[str, ...]]:
    """:func:`_reasons`, kept per finding content and minute (a report draws one run's standing many times)."""
    key = (str(path), f.id, f.digest or _content(f), now.replace(second=0, microsecond=0))
    if key not in _VERIFIED:
        _VERIFIED[key] = _reasons(path, f, now)
        if len(_VERIFIED) > 4096:
            _VERIFIED.popitem(last=False)
    return _VERIFIED[key]


def forget() -> None:
    """Drop what :func:`verify` keeps (a test that changes the rules under it)."""
    _VERIFIED.clear()
    _EVIDENCE.clear()


def verify(found: Iterable[tuple[Path | None, Finding]], now: _dt.datetime | None = None) -> list[Verified]:
    """Every finding of ``found`` verified (in order): its rules per claim, then what its family checks across the
    findings of its run (:meth:`~workbench.probes.Declared.check_run`, e.g. the loop's gate against its arms)."""
    now = now or _dt.datetime.now(_dt.timezone.utc)
    pairs = list(found)
    out = []
    for path, f in pairs:
        where, _ = binding(path, f)
        reasons = _reasons_once(path, f, now)
        d = probes.declared(f.probe)
        answers = any(f.verdict_on(c) in ANSWERS for c in reasons)
        across = _across(d, f, pairs) if d is not None and answers else ()
        if across:
            reasons = {c: (*r, *across) if f.verdict_on(c) in ANSWERS else r for c, r in reasons.items()}
        out.append(Verified(path, f, where, reasons))
    return out


def _across(d: "probes.Declared", f: Finding, found: Sequence[tuple[Path | None, Finding]]) -> tuple[str, ...]:
    """What ``f``'s family says of it against the other findings of its run (:meth:`probes.Declared.check_run`)."""
    return tuple(d.check_run(f, found))


def verified_by_path(found: Iterable[tuple[Path | None, Finding]]) -> dict[tuple[str, str], Verified]:
    """:func:`verify`'s findings keyed by (path, id), for a view that holds (path, finding) pairs."""
    return {(str(v.path), v.finding.id): v for v in verify(found)}


@dataclass(frozen=True)
class Read:
    """Findings read from folders and verified, with what could not be read (one line each)."""

    verified: list[Verified]
    errors: list[tuple[Path, str]]

    @property
    def found(self) -> list[tuple[Path, Finding]]:
        return [(v.path, v.finding) for v in self.verified]  # type: ignore[misc]

    @property
    def scan(self) -> Scan:
        return Scan(self.found, self.errors)


def read(paths: Sequence[str | Path]) -> Read:
    """Read every finding under ``paths`` (:func:`workbench.findings.scan`) and verify it: the one entry point."""
    s = scan(paths)
    return Read(verify(s.findings), s.errors)


def unsettled(f: Finding, claim_id: str, now: _dt.datetime | None = None, path: Path | None = None) -> tuple[str, ...]:
    """Why ``f``'s verdict on ``claim_id`` settles nothing (empty: it may settle the claim); ``path``: where it was
    read from (None: made by this process)."""
    if claim_id in dict.fromkeys([*f.claims, *f.claim_verdicts]):
        return verify([(path, f)], now)[0].why(claim_id)
    return _reasons(path, f, now or _dt.datetime.now(_dt.timezone.utc), [claim_id])[claim_id]


def unsettled_answer(f: Finding, path: Path | None = None) -> tuple[str, ...]:
    """Why the first claim on which ``f`` answers settles nothing (empty where each of its answers may settle)."""
    return verify([(path, f)])[0].answer_why


def shown_verdict(f: Finding, path: Path | None = None) -> str:
    """The finding's verdict as a log prints it: marked where, on one of its claims, it settles nothing."""
    return verify([(path, f)])[0].shown_verdict


__all__ = ["ALWAYS", "ANSWERS", "CONNECTOR_OPTION", "Check", "EDITED", "KV_MANAGER_OPTION", "PINNED_MANAGER", "RULES",
           "Read", "SKEW", "Subject", "Verified", "binding", "created_at", "read", "shown_verdict", "unsettled",
           "unsettled_answer", "verified_by_path", "verify"]
