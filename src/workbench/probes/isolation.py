"""isolation.cache_salt — KV never crosses manifests.

The same prompt under reuse keys A, A, B: reuse must happen only within A. Measured by the
reuse counters and by a one-sided two-sample Kolmogorov–Smirnov test on prefill latency (the method of
"Auditing Prompt Caching in LM APIs"): repeat-under-A must be faster than cold, B-after-A must not.
A snapshot taken under one manifest must be refused by a cell of another manifest (another
model, or the same model with an adapter).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

from ..contract import ManifestMismatch, WorkbenchError
from . import Outcome, Probe, ProbeContext, param
from .common import fresh_salt, median, timed, token_ids


@dataclass(frozen=True)
class Params:
    prompt_tokens: int = param(192, "tokens in the shared prompt")
    trials: int = param(12, "timing samples per procedure")
    alpha: float = param(0.01, "KS significance level")
    other_model: str = param("synthetic:tiny,seed=1", "a model with another manifest, for snapshot refusal")
    adapter: str | None = param(None, "a LoRA adapter path: adds an adapter-manifest arm when given")
    seed: int = param(0, "seed for the probe's own token ids")

    def __post_init__(self) -> None:
        if self.trials < 4:
            raise ValueError("trials must be at least 4 for a KS test")
        if not 0 < self.alpha < 1:
            raise ValueError("alpha must be in (0, 1)")


class CacheSalt(Probe):
    name = "isolation.cache_salt"
    claim = "Manifest-keyed reuse validity: `cache_salt` = manifest digest ⊕ adapter digests; KV never crosses manifests."
    claims = ("contract.manifest", "contract.lora")
    Params = Params

    def run(self, ctx: ProbeContext, p: Params) -> Outcome:
        rng = np.random.default_rng(p.seed)
        rows: list[dict] = []
        with ctx.open() as cell:
            d = cell.describe()
            for t in range(p.trials):
                prompt = token_ids(rng, p.prompt_tokens, d)
                a, b = fresh_salt("A"), fresh_salt("B")
                for proc, salt in (("cold A", a), ("repeat A", a), ("other B", b)):
                    elapsed, st = timed(cell.ensure_prefix, prompt, salt=salt)
                    rows.append({"trial": t, "procedure": proc, "reused_tokens": st.reused_tokens,
                                 "computed_tokens": st.computed_tokens, "prefill_s": elapsed, "exact": st.exact})
            snap = cell.snapshot()
        refusals = [self._refusal(ctx, snap, p.other_model, {}, "other model")]
        if p.adapter:
            refusals.append(self._refusal(ctx, snap, ctx.model, {"adapters": [p.adapter]}, "same model + adapter"))
        return _verdict(rows, refusals, p)

    def _refusal(self, ctx: ProbeContext, snap, model: str, options: dict, label: str) -> dict:
        try:
            with ctx.open(model, **options) as other:
                other.restore(snap)
            return {"arm": label, "refused": False, "error": None}
        except ManifestMismatch as e:
            return {"arm": label, "refused": True, "error": str(e)}
        except WorkbenchError as e:  # the other manifest cannot be opened on this engine
            return {"arm": label, "refused": None, "error": str(e)}


def _verdict(rows: list[dict], refusals: list[dict], p: Params) -> Outcome:
    by = {proc: [r for r in rows if r["procedure"] == proc] for proc in ("cold A", "repeat A", "other B")}
    t = {k: [r["prefill_s"] for r in v] for k, v in by.items()}
    # One-sided: a cache hit can only make a request faster ("greater" = first sample's CDF lies above).
    ks_same = stats.ks_2samp(t["repeat A"], t["cold A"], alternative="greater").pvalue
    ks_other = stats.ks_2samp(t["other B"], t["cold A"], alternative="greater").pvalue
    cross = sum(r["reused_tokens"] for r in by["other B"])
    within = min(r["reused_tokens"] for r in by["repeat A"])
    metrics = {"cross_manifest_reused_tokens": cross, "reused_tokens": within,
               "ks_p_same_manifest": ks_same, "ks_p_other_manifest": ks_other,
               "ttft_cold_s": median(t["cold A"]), "ttft_warm_s": median(t["repeat A"])}
    notes = [f"snapshot onto {r['arm']}: " + ("refused" if r["refused"] else "ACCEPTED" if r["refused"] is False
                                              else f"not testable ({r['error']})") for r in refusals]
    lora = {}
    if len(refusals) > 1:
        lora = {"contract.lora": "confirmed" if refusals[1]["refused"] else
                "refuted" if refusals[1]["refused"] is False else "inconclusive"}
    else:
        notes.append("no adapter given: the adapter arm did not run")
    leaks = []
    if cross:
        leaks.append(f"{cross} tokens reused across keys")
    if ks_other < p.alpha:
        leaks.append(f"other-key requests are faster than cold (one-sided KS p={ks_other:.3g})")
    if any(r["refused"] is False for r in refusals):
        leaks.append("a snapshot was restored onto another manifest")
    if leaks:
        return Outcome("refuted", "KV crossed manifests: " + "; ".join(leaks) + ".", metrics, rows + refusals, notes, lora)
    if within == 0 or ks_same >= p.alpha:
        return Outcome("inconclusive", "No reuse was observed even within one key, so isolation cannot be told apart "
                       f"from no caching (repeat reuse {within}, KS p={ks_same:.3g}).", metrics, rows + refusals, notes, lora)
    return Outcome("confirmed", f"Reuse stayed within one key: repeats under A reused {within} tokens (faster than "
                   f"cold, one-sided KS p={ks_same:.2g}), B reused 0 and was not faster (p={ks_other:.2g}), and "
                   "snapshots were refused across manifests.", metrics, rows + refusals, notes, lora)
