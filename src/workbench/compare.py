"""``workbench compare A B``: what changed between two runs, read from their findings.

Two things change between runs: a verdict that stands on a claim (:mod:`workbench.standing`, the rule the report
and the blueprint share) flips, or a metric moves by more than its spread (the intervals a finding records with
it, ``TAG_ci_low``/``TAG_ci_high``, do not overlap). A move inside the spread is noise and is not reported. The
report's first screen uses the same comparison against the previous run in its folder (the findings no notebook of
the current manifest wrote) or against a folder named with ``--against``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from . import findings as _findings
from . import manifest as _manifest
from . import standing as _standing
from .engine import WorkbenchError
from .findings import Finding

Found = Sequence[tuple[Path, Finding]]


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


@dataclass(frozen=True)
class Flip:
    """A claim's standing verdict for one engine, version, model and probe that differs between the two runs."""

    claim: str
    engine: str
    engine_version: str | None
    model: str | None
    probe: str
    before: str
    after: str
    reason: str | None  # the after side's reason for its verdict on the claim

    def line(self) -> str:
        where = " · ".join(x for x in (self.engine, self.engine_version, self.model, self.probe) if x)
        return f"{self.claim} [{where}]: {self.before} → {self.after}" + (f" ({self.reason})" if self.reason else "")


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
class Comparison:
    flips: tuple[Flip, ...]
    shifts: tuple[Shift, ...]
    compared: int  # standing verdicts present in both runs

    def lines(self) -> list[str]:
        if not self.compared:
            return ["nothing to compare: no claim, engine, version and model stands in both runs"]
        head = (f"{len(self.flips)} of {self.compared} verdicts flipped; {len(self.shifts)} metric(s) moved beyond "
                "their spread")
        return [head, *(f"  flipped: {f.line()}" for f in self.flips), *(f"  moved: {s.line()}" for s in self.shifts)]


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
        if all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (v, low, high)):
            out[values[0]] = (float(v), float(low), float(high))
    return out


def _latest(found: Found) -> dict[tuple, Finding]:
    best: dict[tuple, Finding] = {}
    for _, f in found:
        key = (f.probe, f.engine, _findings.model_of(f))
        if f.verdict != "not-run" and (key not in best or (f.created, f.id) > (best[key].created, best[key].id)):
            best[key] = f
    return best


def compare_found(before: Found, after: Found) -> Comparison:
    """What changed from ``before`` to ``after``: verdicts that flipped where both stand, metrics whose intervals
    no longer overlap."""
    b, a = _stood(before), _stood(after)
    both = sorted(set(b) & set(a), key=lambda k: tuple(str(x) for x in k))
    flips = tuple(Flip(*k, b[k].verdict, a[k].verdict, a[k].claim_reason) for k in both if b[k].verdict != a[k].verdict)
    fb, fa = _latest(before), _latest(after)
    shifts = []
    for key in sorted(set(fb) & set(fa), key=lambda k: tuple(str(x) for x in k)):
        sb, sa = _spreads(fb[key]), _spreads(fa[key])
        shifts += [Shift(*key, t, sb[t], sa[t]) for t in sorted(set(sb) & set(sa))
                   if sa[t][1] > sb[t][2] or sa[t][2] < sb[t][1]]
    return Comparison(flips, tuple(shifts), len(both))


def scanned(out: Path) -> Found:
    return _findings.scan([out / "findings"]).findings if (out / "findings").is_dir() else []


def compare(a: Path, b: Path) -> Comparison:
    """Run folder ``a`` (before) against ``b`` (after); either not a run folder is :class:`NotARunFolder`."""
    return compare_found(scanned(run_folder(a, "nothing was compared")), scanned(run_folder(b, "nothing was compared")))


def previous(found: Found, m: _manifest.Manifest | None) -> Found:
    """The previous run in a folder: the findings that no notebook's current attempt (in ``run.json``) wrote (none
    without a manifest: then nothing tells this run from an earlier one)."""
    current = {n.attempt for n in (m.notebooks.values() if m else []) if n.attempt}
    return [(p, f) for p, f in found if f.attempt not in current] if current else []
