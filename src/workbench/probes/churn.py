"""``risk.version_churn``: the one rule across findings. One contract-mapping survey cannot say whether the
API changed between releases; comparing the signature tables of the subject's surveys of each release can.
:mod:`workbench.standing` runs it over the findings, :mod:`workbench.probes.contract_mapping` over one survey.
"""

from __future__ import annotations

from .. import claims
from ..versions import natural
from . import Outcome

CLAIM = "risk.version_churn"
SURVEY = "surface.contract_mapping"  # the probe whose findings carry the signature tables


def signature_table(rows: list[dict]) -> dict[str, dict] | None:
    """The per-entry-point signatures a TensorRT-LLM survey recorded (its guard rows), keyed by symbol and
    feature; None when it recorded none (another engine, or a survey from before they were recorded)."""
    guard = [r for r in rows if "guard" in r]
    if not guard or any("signature" not in r for r in guard):
        return None
    return {f"{r['guard']} [{r['feature']}]": r["signature"] for r in guard}


def signature_changes(old: dict[str, dict], new: dict[str, dict]) -> tuple[list[str], list[str]]:
    """What changed from ``old`` to ``new`` in what both surveys checked, and what only one of them checked
    (a change of the workbench's own table, not of the engine, so never counted as churn)."""
    changes, apart = [], []
    for key in sorted(old.keys() | new.keys()):
        a, b = old.get(key), new.get(key)
        if a is None or b is None:
            apart.append(f"{key} (checked in one survey only)")
            continue
        if a["at"] != b["at"]:
            changes.append(f"{key}: found at {b['at'] or 'nowhere'}, was {a['at'] or 'nowhere'}")
        if a["at"] is None or b["at"] is None:
            continue
        for was, now, label, changed in (
                (a["names"], b["names"], "{}", lambda n, x, y: f"{n} {'added' if y else 'gone'}"),
                (a["defaults"], b["defaults"], "default of {}", lambda f, x, y: f"{f} defaults to {y}, was {x}")):
            for n in sorted(was.keys() | now.keys()):
                if n not in was or n not in now:
                    apart.append(f"{key}: {label.format(n)} (checked in one survey only)")
                elif was[n] != now[n]:
                    changes.append(f"{key}: {changed(n, was[n], now[n])}")
    return changes, apart


def churn_verdict(tables: dict[str, dict[str, dict] | None]) -> Outcome:
    """``risk.version_churn`` from the subject engine's surveys, one signature table per engine version (None
    where the survey recorded none). Any change between consecutive versions of a signature the cell uses:
    confirmed, with the changes; every one identical: refuted (for these versions); fewer than two versions
    with tables: inconclusive, and the command that adds one."""
    usable = {v: t for v, t in tables.items() if t is not None}
    versions = sorted(usable, key=natural)
    lacking = sorted((v for v, t in tables.items() if t is None), key=natural)
    notes = [f"surveys of {', '.join(lacking)} recorded no signature table (re-run the survey there)"] if lacking else []
    if len(versions) < 2:
        had = f"only {versions[0]}" if versions else "none"
        return Outcome("inconclusive", f"Version churn needs findings from ≥2 TensorRT-LLM versions with signature "
                       f"tables ({had} here): run {claims.get(CLAIM).resolve}.", {}, [], notes)
    rows, apart = [], []
    for old, new in zip(versions, versions[1:]):
        changes, skipped = signature_changes(usable[old], usable[new])
        rows += [{"from": old, "to": new, "change": c} for c in changes]
        apart += [f"{old} → {new}: {s}" for s in skipped]
    if apart:
        notes.append("not compared: " + "; ".join(apart))
    span = " → ".join(versions)
    if rows:
        return Outcome("confirmed", f"The TensorRT-LLM API the cell uses changed across {span}: "
                       + "; ".join(f"{r['from']} → {r['to']}: {r['change']}" for r in rows) + ".", {}, rows, notes)
    # an entry point counts as compared only where every survey found it: "nowhere" twice is no reading
    compared = len([k for k in set.intersection(*(set(usable[v]) for v in versions))
                    if all(usable[v][k]["at"] is not None for v in versions)])
    if not compared:
        return Outcome("inconclusive", f"The surveys of {span} share no entry point to compare; re-run them with "
                       "one workbench version.", {}, rows, notes)
    return Outcome("refuted", f"The {compared} entry points the cell uses read identically in TensorRT-LLM {span} "
                   "(location, names used, pinned defaults): no churn between these releases; a later one can "
                   "still bring some.", {}, rows, notes)
