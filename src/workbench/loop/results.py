"""From per-turn rows to findings: one per reference arm and one for the gate (claim ``entry.step_function``).

Reference-arm findings are references for the claim (their engine is not its subject), so their
verdict is ``inconclusive`` on it whatever they measured; ``not-run`` when the arm could not run
here. The gate finding belongs to the subject (TensorRT-LLM): it carries the subject arm's metrics,
or its not-run reason, and puts the reference arms' figures beside the verdict.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from .. import cells, claims, environment, findings, metrics
from . import arms as _arms
from . import attribution as attr
from . import gate as _gate
from . import stats

COPY_HEAVY = 0.5  # a turn is copy-heavy when at least this share of its reply's 4-grams is in its prompt
PROBE = "loop"
PROBE_VERSION = "1"  # bump when what the loop measures changes


@dataclass
class ArmSummary:
    arm: str
    engine: str
    reason: str | None  # why it did not run
    metrics: dict = field(default_factory=dict)
    ci: dict = field(default_factory=dict)  # metric -> Estimate dict
    notes: list[str] = field(default_factory=list)


def _loop_time(df: pd.DataFrame) -> float:
    return float(df["e2e_s"].sum())


def paired(rows: pd.DataFrame, a: str, b: str, column: str) -> tuple[np.ndarray, np.ndarray]:
    """Column values of arms a and b on the same turns (step order)."""
    wide = rows.pivot(index="step", columns="arm", values=column)
    both = wide[[a, b]].dropna()
    return both[a].to_numpy(float), both[b].to_numpy(float)


def summarise(rows: pd.DataFrame, ran: Sequence[str], not_run: Mapping[str, str], seed: int = 0) -> list[ArmSummary]:
    """Per-arm metrics, with bootstrap CIs over turns for the speed-ups."""
    out = []
    refs = [a for a in ran if _arms.is_llamacpp(a)]
    best = min(refs, key=lambda a: _loop_time(rows[rows.arm == a])) if refs else None
    for name in [*ran, *not_run]:
        spec = _arms.get(name)
        if name in not_run:
            out.append(ArmSummary(name, spec.engine, not_run[name]))
            continue
        df = rows[rows.arm == name]
        theo = int(df["theoretical"].sum())
        m: dict[str, Any] = {
            "turns": len(df),
            "prompt_tokens": int(df["prompt"].sum()),
            "expected_reused_tokens": theo,
            "reuse_efficiency": df["reused"].sum() / theo if theo else float("nan"),
            "unexplained_miss_tokens": int(df["unexplained"].abs().sum()),
            "ttft_p50_s": stats.percentile(df["ttft_s"], 50),
            "ttft_p90_s": stats.percentile(df["ttft_s"], 90),
            "loop_time_s": _loop_time(df),
        }
        s = ArmSummary(name, spec.engine, None, m)
        if best is not None:
            ref, mine = paired(rows, best, name, "e2e_s")
            est = stats.bootstrap([ref, mine], stats.ratio_of_sums, seed=seed)
            m |= {"speedup_vs_best_llamacpp": est.value, "speedup_ci_low": est.low, "speedup_ci_high": est.high}
            s.ci["speedup_vs_best_llamacpp"] = est.as_dict() | {"reference": best}
        if spec.speculation != "none":
            drafted = int(df["drafted"].sum())
            m["acceptance_rate"] = df["accepted"].sum() / drafted if drafted else float("nan")
            steps = int(df["drafted_steps"].sum())
            m["mean_accepted_tokens"] = df["accepted"].sum() / steps if steps else float("nan")
        if "llamacpp" in ran and name != "llamacpp":
            plain, mine = paired(rows, "llamacpp", name, "decode_s")
            heavy = rows[(rows.arm == "llamacpp") & (rows.copy_fraction >= COPY_HEAVY)]["step"]
            mask = rows[rows.arm == "llamacpp"].set_index("step").index.isin(heavy)
            same = rows[rows.arm == name].set_index("step")["same_tokens_as_llamacpp"]
            if mask.any():
                est = stats.bootstrap([plain[mask], mine[mask]], stats.median_ratio, seed=seed)
                m["decode_speedup_copy_heavy"] = est.value
                s.ci["decode_speedup_copy_heavy"] = est.as_dict() | {"turns": int(mask.sum())}
            s.notes.append(f"output token-identical to the llamacpp arm on {int(same.sum())}/{len(same)} turns")
        fit = ttft_fit(df)
        if fit:
            m |= {"ttft_per_suffix_token_s": fit["per_suffix_token_s"],
                  "ttft_per_context_token_s": fit["per_context_token_s"]}
        mismatch = df[df["engine_resident"].notna() & (df["engine_resident"] != df["held_after"])]
        if len(mismatch):
            s.notes.append(f"{len(mismatch)} turns where the engine's resident positions disagree with the tokens "
                           "the attribution assumed held")
        out.append(s)
    return out


def ttft_fit(df: pd.DataFrame) -> dict:
    """Least squares TTFT ≈ a + b·computed (the suffix) + c·prompt (the context) over one arm's turns;
    empty when the two cannot be told apart.

    Warm TTFT "tracks the suffix, not the context" when b dominates and c is near zero.
    """
    x = np.column_stack([np.ones(len(df)), df["computed"].to_numpy(float), df["prompt"].to_numpy(float)])
    if np.linalg.matrix_rank(x) < 3:  # e.g. the cold arm: suffix and context are the same numbers
        return {}
    coef, *_ = np.linalg.lstsq(x, df["ttft_s"].to_numpy(float), rcond=None)
    return {"intercept_s": float(coef[0]), "per_suffix_token_s": float(coef[1]), "per_context_token_s": float(coef[2])}


def attribution_totals(rows: pd.DataFrame) -> pd.DataFrame:
    """Per arm: reused plus every category, summed over the loop (the attribution bar)."""
    cols = ["reused", *attr.CATEGORIES]
    return rows.groupby("arm", sort=False)[cols + ["theoretical", "prompt"]].sum()


def _summary_line(s: ArmSummary) -> str:
    if s.reason:
        return f"{s.arm}: not run ({s.reason})"
    m = s.metrics
    parts = [f"loop {metrics.render('loop_time_s', m['loop_time_s'])}",
             f"TTFT p50 {metrics.render('ttft_p50_s', m['ttft_p50_s'])}",
             f"reuse {metrics.render('reuse_efficiency', m['reuse_efficiency'])} of theoretical"]
    if "speedup_vs_best_llamacpp" in m:
        parts.append(f"{m['speedup_vs_best_llamacpp']:.3g}× [{m['speedup_ci_low']:.3g}, {m['speedup_ci_high']:.3g}] "
                     "vs best llama.cpp")
    if "acceptance_rate" in m:
        parts.append(f"acceptance {metrics.render('acceptance_rate', m['acceptance_rate'])}")
    return f"{s.arm}: " + ", ".join(parts)


def _environment(engine: str, description: Any, resolved: Any, extra: dict) -> dict:
    version = description.engine_version if description else (
        cells.availability(engine).version if engine in cells.engines() else None)
    return environment.fingerprint(engine, version, resolved, description.geometry if description else None, extra)


def arm_finding(s: ArmSummary, rows: pd.DataFrame, params: dict, description: Any, resolved: Any,
                workload_doc: dict) -> findings.Finding:
    claim = claims.get(_gate.CLAIM)
    df = rows[rows.arm == s.arm] if len(rows) else rows
    if s.reason:
        verdict, summary = "not-run", f"Not run on {s.engine}: {s.reason}"
    else:
        verdict, summary = "inconclusive", "Reference arm, not the claim's subject. " + _summary_line(s)
    notes = [f"arm {s.arm}: {_arms.get(s.arm).help}", f"workload: {workload_doc['rule']}", *s.notes]
    values = {k: v for k, v in s.metrics.items() if k in metrics.METRICS and not _nan(v)}
    evidence_rows = df.replace({np.nan: None}).to_dict("records")
    return findings.Finding(
        probe=f"{PROBE}.{s.arm}", probe_version=PROBE_VERSION, claims=[claim.id], verdict=verdict, summary=summary,
        engine=s.engine, environment=_environment(s.engine, description, resolved, {"loop": workload_doc}),
        params=params | {"arm": s.arm}, cell_options=dict(_arms.get(s.arm).cell_options),
        metrics=findings.metric_values(values),
        evidence={"columns": list(df.columns), "rows": evidence_rows, "notes": notes, "ci": s.ci},
        reason=s.reason)


def gate_finding(summaries: list[ArmSummary], rule: _gate.GateRule, params: dict, workload_doc: dict,
                 on_target: bool) -> findings.Finding:
    claim = claims.get(_gate.CLAIM)
    by = {s.arm: s for s in summaries}
    subject = by.get(rule.subject)
    refs = [s for s in summaries if _arms.is_llamacpp(s.arm) and not s.reason]
    best = min(refs, key=lambda s: s.metrics["loop_time_s"]).arm if refs else None
    speedup = None
    if subject is not None and not subject.reason:
        speedup = subject.ci.get("speedup_vs_best_llamacpp")
    outcome = _gate.decide(rule, speedup, subject.reason if subject else None, best, on_target)
    references = "; ".join(_summary_line(s) for s in summaries if s.arm != rule.subject)
    where = (f"{workload_doc['trace']} ({workload_doc['turns']} turns), {params.get('model')}, "
             f"{environment.hardware().get('summary')}")
    must_add = "A GPU run must add: " + "; ".join(_gate.GPU_RUN_MUST_ADD) + "."
    reason = None
    summary = f"{outcome.summary}. Rule: {rule.describe()}. References ({where}): {references}."
    if outcome.verdict == "not-run":
        reason = f"{outcome.reason}. {must_add} References measured here ({where}): {references}."
    rows = [{"arm": s.arm, "engine": s.engine, "ran": s.reason is None, "reason": s.reason,
             **{k: v for k, v in s.metrics.items() if not _nan(v)}} for s in summaries]
    engine = _arms.get(rule.subject).engine
    subject_metrics = {k: v for k, v in (subject.metrics if subject and not subject.reason else {}).items()
                       if k in metrics.METRICS and not _nan(v)}
    return findings.Finding(
        probe=f"{PROBE}.gate", probe_version=PROBE_VERSION, claims=[claim.id], verdict=outcome.verdict, summary=summary,
        engine=engine, environment=_environment(engine, None, None, {"loop": workload_doc}),
        params=params | {"rule": rule.as_dict()}, metrics=findings.metric_values(subject_metrics),
        evidence={"columns": list(dict.fromkeys(k for r in rows for k in r)), "rows": rows,
                  "notes": [rule.describe(), must_add, f"workload: {workload_doc['rule']}"]},
        reason=reason)


def _nan(v: Any) -> bool:
    return isinstance(v, float) and v != v


__all__ = ["ArmSummary", "COPY_HEAVY", "arm_finding", "attribution_totals", "gate_finding", "paired", "summarise", "ttft_fit"]
