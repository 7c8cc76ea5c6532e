"""reuse.per_request_metrics — which per-request reuse fields exist, in what unit, and how exact.

Each matrix row is a (setup, probe) pair under its own fresh salt, so the ground truth is simply
the common token prefix of the two prompts, on every engine (per-slot or radix-tree memory alike).
The row's reported reuse (the cell's PrefixStatus), the engine's own counters, the KV event stream
(when present) and the prefill time are reconciled against that truth; every disagreement is kept.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import Outcome, Probe, ProbeContext, param
from ..contract import common_prefix
from .common import block_size, fresh_salt, median, timed, token_ids


@dataclass(frozen=True)
class Params:
    blocks: int = param(4, "k: prompts are about k blocks long")
    nominal_block: int = param(32, "block used for k·B±1 boundaries when the engine reuses per token")
    tail_tokens: int = param(16, "length of a divergent tail")
    repeats: int = param(3, "repetitions of the matrix (timing spread)")
    seed: int = param(0, "seed for the probe's own token ids")

    def __post_init__(self) -> None:
        if self.blocks < 2 or self.nominal_block < 2 or self.tail_tokens < 1 or self.repeats < 1:
            raise ValueError("blocks ≥ 2, nominal_block ≥ 2, tail_tokens ≥ 1 and repeats ≥ 1 are required")


def matrix(rng: np.random.Generator, k: int, B: int, tail: int, draw) -> list[tuple[str, list[int], list[int], bool]]:
    """(case, setup prompt, probe prompt, same salt?) — the probe's chosen token ids."""
    L = k * B + 1
    x = draw(L)

    def fork(n: int) -> list[int]:
        return x[:n] + draw(L - n + tail)

    return [
        ("cold", draw(L), x, True),  # setup shares nothing with x
        ("exact repeat", x, x, True),
        (f"shared {k - 1} blocks", x, fork((k - 1) * B), True),
        (f"shared {k - 1}·B+1", x, fork((k - 1) * B + 1), True),
        (f"shared {k - 1}·B−1", x, fork((k - 1) * B - 1), True),
        ("divergent tail", x, x[:L - tail] + draw(tail), True),
        ("extension", x, x + draw(tail), True),
        ("other salt", x, x, False),
    ]


def classify(truth: int, reported: int, prompt: int, granularity: int) -> str:
    if reported == truth:
        return "exact"
    if truth == prompt and reported == prompt - 1:
        return "last-token rule"
    if granularity > 1 and 0 <= truth - reported < granularity + 1:
        return "block rounding"
    return "mismatch"


class PerRequestMetrics(Probe):
    name = "reuse.per_request_metrics"
    claim = "Exact LLM-API surface and granularity of per-request KV reuse metrics."
    claims = ("unknown.reuse_metrics", "risk.reuse_metrics")
    Params = Params

    def run(self, ctx: ProbeContext, p: Params) -> Outcome:
        rows: list[dict] = []
        with ctx.open() as cell:
            d = cell.describe()
            B = block_size(d, p.nominal_block)
            has_counters = "request_counters" in d.observers
            has_events = "kv_events" in d.observers
            for rep in range(p.repeats):
                rng = np.random.default_rng(p.seed + rep)
                for case, setup, probe, same in matrix(rng, p.blocks, B, p.tail_tokens, lambda n, rng=rng: token_ids(rng, n, d)):
                    salt = fresh_salt("reuse")
                    t_setup, _ = timed(cell.ensure_prefix, setup, salt=salt)
                    if has_events:
                        cell.drain_kv_events()
                    t_probe, st = timed(cell.ensure_prefix, probe, salt=salt if same else fresh_salt("other"))
                    events = cell.drain_kv_events() if has_events else []
                    truth = common_prefix(setup, probe) if same else 0
                    engine_reused = _engine_reused(st.engine_counters, len(probe), B) if has_counters else None
                    rows.append({
                        "repeat": rep, "case": case, "prompt_tokens": len(probe), "truth_reused": truth,
                        "reported_reused": st.reused_tokens, "reported_exact": st.exact,
                        "granularity": st.granularity_tokens, "engine_reused": engine_reused,
                        "engine_counters": dict(st.engine_counters),
                        "stored_blocks": sum(len(e.block_hashes) for e in events if e.kind == "stored") if has_events else None,
                        "t_setup_s": t_setup, "t_probe_s": t_probe,
                        "reported_vs_truth": classify(truth, st.reused_tokens, len(probe), st.granularity_tokens),
                        "engine_vs_truth": (classify(truth, engine_reused, len(probe), st.granularity_tokens)
                                            if engine_reused is not None else "no channel"),
                    })
            fields = sorted({k for r in rows for k in r["engine_counters"]})
        return _verdict(rows, fields, d.engine, has_counters, has_events)


def _engine_reused(counters: dict, prompt: int, B: int) -> int | None:
    """Reuse as the engine itself counts it, in tokens."""
    if "num_reused_blocks" in counters:
        return min(prompt, int(counters["num_reused_blocks"]) * B)
    if "n_p_eval" in counters:
        return prompt - int(counters["n_p_eval"]) - int(counters.get("n_eval", 0))
    return None


def _verdict(rows: list[dict], fields: list[str], engine: str, has_counters: bool, has_events: bool) -> Outcome:
    n = len(rows)
    exact = sum(r["reported_vs_truth"] == "exact" for r in rows)
    engine_ok = [r for r in rows if r["engine_vs_truth"] not in ("no channel",)]
    mism = [r for r in rows if r["reported_vs_truth"] == "mismatch"]
    disagree = [r for r in rows if r["engine_reused"] is not None and r["engine_reused"] != r["reported_reused"]]
    granularity = max(r["granularity"] for r in rows)
    cold = [r["t_probe_s"] for r in rows if r["case"] == "cold"]
    warm = [r["t_probe_s"] for r in rows if r["case"] == "exact repeat"]
    timing_disagree = [r for r in rows if r["case"] == "exact repeat" and r["t_probe_s"] > median(cold)]
    metrics = {
        "reuse_exact_fraction": exact / n,
        "max_reuse_error_tokens": max(abs(r["reported_reused"] - r["truth_reused"]) for r in rows),
        "disagreements": len(mism) + len(disagree) + len(timing_disagree),
        "granularity_tokens": granularity,
        "ttft_cold_s": median(cold), "ttft_warm_s": median(warm),
        "ttft_ratio": median(warm) / median(cold) if cold and median(cold) > 0 else None,
    }
    unit = "tokens" if granularity == 1 else f"blocks of {granularity} tokens"
    channels = (f"engine counters [{', '.join(fields)}]" if has_counters else "no engine counters") + \
               (", KV events" if has_events else ", no KV events")
    notes = [f"channels: {channels}",
             f"engine channel agreed with truth on {sum(r['engine_vs_truth'] == 'exact' for r in engine_ok)}"
             f"/{len(engine_ok)} requests"]
    notes += [f"disagreement: {r['case']} (repeat {r['repeat']}): truth {r['truth_reused']}, reported "
              f"{r['reported_reused']}, engine counters imply {r['engine_reused']}" for r in mism + disagree]
    notes += [f"timing disagreement: exact repeat {r['t_probe_s']:.4f}s slower than median cold" for r in timing_disagree]
    if not has_counters:
        return Outcome("refuted", f"{engine} exposes no per-request reuse counters; reuse can only be estimated "
                       "from events or timing.", metrics, rows, notes, {"risk.reuse_metrics": "confirmed"})
    if mism:
        return Outcome("partial", f"{engine} reports per-request reuse ({', '.join(fields)}) but {len(mism)} of {n} "
                       "requests disagree with the token-id ground truth beyond its granularity.",
                       metrics, rows, notes, {"risk.reuse_metrics": "partial"})
    if granularity == 1 and exact == n:
        agree = len(engine_ok) - len(disagree)
        summary = (f"The {engine} cell reports per-request reuse exactly, per token, on all {n} requests; the "
                   f"engine's own counters ({', '.join(fields)}) agree on {agree}/{len(engine_ok)}.")
        return Outcome("confirmed", summary, metrics, rows, notes, {"risk.reuse_metrics": "refuted"})
    summary = (f"{engine} reports per-request reuse in {unit} ({', '.join(fields)}): {exact}/{n} requests exact, the rest "
               "within block rounding or the last-token rule, so reuse counts are labelled estimates.")
    return Outcome("partial", summary, metrics, rows, notes, {"risk.reuse_metrics": "partial"})
