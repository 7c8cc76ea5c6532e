"""From per-turn rows to findings: one per reference arm and one for the gate (claim ``entry.step_function``).

Reference-arm findings are references for the claim (their engine is not its subject), so their
verdict is ``inconclusive`` on it whatever they measured; ``not-run`` when the arm could not run
here. The gate finding belongs to the subject (TensorRT-LLM): it carries the subject arm's metrics,
or its not-run reason, and puts the reference arms' figures beside the verdict.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Collection, Mapping, Sequence

import numpy as np
import pandas as pd

from .. import cells, claims, environment, findings, metrics
from ..certify import classes
from ..engine import CELL_SOURCES
from ..probes import Declared, Figure, Outcome
from ..probes.common import reported_source
from . import arms as _arms
from . import attribution as attr
from . import equal
from . import gate as _gate
from . import stats

COPY_HEAVY = 0.5  # a turn is copy-heavy for an arm when at least this share of its own output's 4-grams is in the prompt
PROBE = "loop"  # the loop's findings are loop.<arm> and loop.gate; probes.SOURCES registers it under this name


class Loop(Declared):
    """The loop's findings declared like a probe's: its claim, the version its findings carry, and its figures,
    each drawn over the arm findings that stand (a gate finding's rows hold no turns, so it draws nothing)."""

    version = "6"  # bump when what the loop measures changes (2: equal work, engine-read losses; 3: greedy scorer;
    # 4: the gate's evidence recorded, so its verdict is decided again at load; 5: the gate answers G4, gate.turn_time,
    # one of the four step-function gates, no longer the entry condition itself; 6: equal tokens, each arm scored at
    # its own precision, the subject's and the best arm's turns recorded in the gate, which its run's arms must agree
    # with)
    claims = (_gate.CLAIM,)
    result_class = classes.ResultClass.RAW.value  # engines driven directly, turn by turn: not contenox's chain/tool path
    figures = (Figure("ttft", "loop_ttft"), Figure("reuse", "loop_reuse"), Figure("attribution", "loop_attribution"),
               Figure("speedup", "loop_speedup", rows="metrics"))

    def rederive(self, f: findings.Finding, claim: claims.Claim) -> list[str]:
        """The gate's verdict decided again (:func:`.gate.decide`) from what its finding recorded: the rule, the
        subject's speed-up and compared turns as its metrics, the target as its environment, and the rest of the
        gate's evidence; an arm finding never answers the claim."""
        if f.probe != f"{PROBE}.gate":
            return [f"{f.probe} is a reference arm's finding, which never answers the claim"]
        try:
            again = _gate.decide(_gate.GateRule(**{k: v for k, v in f.params["rule"].items() if k != "exploratory"}),
                                 recorded_evidence(f))
        except (KeyError, TypeError, ValueError) as e:
            return [f"the gate's rule or evidence is not recorded whole ({type(e).__name__}: {e})"]
        said = f.verdict_on(claim.id)
        why = [] if again.verdict == said else [
            f"decided again from what it recorded, the gate says {again.verdict}, not {said}: {again.summary}"]
        return why + _against_params(f)

    def from_evidence(self, evidence, p) -> Outcome:
        """The gate's speed-up again from the turns it recorded (the subject's and the best llama.cpp arm's, each
        turn's time, decoded length and whether it was served comparably), by the run's own equal-work rule and
        seed, then :func:`.gate.decide` on it. A reference arm's finding never answers: inconclusive."""
        if "gate" not in evidence:
            return Outcome("inconclusive", "a reference arm")
        return gate_again(evidence, p)

    def guard(self, o: Outcome, f: findings.Finding) -> Outcome:
        """None: the loop writes its findings as its gate decides them (:func:`.gate.decide`: the subject's
        end-to-end loop time over turns of equal work, on the target's GPU), not through a probe's engine-read
        guard, so its outcome is re-derived as written."""
        return o

    def check_run(self, f: findings.Finding, found) -> list[str]:
        """A gate finding agrees with the arm findings written beside it in its run (the same ``loop.run`` id): the
        best llama.cpp arm it names ran there, its turns are the ones the gate recorded, and each arm's figures in
        the gate's rows are that arm's own."""
        if f.probe != f"{PROBE}.gate":
            return []
        return against_arms(f, [g for _, g in found])

    def obtained(self, found: Sequence[findings.Finding]) -> str:
        traces = sorted({(f.environment.get("loop") or {}).get("trace") or "trace not recorded" for f in found})
        return f"workbench loop · {', '.join(traces) or 'no trace'}"


@dataclass
class ArmSummary:
    arm: str
    engine: str
    reason: str | None  # why it did not run
    metrics: dict = field(default_factory=dict)
    ci: dict = field(default_factory=dict)  # metric -> Estimate dict
    notes: list[str] = field(default_factory=list)
    disqualified: str | None = None  # why its turns cannot carry a comparison (equal work)
    sources: dict = field(default_factory=dict)  # metric -> the source of the values behind it, where not the declared
    is_best: bool = False  # the fastest qualified llama.cpp arm: what the gate compares against
    weights: str | None = None  # the precision its scorer read its outputs at (its own model's weights)
    caveat: str | None = None  # why its figures measure nothing of the workload (speculation on a hash-only trace)


def _loop_time(df: pd.DataFrame) -> float:
    return float(df["e2e_s"].sum())


def _per_s(tokens: float, seconds: float) -> float:
    return float(tokens / seconds) if seconds > 0 else float("nan")


def paired(rows: pd.DataFrame, a: str, b: str, column: str, steps: Sequence[int] | None = None
           ) -> tuple[np.ndarray, np.ndarray]:
    """Column values of arms a and b on the same turns (step order); only ``steps`` when given. An arm paired with
    itself (the best llama.cpp arm's own speed-up) gives its column twice, each one-dimensional."""
    wide = rows.pivot(index="step", columns="arm", values=column)
    both = wide[list(dict.fromkeys([a, b]))].dropna()
    if steps is not None:
        both = both[both.index.isin(steps)]
    return both[a].to_numpy(float), both[b].to_numpy(float)


def best_reference(rows: pd.DataFrame, qualified: Sequence[str]) -> str | None:
    """The fastest qualified llama.cpp arm, timed on the turns every qualified one served comparably."""
    steps = equal.common_turns(rows, qualified) if qualified else []
    if not steps:
        return None
    on = rows[rows.step.isin(steps)]
    return min(qualified, key=lambda a: _loop_time(on[on.arm == a]))


def _source_of(values: pd.Series) -> str | None:
    """One metric source for values measured turn by turn, from each turn's ``PrefixStatus.source`` (or the loop's
    ``engine``/``cell``) by :func:`..probes.common.reported_source`: ``engine`` where every turn's is an engine
    counter (llama.cpp's eval counters, vLLM's ``num_cached_tokens``, TensorRT-LLM's ``perf_metrics``); None where
    none was read, or a turn came back with no count (``none``: missing, never 0)."""
    got = set(values.dropna())
    return reported_source(got) if got else None


def _reuse(df: pd.DataFrame, s: ArmSummary) -> None:
    theo = int(df["theoretical"].sum())
    source = _source_of(df["reuse_source"])
    if source is None:
        missing = int((df["reuse_source"] == "none").sum())
        s.notes.append(f"the engine returned no reuse count on {missing} of {len(df)} turns, so reuse efficiency is "
                       "not measured (a missing count is not 0)")
        s.metrics["reuse_efficiency"] = float("nan")
        return
    s.metrics["reuse_efficiency"] = df["reused"].sum() / theo if theo else float("nan")
    if source != "engine":
        own = df["reuse_source"][df["reuse_source"].isin(CELL_SOURCES)]
        s.sources["reuse_efficiency"] = source
        rest = ", the engine's counter on the rest" if len(own) < len(df) else ""
        s.notes.append(f"reuse efficiency rests on the cell's own count on {len(own)} of {len(df)} turns "
                       f"({', '.join(sorted(set(own)))}){rest}")


def _speculation(df: pd.DataFrame, s: ArmSummary) -> None:
    source = _source_of(df["speculation_source"])
    if source is None:
        s.metrics |= {"acceptance_rate": float("nan"), "mean_accepted_tokens": float("nan")}
        s.notes.append("the engine reported no speculative-decoding counters, so nothing shows its speculation ran")
        return
    drafted, steps = int(df["drafted"].sum()), int(df["drafted_steps"].sum())
    s.metrics["acceptance_rate"] = df["accepted"].sum() / drafted if drafted else float("nan")
    s.metrics["mean_accepted_tokens"] = df["accepted"].sum() / steps if steps else float("nan")
    s.sources |= {"acceptance_rate": source, "mean_accepted_tokens": source}
    s.metrics |= {"drafted_tokens": drafted, "accepted_tokens": int(df["accepted"].sum())}
    if not drafted:
        s.notes.append("no token was drafted on any turn")


def _calibration(rows: pd.DataFrame, name: str, work: equal.EqualWork, s: ArmSummary) -> None:
    """The arm's calibrated near-tie margin, recorded: the numeric gap measured, the margin its turns were held to
    (the one :func:`.equal.mark` gave them, not computed again here), how measured."""
    gap = equal.numeric_gaps(rows).get(name)
    if gap is None:
        s.notes.append("no batched-vs-sequential gap was measured, so its margin is the rule's")
        return
    near = float(rows.loc[rows.arm == name, "near_tie_margin_sd"].iloc[0])
    s.metrics |= {"scorer_numeric_gap_sd": gap, "near_tie_margin_sd": near}
    s.notes.append(f"near-tie margin calibrated: the rule's {work.margin_sd:g} σ + the measured numeric gap {gap:.3f} σ"
                   f" = {near:.3f} σ (at most {equal.NUMERIC_GAP_CAP_SD:g} σ added; measured as {equal.CALIBRATION})")


def _speedups(rows: pd.DataFrame, name: str, best: str | None, s: ArmSummary, seed: int, work: equal.EqualWork) -> None:
    """Speed-ups over the best llama.cpp arm and, on copy-heavy turns, over plain decode: comparable turns only."""
    served = equal.common_turns(rows, [best, name]) if best is not None else []
    steps = equal.equal_tokens(rows, best, name, work) if served else []
    if served and name != best:
        _lengths(rows, best, name, served, steps, s)
    if steps:
        ref, mine = paired(rows, best, name, "e2e_s", steps)
        est = stats.bootstrap([ref, mine], stats.ratio_of_sums, seed=seed)
        s.metrics |= {"speedup_vs_best_llamacpp": est.value, "speedup_ci_low": est.low, "speedup_ci_high": est.high,
                      "speedup_turns": est.n}
        s.ci["speedup_vs_best_llamacpp"] = est.as_dict() | {"reference": best, "turns": len(steps)}
        _few(est, f"speed-up over {best}", s)
        if name != best:
            _excluded_at_worst(rows, best, name, steps, s, seed)
    if name != work.reference and work.reference in set(rows.arm):
        same = rows[rows.arm == name]["same_tokens_as_reference"]
        s.notes.append(f"output token-identical to the reference arm {work.reference} on {int(same.sum())}/{len(same)} "
                       "turns")
    # plain decode on the same engine and transport: the served speculation arm against the served plain arm
    plain = _arms.plain(name)
    if name == plain or plain not in set(rows.arm):
        return
    mine = rows[(rows.arm == name) & (rows.own_copy_fraction >= COPY_HEAVY)]["step"]  # judged on its own output
    steps = [t for t in equal.common_turns(rows, [plain, name]) if t in set(mine)]
    if steps:
        base, arm = paired(rows, plain, name, "decode_s", steps)
        est = stats.bootstrap([base, arm], stats.median_ratio, seed=seed)
        s.metrics["decode_speedup_copy_heavy"] = est.value
        s.ci["decode_speedup_copy_heavy"] = est.as_dict() | {"turns": len(steps), "reference": plain}
        _few(est, f"copy-heavy decode speed-up over {plain}", s)


def _few(est: stats.Estimate, what: str, s: ArmSummary) -> None:
    """A note where an interval rests on fewer than :data:`.stats.FEW_TURNS` turns (its ``few_turns`` flag)."""
    if est.few and est.n > 1:
        s.notes.append(f"the {what}'s 95% bootstrap CI is over {est.n} turns, fewer than {stats.FEW_TURNS}: it "
                       "cannot reach past those turns' own ratios, so it is narrower than a 95% interval")


def _lengths(rows: pd.DataFrame, best: str, name: str, served: Sequence[int], steps: Sequence[int],
             s: ArmSummary) -> None:
    """Decoded lengths against the best arm's on the turns both served comparably (``served``): both did the work (the
    lengths asked, or a greedy stop), yet a near-tie broken towards a stop on one of them makes the lengths, and so
    the times, differ; only the turns whose lengths agree (``steps``) are timed against each other."""
    ref, mine = paired(rows, best, name, "decode_tokens", served)
    s.metrics["decode_tokens_vs_best_llamacpp"] = mine.sum() / ref.sum() if ref.sum() else float("nan")
    if differ := int((ref != mine).sum()):
        s.notes.append(f"decoded lengths differ from {best}'s on {differ} of the {len(served)} turns both served "
                       f"comparably ({int(mine.sum())} tokens against {int(ref.sum())}; each a greedy stop or the "
                       f"length asked); {len(served) - len(steps)} of them differ beyond the equal-tokens tolerance "
                       "and are counted at their worst, not timed as equal work")


def _excluded_at_worst(rows: pd.DataFrame, best: str, name: str, steps: Sequence[int], s: ArmSummary,
                       seed: int) -> None:
    """The speed-up over every turn both arms served, each excluded one counted against ``name`` (its time no less than
    the best arm's there) and in its favour (no more). What an excluded turn's work would have cost is unknown, so
    a verdict must hold either way, else the exclusions could have selected the sample."""
    both = rows.pivot(index="step", columns="arm", values="e2e_s")[[best, name]].dropna()
    out, kept = both[~both.index.isin(steps)], both[both.index.isin(steps)]
    if out.empty:
        return
    ref = np.concatenate([kept[best], out[best]])
    for way, worst in (("against", np.maximum), ("favour", np.minimum)):
        est = stats.bootstrap([ref, np.concatenate([kept[name], worst(out[name], out[best])])], stats.ratio_of_sums,
                              seed=seed)
        s.ci[f"speedup_excluded_{way}"] = est.as_dict() | {"reference": best, "turns": len(both), "excluded": len(out)}
    s.metrics |= {"speedup_excluded_against_low": s.ci["speedup_excluded_against"]["low"],
                  "speedup_excluded_favour_high": s.ci["speedup_excluded_favour"]["high"]}


def summarise(rows: pd.DataFrame, ran: Sequence[str], not_run: Mapping[str, str], seed: int = 0,
              work: equal.EqualWork = equal.EqualWork()) -> list[ArmSummary]:
    """Per-arm metrics, with bootstrap CIs over comparable turns for the speed-ups (``rows`` marked by
    :func:`.equal.mark`). A disqualified arm gets no speed-up and cannot be the best llama.cpp arm."""
    out = []
    barred = {a: equal.disqualified(rows, a, work) for a in ran}
    best = best_reference(rows, [a for a in ran if _arms.is_llamacpp(a) and not barred[a]])
    for name in [*ran, *not_run]:
        spec = _arms.get(name)
        if name in not_run:
            out.append(ArmSummary(name, spec.engine, not_run[name]))
            continue
        df = rows[rows.arm == name]
        compared = int(df["comparable"].sum())
        s = ArmSummary(name, spec.engine, None, {
            "turns": len(df), "compared_turns": compared, "excluded_turns": len(df) - compared,
            "prompt_tokens": int(df["prompt"].sum()),
            "expected_reused_tokens": int(df["theoretical"].sum()),
            "unexplained_miss_tokens": int(df["unexplained"].abs().sum()),
            "ttft_p50_s": stats.percentile(df["ttft_s"], 50),
            "ttft_p90_s": stats.percentile(df["ttft_s"], 90),
            "ttft_p95_s": stats.percentile(df["ttft_s"], 95),
            "itl_p50_s": stats.percentile(pd.to_numeric(df["itl_s"], errors="coerce").dropna(), 50),
            "e2e_p50_s": stats.percentile(df["e2e_s"], 50),
            "loop_output_tokens_per_s": _per_s(df["decode_tokens"].sum(), _loop_time(df)),
            "loop_time_s": _loop_time(df),
            "greedy_gap_max_sd": float(df["greedy_gap_sd"].max()),
        }, disqualified=barred[name], is_best=name == best,
            weights=str(df["scorer_weights"].iloc[0]) if "scorer_weights" in df and len(df) else None)
        _reuse(df, s)
        if spec.speculation != "none":
            _speculation(df, s)
        if spec.verified_in_batches:
            _calibration(rows, name, work, s)
        if s.disqualified:
            s.notes.append(f"disqualified from every comparison: {s.disqualified}")
        else:
            _speedups(rows, name, best, s, seed, work)
        fit = ttft_fit(df)
        if fit:
            s.metrics |= {"ttft_per_suffix_token_s": fit["per_suffix_token_s"],
                          "ttft_per_context_token_s": fit["per_context_token_s"]}
        mismatch = df[df["engine_resident"].notna() & (df["engine_resident"] != df["held_after"])]
        if len(mismatch):
            s.notes.append(f"{len(mismatch)} turns where the KV the engine holds after the turn (read back, holes "
                           "included) disagrees with the tokens the attribution assumed held")
        lost = int(df["engine_lost_before"].sum())
        if lost:
            s.notes.append(f"the engine reported {lost} tokens of the loop's KV lost before a turn (read back from "
                           "it): attributed as eviction")
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
             f"reuse {metrics.render('reuse_efficiency', m['reuse_efficiency'])} of theoretical",
             f"{m['compared_turns']}/{m['turns']} turns compared"]
    if "speedup_vs_best_llamacpp" in s.ci:
        parts.append(f"{stats.interval(s.ci['speedup_vs_best_llamacpp'])} vs best llama.cpp")
    if "acceptance_rate" in m:
        counted = ("the cell's count" if s.sources.get("acceptance_rate") != "engine" else
                   "read from llama-server's timings.draft_n, draft_n_accepted" if s.engine == "llamacpp-server"
                   else "the engine's count")
        parts.append(f"acceptance {metrics.render('acceptance_rate', m['acceptance_rate'])} "
                     f"({m.get('accepted_tokens', 0)} of {m.get('drafted_tokens', 0)} drafted tokens, {counted})")
    if s.disqualified:
        parts.append("disqualified")
    if s.caveat:
        parts.append(f"({s.caveat})")
    return f"{s.arm}{' (best llama.cpp)' if s.is_best else ''}: " + ", ".join(parts)


def _environment(engine: str, description: Any, resolved: Any, extra: dict) -> dict:
    version = description.engine_version if description else (
        cells.availability(engine).version if engine in cells.engines() else None)
    return environment.fingerprint(engine, version, resolved, description.geometry if description else None, extra)


def _metric_values(s: ArmSummary | None) -> dict:
    """The summary's declared metrics, NaN left out, each with the source of the values behind it."""
    if s is None or s.reason:
        return {}
    values = {k: v for k, v in s.metrics.items() if k in metrics.METRICS and not _nan(v)}
    return findings.metric_values(values, sources=s.sources)


def arm_finding(s: ArmSummary, rows: pd.DataFrame, params: dict, description: Any, resolved: Any,
                workload_doc: dict) -> findings.Finding:
    claim = claims.get(_gate.CLAIM)
    df = rows[rows.arm == s.arm] if len(rows) else rows
    if s.reason:
        verdict, summary = "not-run", f"Not run on {s.engine}: {s.reason}"
    else:
        verdict, summary = "inconclusive", "Reference arm, not the claim's subject. " + _summary_line(s)
    notes = [*([s.caveat] if s.caveat else []), f"arm {s.arm}: {_arms.get(s.arm).help}",
             f"workload: {workload_doc['rule']}", f"equal work: {workload_doc['equal_work_rule']}", *s.notes]
    evidence_rows = df.replace({np.nan: None}).to_dict("records")
    return findings.Finding(
        probe=f"{PROBE}.{s.arm}", probe_version=Loop.version, claims=[claim.id], verdict=verdict, summary=summary,
        engine=s.engine, environment=_environment(s.engine, description, resolved, {"loop": workload_doc}),
        params=params | {"arm": s.arm}, cell_options=dict(_arms.get(s.arm).cell_options),
        metrics=_metric_values(s),
        evidence={"columns": list(df.columns), "rows": evidence_rows, "notes": notes, "ci": s.ci},
        reason=s.reason, result_class=classes.for_verdict(verdict, Loop.result_class))


def gate_evidence(summaries: Sequence[ArmSummary], rule: _gate.GateRule, target: dict | None,
                  work: equal.EqualWork = equal.EqualWork(), on_gpu: Collection[str] = ()) -> _gate.GateEvidence:
    """What :func:`.gate.decide` reads, from the arms' summaries, the run's equal-work rule and the arms whose engine
    said it holds every layer on a GPU (``on_gpu``, :func:`.arms.on_gpu`): on target the baseline is llama.cpp's
    CUDA cell, so there only those arms count towards it."""
    by = {s.arm: s for s in summaries}
    subject = by.get(rule.subject)
    best = next((s.arm for s in summaries if s.is_best), None)
    ran_refs = [s for s in summaries if _arms.is_llamacpp(s.arm) and not s.reason]
    held = {(_arms.get(s.arm).reuse, _arms.get(s.arm).speculation) for s in ran_refs
            if not s.disqualified and (target is None or s.arm in on_gpu)}
    where = "" if target is None else " on the GPU"
    missing = tuple(kind + where for key, kind in _gate.BASELINE.items() if key not in held)
    no_ref = None
    if best is None and ran_refs:
        no_ref = "no llama.cpp arm served enough turns comparably: " + "; ".join(
            f"{s.arm}: {s.disqualified or 'no turn compared'}" for s in ran_refs)
    if subject is None or subject.reason:
        return _gate.GateEvidence(None, subject.reason if subject else None, best, no_reference=no_ref)
    ci = subject.ci.get("speedup_vs_best_llamacpp")
    against, favour = subject.ci.get("speedup_excluded_against"), subject.ci.get("speedup_excluded_favour")
    return _gate.GateEvidence(
        ci or {"value": float("nan"), "low": float("nan"), "high": float("nan")}, None, best,
        compared_turns=int(ci["turns"]) if ci else 0,
        disqualified=subject.disqualified or (None if ci or best is None else "no turn was served comparably"),
        no_reference=no_ref, on_target=target is not None, baseline_missing=missing,
        baseline_disqualified=tuple(s.arm for s in ran_refs if s.disqualified), other_work=work.exploratory,
        excluded_turns=int(against["excluded"]) if against else 0, against=against, favour=favour)


def precision(summaries: Sequence[ArmSummary], subject: str, best: str | None) -> str:
    """The precision each side of the gate ran at, as its scorer read it (each arm is held to greedy decoding of its
    own weights: :func:`.verify.scorer_model`), in a sentence; empty where neither side ran."""
    by = {s.arm: s for s in summaries}
    said = [f"{a} at {by[a].weights}" for a in (subject, best) if a in by and by[a].weights]
    return f"Precision, each side scored at its own: {', '.join(said)}. " if said else ""


TURN_COLUMNS = ("step", "e2e_s", "decode_tokens", "comparable")  # what the gate's re-derivation reads of each turn


def _turns(rows: pd.DataFrame, arm: str | None) -> list[dict]:
    if arm is None or not len(rows) or arm not in set(rows.arm):
        return []
    mine = rows[rows.arm == arm]
    return [{k: (bool(v) if k == "comparable" else v) for k, v in r.items()}
            for r in mine[list(TURN_COLUMNS)].to_dict("records")]


def gate_again(evidence: Mapping[str, Any], params: Mapping[str, Any]) -> Outcome:
    """The gate decided again from what its finding recorded (:meth:`Loop.from_evidence`)."""
    given, rest = evidence["inputs"], dict(evidence["gate"])
    rule = _gate.GateRule(**{k: v for k, v in params["rule"].items() if k != "exploratory"})
    work = equal.EqualWork(**{k: v for k, v in params["equal_work"].items() if k != "exploratory"})
    subject, best = rule.subject, rest.get("best_reference")
    metrics: dict[str, float] = {}
    if given["subject_turns"] and best is not None and given["best_turns"]:
        rows = pd.DataFrame([r | {"arm": subject} for r in given["subject_turns"]]
                            + [r | {"arm": best} for r in given["best_turns"]])
        s = ArmSummary(subject, subject, None)
        if steps := equal.equal_tokens(rows, best, subject, work):
            ref, mine = paired(rows, best, subject, "e2e_s", steps)
            est = stats.bootstrap([ref, mine], stats.ratio_of_sums, seed=int(params.get("seed") or 0))
            s.ci["speedup_vs_best_llamacpp"] = est.as_dict() | {"reference": best, "turns": len(steps)}
            metrics |= {"speedup_vs_best_llamacpp": est.value, "speedup_ci_low": est.low, "speedup_ci_high": est.high,
                        "speedup_turns": est.n}
            _excluded_at_worst(rows, best, subject, steps, s, int(params.get("seed") or 0))
        ci, against, favour = (s.ci.get(k) for k in ("speedup_vs_best_llamacpp", "speedup_excluded_against",
                                                      "speedup_excluded_favour"))
        metrics |= {k: v for k, v in s.metrics.items() if k.startswith("speedup_excluded")}
        rest |= {"speedup": ci or {"value": float("nan"), "low": float("nan"), "high": float("nan")},
                 "compared_turns": int(ci["turns"]) if ci else 0, "excluded_turns": int(against["excluded"]) if against
                 else 0, "against": against, "favour": favour}
    else:
        rest |= {"speedup": None}
    rest = {k: tuple(v) if isinstance(v, list) else v for k, v in rest.items()}
    rest["on_target"] = bool(given.get("on_target"))
    out = _gate.decide(rule, _gate.GateEvidence(**{k: v for k, v in rest.items()
                                                   if k in _gate.GateEvidence.__dataclass_fields__}))
    return Outcome(out.verdict, out.summary, metrics)


def _against_params(f: findings.Finding) -> list[str]:
    """A gate whose compared turns its own run's parameters could not hold (more than ``sessions × turns``)."""
    compared = (f.evidence.get("gate") or {}).get("compared_turns") or 0
    per, sessions = f.params.get("turns"), f.params.get("sessions")
    most = (f.environment.get("loop") or {}).get("turns")
    if isinstance(per, int) and isinstance(sessions, int) and compared > per * sessions:
        return [f"it compares {compared} turns, but its own parameters ran at most {sessions} session(s) × {per} "
                "turn(s)"]
    if isinstance(most, int) and compared > most:
        return [f"it compares {compared} turns, but its workload recorded {most}"]
    return []


def against_arms(f: findings.Finding, found: Sequence[findings.Finding]) -> list[str]:
    """Where a gate finding disagrees with the arm findings of its run (:meth:`Loop.check_run`)."""
    run = (f.environment.get("loop") or {}).get("run")
    arms = {g.params.get("arm"): g for g in found if g.probe.startswith(f"{PROBE}.") and g.probe != f.probe
            and run is not None and (g.environment.get("loop") or {}).get("run") == run}
    if not arms:
        return [f"none of the arm findings of its run (loop run {run or 'not recorded'}) is among the findings read, "
                "so what it says of them cannot be checked: keep the run's findings together"]
    best = (f.evidence.get("gate") or {}).get("best_reference")
    if best is not None and (best not in arms or arms[best].verdict == "not-run"):
        return [f"the best llama.cpp arm it names, {best}, did not run in its run"]
    why = []
    if best is not None:
        theirs = [{k: r.get(k) for k in TURN_COLUMNS} for r in arms[best].evidence.get("rows", [])]
        mine = [{k: r.get(k) for k in TURN_COLUMNS} for r in (f.evidence.get("inputs") or {}).get("best_turns", [])]
        if theirs != mine:
            why.append(f"the turns it recorded of {best} are not the ones {best}'s own finding recorded")
    for row in f.evidence.get("rows", []):
        arm = arms.get(row.get("arm"))
        if arm is None or not row.get("ran"):
            continue
        off = [t for t, m in arm.metrics.items() if t in row and row[t] != m.get("value")]
        if off:
            why.append(f"its row of {row['arm']} says {', '.join(off)} otherwise than {row['arm']}'s own finding")
    return why


def recorded_evidence(f: findings.Finding) -> _gate.GateEvidence:
    """The gate's evidence as its finding recorded it: the speed-up from its metrics, on target only where the
    finding's own fingerprint has a GPU and the verified target, the equal-work rule's laxity from the rule in its
    params, the best llama.cpp arm from its rows, the rest from ``evidence["gate"]``."""
    values = {t: f.metric(t) for t in ("speedup_vs_best_llamacpp", "speedup_ci_low", "speedup_ci_high")}
    rest = {k: tuple(v) if isinstance(v, list) else v for k, v in dict(f.evidence["gate"]).items()}
    speedup = (None if any(v is None for v in values.values()) else
               {"value": values["speedup_vs_best_llamacpp"], "low": values["speedup_ci_low"],
                "high": values["speedup_ci_high"], "n": rest.get("compared_turns")})
    work = {k: v for k, v in dict(f.params["equal_work"]).items() if k != "exploratory"}
    best = [r["arm"] for r in f.evidence.get("rows", []) if r.get("best_llamacpp") is True]
    return _gate.GateEvidence(**rest | {  # what the rows and the rule give is read from them, not from the summary
        "speedup": speedup, "on_target": bool(f.environment.get("target")) and findings.has_gpu(f),
        "other_work": equal.EqualWork(**work).exploratory, "best_reference": best[0] if len(best) == 1 else None})


def gate_finding(summaries: list[ArmSummary], rule: _gate.GateRule, params: dict, workload_doc: dict,
                 target: dict | None, work: equal.EqualWork = equal.EqualWork(),
                 on_gpu: Collection[str] = (), rows: pd.DataFrame | None = None) -> findings.Finding:
    """The subject's finding on the claim: its arm's metrics (so its speed-up is drawn beside the references'),
    the verdict of :func:`.gate.decide`, and the reference arms beside it. ``target``: the verified target evidence
    (:func:`.target.verify`), or None; ``work``: the run's equal-work rule; ``on_gpu``: the arms whose engine said
    it holds every layer on a GPU; ``rows``: the run's turns, the subject's and the best arm's recorded beside the
    verdict so that it is decided again from them (:meth:`Loop.from_evidence`)."""
    rows = rows if rows is not None else pd.DataFrame()
    claim = claims.get(_gate.CLAIM)
    subject = next((s for s in summaries if s.arm == rule.subject), None)
    evidence = gate_evidence(summaries, rule, target, work, on_gpu)
    outcome = _gate.decide(rule, evidence)
    references = "; ".join(_summary_line(s) for s in summaries if s.arm != rule.subject)
    where = (f"{workload_doc['trace']} ({workload_doc['turns']} turns), {params.get('model')}, "
             f"{environment.hardware().get('summary')}")
    must_add = "A GPU run must add: " + "; ".join(_gate.GPU_RUN_MUST_ADD) + "."
    reason = None
    best = next((x.arm for x in summaries if x.is_best), None)
    named = f"Best llama.cpp arm: {best}" if best else "No llama.cpp arm qualified as the best"
    summary = (f"{outcome.summary}. {named}. {precision(summaries, rule.subject, best)}Rule: {rule.describe()}. "
               f"References ({where}): {references}.")
    if outcome.verdict == "not-run":
        reason = f"{outcome.reason}. {must_add} References measured here ({where}): {references}."
    table = [{"arm": s.arm, "engine": s.engine, "ran": s.reason is None, "reason": s.reason, "best_llamacpp": s.is_best,
              "disqualified": s.disqualified, **{k: v for k, v in s.metrics.items() if not _nan(v)}}
             for s in summaries]
    engine = _arms.get(rule.subject).engine
    notes = [rule.describe(), f"equal work: {workload_doc['equal_work_rule']}", must_add,
             f"workload: {workload_doc['rule']}", *(subject.notes if subject else [])]
    inputs = {"subject_turns": _turns(rows, rule.subject if subject and not subject.reason else None),
              "best_turns": _turns(rows, best), "on_target": evidence.on_target}
    return findings.Finding(
        probe=f"{PROBE}.gate", probe_version=Loop.version, claims=[claim.id], verdict=outcome.verdict, summary=summary,
        engine=engine, environment=_environment(engine, None, None, {"loop": workload_doc, "target": target}),
        params=params | {"arm": rule.subject, "rule": rule.as_dict()}, metrics=_metric_values(subject),
        evidence={"columns": list(dict.fromkeys(k for r in table for k in r)), "rows": table, "notes": notes,
                  "ci": subject.ci if subject else {}, "inputs": inputs,
                  "gate": {k: v for k, v in asdict(evidence).items() if k not in ("speedup", "on_target")}},
        reason=reason, result_class=classes.for_verdict(outcome.verdict, Loop.result_class))


def _nan(v: Any) -> bool:
    return isinstance(v, float) and v != v


__all__ = ["ArmSummary", "COPY_HEAVY", "Loop", "arm_finding", "attribution_totals", "best_reference", "gate_evidence",
           "gate_finding", "paired", "recorded_evidence", "summarise", "ttft_fit"]
