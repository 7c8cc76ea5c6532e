"""``workbench compare A B``: what changed between two runs, read from their findings, as a table to act on.

What is compared: each side's run records (``run.json``: command, commit, machine, models), its findings as
:mod:`workbench.settle` verifies them (the one place), and what its records list that is no longer there. Then, most
important first, as MLflow's compare view lays two runs side by side:

1. **The subject's claims that changed**: newly settled, no longer settled (with the reason re-derivation gives), an
   answer that changed, and an answer that appeared but settles nothing (marked, with why: a relabelled or edited
   finding is named here, never passed over).
2. **Verdicts** that stand on both sides (:mod:`workbench.standing`, the rule the report and the blueprint share) and
   flipped, each side marked where it settles nothing; what only one side has.
3. **Metrics**: deltas with their spreads (the intervals a finding records, ``TAG_ci_low``/``TAG_ci_high``): a move
   beyond the spread is a change, one inside it is noise, one without an interval is shown as a delta only.
4. **Notebook times** (``run.json``'s ``duration_s``) and **parameters** (each notebook's, the cell options) that
   differ.
5. **Across models**: where the two runs ran an engine on different models, verdicts of the same claim, engine and
   probe are still compared (labelled with both models); a metric or a time is "not comparable", with the reason.

The report's first screen uses the same comparison against the previous run in its folder (the findings no notebook of
the current manifest wrote) or against a folder named with ``--against``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from . import ledger as _ledger
from . import manifest as _manifest
from . import settle as _settle
from . import standing as _standing
from .engine import WorkbenchError
from .findings import Finding, model_of

Found = Sequence[tuple[Path, Finding]]
NOT_SETTLED = "settles nothing"


class NotARunFolder(WorkbenchError):
    """A path given as a run folder that is not one (no ``findings/``, no ``run.json``); nothing was written."""


def run_folder(out: Path, nothing: str = "nothing was written") -> Path:
    """``out`` if it is a run folder (the ``--out`` of ``workbench run``: it holds ``findings/`` or ``run.json``),
    else :class:`NotARunFolder` naming what is wrong."""
    out = Path(out)
    if not out.is_dir():
        raise NotARunFolder(f"{out} is {'a file' if out.exists() else 'not there'}: give a run folder, the --out of "
                            f"`workbench run` ({nothing})")
    if not (out / "findings").is_dir() and not (out / _manifest.MANIFEST).is_file():
        raise NotARunFolder(f"{out} is not a run folder: it holds neither findings/ nor {_manifest.MANIFEST}; give the "
                            f"--out of `workbench run` ({nothing})")
    return out


def _settles(s: _standing.Standing) -> str:
    """A standing's verdict, marked where it settles nothing."""
    return s.verdict + (f" ({NOT_SETTLED})" if s.verdict in _settle.ANSWERS and s.unsettled else "")


@dataclass(frozen=True)
class ClaimChange:
    """A claim of the subject engine whose state changed: ``kind`` is ``settled`` (newly), ``unsettled`` (no longer),
    ``changed`` (another answer), or ``unverified`` (an answer appeared that settles nothing: ``why`` says why)."""

    claim: str
    kind: str
    before: str
    after: str
    why: str | None = None

    MARKS = {"settled": "+ settled", "unsettled": "- no longer settled", "changed": "~ answer changed",
             "unverified": "! answered, settles nothing"}

    def line(self) -> str:
        tail = f" ({self.why})" if self.why else ""
        return f"{self.MARKS[self.kind]}: {self.claim}: {self.before} → {self.after}{tail}"


@dataclass(frozen=True)
class Flip:
    """A claim's standing verdict for one engine, version, model and probe that differs between the two runs.
    ``model`` names both models where it was compared across them ("A | B")."""

    claim: str
    engine: str
    engine_version: str | None
    model: str | None
    probe: str
    before: str
    after: str
    reason: str | None  # the after side's reason for its verdict on the claim
    settled_before: bool = True  # each side's verdict settles (or is not an answer); False: marked "settles nothing"
    settled_after: bool = True
    why_after: str | None = None  # why the after side settles nothing (re-derivation's first reason)

    def line(self) -> str:
        where = " · ".join(x for x in (self.engine, self.engine_version, self.model, self.probe) if x)
        before = self.before + ("" if self.settled_before else f" ({NOT_SETTLED})")
        after = self.after + ("" if self.settled_after else f" ({NOT_SETTLED}: {self.why_after})")
        return f"{self.claim} [{where}]: {before} → {after}" + (f" ({self.reason})" if self.reason else "")


@dataclass(frozen=True)
class Shift:
    """A metric of one probe, engine and model that moved beyond its spread: the two intervals do not overlap."""

    probe: str
    engine: str
    model: str | None
    metric: str
    before: tuple[float, float, float]  # value, low, high
    after: tuple[float, float, float]

    def line(self) -> str:
        (b, bl, bh), (a, al, ah) = self.before, self.after
        return (f"{self.metric} [{self.engine} · {self.model} · {self.probe}]: {b:.4g} [{bl:.4g}, {bh:.4g}] → "
                f"{a:.4g} [{al:.4g}, {ah:.4g}]")


@dataclass(frozen=True)
class Delta:
    """A metric both runs recorded (same probe, engine, model) that differs: its two values, their intervals where
    recorded, and whether the move is beyond the spread (``beyond``, ``within``, or ``no spread recorded``)."""

    probe: str
    engine: str
    model: str | None
    metric: str
    before: float
    after: float
    spread_before: tuple[float, float] | None
    spread_after: tuple[float, float] | None

    @property
    def judged(self) -> str:
        if self.spread_before is None or self.spread_after is None:
            return "no spread recorded"
        (bl, bh), (al, ah) = self.spread_before, self.spread_after
        return "beyond its spread" if al > bh or ah < bl else "within its spread"


@dataclass(frozen=True)
class Apart:
    """Something only one of the runs has, or that cannot be compared across them, and why."""

    what: str
    side: str  # "A", "B", or "both" (not comparable)
    why: str


@dataclass(frozen=True)
class SideInfo:
    """What one side of the comparison is: its folder, its runs' records, what was read and what is missing."""

    folder: str
    runs: tuple[_manifest.RunRecord, ...] = ()
    findings: int = 0
    unreadable: tuple[tuple[str, str], ...] = ()  # (file, why)
    missing: tuple[str, ...] = ()  # finding ids a record lists that the folder no longer holds
    durations: Mapping[str, float] = field(default_factory=dict)  # notebook -> seconds
    parameters: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # notebook -> its parameters

    def lines(self, side: str) -> list[str]:
        out = [f"{side} = {self.folder}: {self.findings} finding(s) read"]
        for r in self.runs:
            models = "; ".join(f"{e}={', '.join(ms)}" for e, ms in r.models.items())
            out.append(f"    run {r.id} · commit {r.commit or 'unknown'} · {r.machine.cpu} ({r.machine.cores} cores; "
                       f"{', '.join(r.machine.gpus) or 'no GPU'}) · {models} · started {r.started}")
        if self.unreadable:
            out.append(f"    ! {len(self.unreadable)} finding file(s) could not be read, so they are not compared: "
                       + "; ".join(f"{p} ({w})" for p, w in self.unreadable) + " (fix or remove them)")
        if self.missing:
            out.append(f"    ! {len(self.missing)} finding(s) its run records list are no longer in the folder, so they "
                       f"are not compared: {', '.join(self.missing)} (restore them from a copy, or re-run)")
        return out


@dataclass(frozen=True)
class Comparison:
    flips: tuple[Flip, ...]
    shifts: tuple[Shift, ...]
    compared: int  # standing verdicts present in both runs
    claims: tuple[ClaimChange, ...] = ()  # the subject's claims that changed, most important first
    deltas: tuple[Delta, ...] = ()
    only: tuple[Apart, ...] = ()  # what only one side has, and what cannot be compared
    across: tuple[Flip, ...] = ()  # verdicts compared across two models (each Flip's model is "A | B")
    across_compared: int = 0
    sides: tuple[SideInfo, SideInfo] | None = None
    params: tuple[tuple[str, str, str, str], ...] = ()  # (notebook, parameter, A, B) that differ
    times: tuple[tuple[str, float, float], ...] = ()  # (notebook, A s, B s) of notebooks both ran

    @property
    def dropped(self) -> int:
        """Findings that could not be compared because they could not be read or are gone (both sides)."""
        return sum(len(s.unreadable) + len(s.missing) for s in self.sides or ())

    def head(self) -> str:
        if not self.compared and not self.across_compared:
            return "nothing to compare: no claim, engine, version and model stands in both runs"
        said = (f"{len(self.flips)} of {self.compared} verdicts flipped; {len(self.shifts)} metric(s) moved beyond "
                "their spread") if self.compared else "no verdict stands in both runs on the same model"
        if self.across_compared:
            said += f"; across models, {len(self.across)} of {self.across_compared} verdicts differ"
        if self.dropped:
            said += f"; {self.dropped} finding(s) not compared (unreadable or gone: see below)"
        return said

    def lines(self) -> list[str]:
        out = [self.head()]
        if self.claims:
            out += ["", "the subject's claims that changed:", *(f"  {c.line()}" for c in self.claims)]
        out += [f"  flipped: {f.line()}" for f in self.flips]
        out += [f"  across models: {f.line()}" for f in self.across]
        out += [f"  moved: {s.line()}" for s in self.shifts]
        if self.sides:
            out += ["", "compared:", *self.sides[0].lines("A"), *self.sides[1].lines("B")]
        if self.only:
            out += ["", "only in one run, or not comparable:"]
            out += _table([("A" if a.side == "A" else "B" if a.side == "B" else "—", a.what, a.why) for a in self.only],
                           ("side", "what", "why"))
        if self.deltas:
            shown = [d for d in self.deltas if d.judged != "within its spread"]
            out += ["", f"metrics that differ ({len(self.deltas)}; {len(self.deltas) - len(shown)} within their spread, "
                        "not listed):"]
            out += _table([(d.metric, f"{d.engine} · {d.model or '—'} · {d.probe}", _num(d.before, d.spread_before),
                            _num(d.after, d.spread_after), f"{d.after - d.before:+.4g}", d.judged) for d in shown],
                          ("metric", "where", "A", "B", "Δ", "spread"))
        if self.times:
            out += ["", "notebook times (one run each: no spread; a shared machine's time is noisy):"]
            out += _table([(n, f"{a:.1f} s", f"{b:.1f} s", f"{b - a:+.1f} s") for n, a, b in self.times],
                          ("notebook", "A", "B", "Δ"))
        if self.params:
            out += ["", "parameters that differ:"]
            out += _table(list(self.params), ("notebook", "parameter", "A", "B"))
        return out


def _num(v: float, spread: tuple[float, float] | None) -> str:
    return f"{v:.4g}" + (f" [{spread[0]:.4g}, {spread[1]:.4g}]" if spread else "")


def _table(rows: Sequence[Sequence[Any]], heads: Sequence[str]) -> list[str]:
    """Rows as aligned text columns under their heads (the last column unpadded)."""
    cells = [[str(h) for h in heads], *[[str(c) for c in r] for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(heads))]
    fmt = lambda r: "  " + "  ".join(c.ljust(w) for c, w in zip(r[:-1], widths)) + "  " + r[-1]  # noqa: E731
    return [fmt(cells[0]), "  " + "  ".join("-" * w for w in widths), *(fmt(r) for r in cells[1:])]


def _stood(found: Found) -> dict[tuple, _standing.Standing]:
    return {(s.claim, s.engine, s.engine_version, s.model, s.probe): s
            for ss in _standing.standings(found).values() for s in ss if s.verdict != "not-run"}


def _spreads(f: Finding) -> dict[str, tuple[float, float, float]]:
    """Each metric recorded with an interval: ``TAG`` (or the one metric ``TAG_…`` beside ``TAG_ci_low``) → value,
    low, high."""
    out = {}
    for tag in f.metrics:
        if not tag.endswith("_ci_low"):
            continue
        base = tag[: -len("_ci_low")]
        values = [base] if base in f.metrics else [t for t in f.metrics if t.startswith(base + "_")
                                                   and not t.startswith(base + "_ci_")]
        v, low, high = (f.metric(values[0]) if len(values) == 1 else None), f.metric(tag), f.metric(base + "_ci_high")
        if all(_number(x) for x in (v, low, high)):
            out[values[0]] = (float(v), float(low), float(high))
    return out


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _latest(found: Found) -> dict[tuple, Finding]:
    best: dict[tuple, Finding] = {}
    for _, f in found:
        key = (f.probe, f.engine, model_of(f))
        if f.verdict != "not-run" and (key not in best or (f.created, f.id) > (best[key].created, best[key].id)):
            best[key] = f
    return best


def _deltas(fb: dict[tuple, Finding], fa: dict[tuple, Finding]) -> list[Delta]:
    out = []
    for key in sorted(set(fb) & set(fa), key=lambda k: tuple(str(x) for x in k)):
        b, a = fb[key], fa[key]
        sb, sa = _spreads(b), _spreads(a)
        for tag in sorted(set(b.metrics) & set(a.metrics)):
            x, y = b.metric(tag), a.metric(tag)
            if tag.endswith(("_ci_low", "_ci_high")) or not (_number(x) and _number(y)) or x == y:
                continue
            out.append(Delta(*key, tag, float(x), float(y), sb[tag][1:] if tag in sb else None,
                             sa[tag][1:] if tag in sa else None))
    return out


def _claim_changes(before: Found, after: Found) -> list[ClaimChange]:
    """Each claim whose subject's state changed, most important first: newly settled, no longer settled, an answer
    that appeared but settles nothing, then answers that changed."""
    b = {st.claim.id: st for st in _standing.claim_states(before)}
    out = []
    for st in _standing.claim_states(after):
        was = b.get(st.claim.id)
        old = {(s.verdict, s.engine_version) for s in was.answers} if was else set()
        new = {(s.verdict, s.engine_version) for s in st.answers}
        old_said = was.headline if was else "no finding"
        if new and not old:
            out.append(ClaimChange(st.claim.id, "settled", old_said, st.headline))
        elif old and not new:
            why = next((s.unsettled[0] for s in st.subject if s.unverified), None)
            out.append(ClaimChange(st.claim.id, "unsettled", old_said, st.headline, why))
        elif old != new:
            out.append(ClaimChange(st.claim.id, "changed", old_said, st.headline))
        else:
            seen = {(s.verdict, s.engine_version, s.finding_id) for s in (was.subject if was else []) if s.unverified}
            fresh = [s for s in st.subject if s.unverified and (s.verdict, s.engine_version, s.finding_id) not in seen]
            if fresh:
                s = fresh[0]
                out.append(ClaimChange(st.claim.id, "unverified", old_said,
                                       f"{s.verdict} on {st.claim.about.name} {s.engine_version or '(version unknown)'}",
                                       f"{NOT_SETTLED}: {s.unsettled[0]}"))
    order = {"settled": 0, "unsettled": 1, "unverified": 2, "changed": 3}
    return sorted(out, key=lambda c: order[c.kind])


def _flip(k: tuple, b: _standing.Standing, a: _standing.Standing, model: str | None) -> Flip:
    return Flip(k[0], k[1], k[2], model, k[-1], b.verdict, a.verdict, a.claim_reason,
                not (b.verdict in _settle.ANSWERS and b.unsettled), not (a.verdict in _settle.ANSWERS and a.unsettled),
                a.unsettled[0] if a.unsettled else None)


def _changed(b: _standing.Standing, a: _standing.Standing) -> bool:
    """A flip: another verdict, or the same answer now settling where it did not (or the other way)."""
    return b.verdict != a.verdict or bool(b.unsettled) != bool(a.unsettled) and a.verdict in _settle.ANSWERS


def _models(found: Found) -> dict[str, set[str]]:
    """Per engine, the models its findings that ran were taken on (their resolved names, as standing keys them)."""
    out: dict[str, set[str]] = {}
    for _, f in found:
        if f.verdict != "not-run" and _standing.behavioural(f.probe):
            out.setdefault(f.engine, set()).add(model_of(f))
    return out


def _specs(found: Found, engine: str) -> str:
    """The models ``engine`` ran in ``found``, as the runs were given them (``synthetic:tiny``), for a reason."""
    return ", ".join(sorted({str(f.params.get("model") or model_of(f)) for _, f in found
                             if f.engine == engine and f.verdict != "not-run" and _standing.behavioural(f.probe)}))


def compare_found(before: Found, after: Found, sides: tuple[SideInfo, SideInfo] | None = None,
                  runs: tuple[_manifest.Manifest, _manifest.Manifest] | None = None) -> Comparison:
    """What changed from ``before`` to ``after``: the subject's claims that changed, verdicts that flipped where both
    stand (across models too), what only one side has, metric deltas with their spreads; with ``runs`` (each side's
    manifest) the notebooks' times and parameters."""
    b, a = _stood(before), _stood(after)
    both = sorted(set(b) & set(a), key=lambda k: tuple(str(x) for x in k))
    flips = tuple(_flip(k, b[k], a[k], k[3]) for k in both if _changed(b[k], a[k]))
    across, across_n, paired, apart = [], 0, set(), []
    mb, ma = _models(before), _models(after)
    for engine in sorted(set(mb) & set(ma)):
        if mb[engine] == ma[engine]:
            continue
        x = {(k[0], k[1], k[2], k[4]): (k, s) for k, s in b.items() if k[1] == engine and k[3] not in ma[engine]}
        y = {(k[0], k[1], k[2], k[4]): (k, s) for k, s in a.items() if k[1] == engine and k[3] not in mb[engine]}
        for key in sorted(set(x) & set(y), key=lambda k: tuple(str(v) for v in k)):
            (kb, sb), (ka, sa) = x[key], y[key]
            across_n += 1
            paired |= {kb, ka}
            if _changed(sb, sa):
                across.append(_flip(key, sb, sa, f"{kb[3]} | {ka[3]}"))
        apart.append(Apart(f"{engine}'s metrics and times", "both",
                           f"not comparable: it ran {_specs(before, engine)} in A and {_specs(after, engine)} in B "
                           "(timings and token counts depend on the model); its verdicts are compared across the "
                           "models"))
    only = [Apart(f"{k[0]} [{' · '.join(str(x) for x in k[1:] if x)}]: {_settles(s)}", name,
                  f"no verdict stands for it in run {'B' if name == 'A' else 'A'}")
            for name, mine, other in (("A", b, a), ("B", a, b))
            for k, s in sorted(mine.items(), key=lambda kv: tuple(str(x) for x in kv[0]))
            if k not in other and k not in paired] + apart
    fb, fa = _latest(before), _latest(after)
    shifts = []
    for key in sorted(set(fb) & set(fa), key=lambda k: tuple(str(x) for x in k)):
        sb, sa = _spreads(fb[key]), _spreads(fa[key])
        shifts += [Shift(*key, t, sb[t], sa[t]) for t in sorted(set(sb) & set(sa))
                   if sa[t][1] > sb[t][2] or sa[t][2] < sb[t][1]]
    times, params = _runs(runs, mb, ma) if runs else ((), ())
    return Comparison(flips, tuple(shifts), len(both), tuple(_claim_changes(before, after)), tuple(_deltas(fb, fa)),
                      tuple(only), tuple(across), across_n, sides, params, times)


def _runs(runs: tuple[_manifest.Manifest, _manifest.Manifest], mb: dict[str, set[str]],
          ma: dict[str, set[str]]) -> tuple[tuple, tuple]:
    """Notebook times both runs recorded (an engine whose model differs: not comparable, said apart), and every
    notebook parameter that differs."""
    b, a = (m.notebooks for m in runs)
    moved = {e for e in set(mb) & set(ma) if mb[e] != ma[e]}
    times = tuple((k, b[k].duration_s, a[k].duration_s) for k in sorted(set(b) & set(a))
                  if b[k].duration_s is not None and a[k].duration_s is not None
                  and b[k].parameters.get("engine") not in moved)
    params = []
    for k in sorted(set(b) | set(a)):
        pb, pa = (b[k].parameters if k in b else None), (a[k].parameters if k in a else None)
        if pb is None or pa is None:
            params.append((k, "(the notebook)", "ran" if pb is not None else "did not run",
                           "ran" if pa is not None else "did not run"))
            continue
        params += [(k, p, _shown(pb.get(p, "(unset)")), _shown(pa.get(p, "(unset)")))
                   for p in sorted(set(pb) | set(pa)) if p != "out" and pb.get(p) != pa.get(p)]
    return times, tuple(params)


def _shown(v: Any) -> str:
    text = str(v)
    return text if len(text) <= 60 else text[:57] + "…"


def scanned(out: Path) -> Found:
    return _settle.read([out / "findings"]).found if (out / "findings").is_dir() else []


def side(out: Path) -> tuple[Found, SideInfo, _manifest.Manifest]:
    """Run folder ``out`` read for a comparison: its findings, what it is (its run records), and what its records list
    that could not be read or is no longer there."""
    m = _manifest.load(out)
    read = _settle.read([out / "findings"]) if (out / "findings").is_dir() else _settle.Read([], [])
    have = {f.id for _, f in read.found}
    recorded = set(_ledger.ids(out / "findings")) | {i for n in m.notebooks.values() for i in (n.findings or {})}
    moved = {p.stem for p in (out / "superseded").rglob("*.json")} if (out / "superseded").is_dir() else set()
    unread = {Path(p).stem for p, _ in read.errors}
    missing = tuple(sorted(recorded - have - moved - unread))
    info = SideInfo(str(out), tuple(m.runs), len(read.verified), tuple((str(p), e) for p, e in read.errors), missing)
    return read.found, info, m


def compare(a: Path, b: Path) -> Comparison:
    """Run folder ``a`` (before) against ``b`` (after); either not a run folder is :class:`NotARunFolder`."""
    fa, ia, ma = side(run_folder(a, "nothing was compared"))
    fb, ib, mb = side(run_folder(b, "nothing was compared"))
    return compare_found(fa, fb, (ia, ib), (ma, mb))


def previous(found: Found, m: _manifest.Manifest | None) -> Found:
    """The previous run in a folder: the findings that no notebook's current attempt (in ``run.json``) wrote (none
    without a manifest: then nothing tells this run from an earlier one)."""
    current = {n.attempt for n in (m.notebooks.values() if m else []) if n.attempt}
    return [(p, f) for p, f in found if f.attempt not in current] if current else []


__all__ = ["Apart", "ClaimChange", "Comparison", "Delta", "Flip", "NotARunFolder", "Shift", "SideInfo", "compare",
           "compare_found", "previous", "run_folder", "scanned", "side"]
