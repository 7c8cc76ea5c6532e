"""``surface.contract_mapping``: row by row, does each mechanism of the Contract Mapping table exist in the
installed release with the expected signature? Static: it reads the installed package, never runs a model.

Each engine's table lives with its cell (``surface_rows()``): TensorRT-LLM's is the cell's version guard
(:mod:`workbench.cells.trtllm.guard`), whose rows also record the signature each entry point read, compared
across releases by :mod:`workbench.probes.churn`; another engine's table lists the entry points its own cell
calls, a reference. Behavioural probes say whether a mechanism *works*.
"""

from __future__ import annotations

from .. import cells, claims
from . import Outcome, Probe, ProbeContext, Support, churn
from .installed import NoParams, package_dir


class ContractMapping(Probe):
    version = "4"
    claims = ("entry.contract_table", churn.CLAIM, *(c.id for c in claims.in_section("contract")))
    _some, _all = (Support("rows_verified", "<", None),), (Support("rows_verified", "==", None),)
    rests = {("*", "partial"): (_some, _all), ("*", "refuted"): (_some, (Support("rows_verified", "==", 0),)),
             ("*", "not-applicable"): (_some,), ("*", "confirmed"): (_some, _all)}
    Params = NoParams
    needs_engine = False

    def from_evidence(self, evidence, p) -> Outcome:
        given = evidence["inputs"]
        return mapping_verdict(evidence["rows"], given["engine"], own_table=given["own_table"])

    def run(self, ctx: ProbeContext, p: NoParams) -> Outcome:
        package_dir(ctx.engine)  # not installed → not-run, before any import
        engine = cells.runs(ctx.engine)  # served: the package its server runs
        cell = cells.cell_class(engine)
        own = None if engine == self.claim.subject else cell.surface_table  # another engine: its own table
        out = mapping_verdict(cell.surface_rows(), ctx.engine, own_table=own)
        out.inputs = {"engine": ctx.engine, "own_table": own}
        if engine != ctx.engine:
            out.notes.append(f"{ctx.engine} is {engine} behind a server: this survey reads {engine}'s installed package")
        return out


def mapping_verdict(rows: list[dict], engine: str, own_table: str | None = None) -> Outcome:
    """The contract rows name TensorRT-LLM mechanisms: only a TensorRT-LLM survey (``own_table`` None)
    speaks to them. Another engine's survey checks its own cell's table (``own_table`` says which) and is not-applicable to the
    rows; a row with no mechanism to look for stays inconclusive; version churn needs two versions."""
    table = [r for r in rows if "claim" in r]
    guard = [r for r in rows if "guard" in r]  # TensorRT-LLM: every version-guard row, reported as is
    verified = [r for r in table if r["ok"]]
    broken = [r for r in table if not r["ok"]]
    metrics = {"rows_verified": len(verified), "rows_total": len(table)}
    notes = [f"{r['claim']}: missing or changed {', '.join(r['missing'])}" for r in broken]
    if guard:
        notes.append(f"version guard: {sum(r['ok'] for r in guard)}/{len(guard)} rows ok")
        notes += [f"guard {r['guard']} [{r['feature']}]: {r['status']}, {r['detail']}" for r in guard if not r["ok"]]
    if own_table:
        notes.append("version churn is about TensorRT-LLM releases; this survey reads none")
        per_claim = ({r["claim"]: "not-applicable" for r in table}
                     | {churn.CLAIM: "not-applicable", "entry.contract_table": "not-applicable"})
        said = (f"all {len(table)} of its own rows are present with the expected parameter names"
                if not broken else f"{len(broken)} of its own {len(table)} rows have missing or renamed entry points")
        summary = (f"The contract rows name TensorRT-LLM mechanisms, which {engine} does not have; as a reference, "
                   f"{said} (checked against the {own_table}).")
        return Outcome("not-applicable" if not broken else "partial", summary, metrics, rows, notes, per_claim,
                       rests_on=(Support("rows_verified", "<", len(table)),) if broken else (),
                       claim_reasons={r["claim"]: _reference_reason(r, engine) for r in table}
                       | {churn.CLAIM: "Version churn is about TensorRT-LLM releases; this survey reads none.",
                          "entry.contract_table": summary})
    one = churn.churn_verdict({str(rows[0].get("version")) if rows else "?": churn.signature_table(rows)})
    notes.append(f"version churn: {one.summary}")
    # Existence alone never settles a row: at most partial (behavioural probes say whether it works).
    per_claim = {r["claim"]: ("inconclusive" if not r["mechanism_count"] else "partial" if r["ok"] else "refuted")
                 for r in table} | {churn.CLAIM: one.verdict}
    reasons = {r["claim"]: _subject_reason(r, engine) for r in table} | {churn.CLAIM: one.summary}
    if not broken:
        return Outcome("partial", f"All {len(table)} contract rows map onto mechanisms present in the installed "
                       f"{engine} release with the expected parameter names; existence only, so at most partial "
                       "(behavioural probes say whether they work).", metrics, rows, notes,
                       per_claim | {"entry.contract_table": "partial"},
                       rests_on=(Support("rows_verified", "==", len(table)),), claim_reasons=reasons)
    return Outcome("partial" if verified else "refuted", f"{len(verified)}/{len(table)} contract rows map onto the "
                   f"installed {engine} release; {len(broken)} rows name mechanisms that are missing or changed.",
                   metrics, rows, notes, per_claim,
                   rests_on=(Support("rows_verified", "<", len(table)) if verified else Support("rows_verified", "==", 0),),
                   claim_reasons=reasons)


def _reference_reason(row: dict, engine: str) -> str:
    """Another engine's contract row: why not-applicable (the row names a TensorRT-LLM mechanism, not the feature)."""
    own = ("present with the expected parameter names" if row["ok"]
           else f"missing or changed: {', '.join(row['missing'])}")
    return (f"Not applicable to {engine}: the row names a TensorRT-LLM mechanism; {engine} does this with its own "
            f"calls ({row['mechanism'] or 'none listed'}), {own}.")


def _subject_reason(row: dict, engine: str) -> str:
    """The subject's contract row: what the survey found of its mechanism (existence only)."""
    if not row["mechanism_count"]:
        return (f"The row maps to {row['mechanism'] or 'no mechanism'}: nothing to look for in the installed package, "
                "so the survey cannot speak to it.")
    if row["ok"]:
        return (f"{row['mechanism']} present in the installed {engine} release with the expected parameter names; "
                "existence only, so at most partial.")
    return f"Missing or changed in the installed {engine} release: {', '.join(row['missing'])}."
