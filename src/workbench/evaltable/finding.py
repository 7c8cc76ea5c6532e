"""Seed 004's "prefix caching confirmed active", one finding per backend, from the table's shared-prefix cells.

Every run of a shared-prefix workload sends its first ``concurrency`` requests before any could find the shared
system prompt cached; each later one (a *repeat*) can. The verdict rests on the server's own count of what it read
from its cache for the repeats (``usage.prompt_tokens_details.cached_tokens`` in each response, as AIPerf recorded
it): the median over the repeats of cached tokens / the shared prefix's tokens. At least :data:`COVER` of the
prefix: confirmed; less: refuted (the server computed what it had already seen); no repeat, or no count in the
responses: inconclusive. A second reading of the same runs rests beside it: the server's own ``/metrics`` cache
counter (:attr:`.backends.Backend.counters`), read before and after each shared-prefix run, per repeat over the
prefix's tokens; the two must agree (else inconclusive), and where ``/metrics`` does not answer (a server found at
``--endpoint`` without them) the verdict rests on the per-request counts alone and says so. The TTFT drop (median repeat TTFT over median first-request TTFT, with a percentile
bootstrap interval) stands beside it, timed by AIPerf: it cannot confirm anything.

The fault that must refute it is the engine's own switch (``workbench evaltable --no-prefix-caching``, each
backend's :attr:`.backends.Backend.cache_off`). Findings are declared like a probe's (:class:`PrefixCaching`,
registered as the ``evaltable`` source of :mod:`workbench.probes`), so :mod:`workbench.settle` re-derives them.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from .. import claims, environment, findings, probes
from ..metrics import Support
from ..probes import Declared, Figure, Outcome
from .backends import Counters
from .exports import CellExport

CLAIM = "seed004.prefix_caching"
PROBE = "evaltable.prefix_caching"
COVER = 0.5  # repeats' median cached tokens / shared prefix tokens at or above which the prefix was reused
RESAMPLES, LEVEL = 2000, 0.95
METRICS_READING = "engine_metrics_prefix_cached"  # the server's /metrics counter: the second engine reading


class PrefixCaching(Declared):
    """The table's prefix-caching findings: the claim, the version and what each verdict rests on."""

    version = "2"  # 2: the server's /metrics counter rests beside the per-request counts
    claims = (CLAIM,)
    rests = {("*", v): ((Support("engine_repeat_prefix_cached", op, COVER), Support("engine_metrics_prefix_cached", op, COVER)),
                        (Support("engine_repeat_prefix_cached", op, COVER),))
             for v, op in (("confirmed", ">="), ("refuted", "<"))}
    figures = (Figure("throughput", "evaltable_throughput"), Figure("ttft_cold_cached", "evaltable_ttft"))

    def obtained(self, found: Sequence[findings.Finding]) -> str:
        return "workbench evaltable (AIPerf's per-request records)"

    def outcome_defaults(self) -> dict[str, bool]:
        """A table run with the server's prefix caching off (the fault) refutes by construction: exploratory."""
        return {"prefix_caching": True}

    def rederive(self, f: findings.Finding, claim: claims.Claim) -> list[str]:
        """The rule's, and: a /metrics reading the finding recorded is one its verdict rests on (resting on the
        per-request counts alone is for a server whose /metrics did not answer; a reading that disagrees makes
        the verdict inconclusive, never one left aside)."""
        why = super().rederive(f, claim)
        rested = {s.metric for s in f.supports_of(claim.id)} if not why else set()
        if not why and METRICS_READING in f.metrics and f.verdict_on(claim.id) in ("confirmed", "refuted") \
                and METRICS_READING not in rested:
            why.append(f"its /metrics reading ({METRICS_READING}) was recorded, but the verdict does not rest on it")
        return why


@dataclass(frozen=True)
class Served:
    """What the finding says about the server it measured: its backend, engine version and how it was started."""

    backend: str
    engine_version: str | None
    prefix_caching: bool  # False: started with the engine's own switch off (the fault)
    prefix_tokens: int


def _repeats(runs: Sequence[tuple[int, CellExport]]) -> tuple[list[dict], list[float], list[float]]:
    """Each request as an evidence row, and the first requests' and the repeats' TTFTs."""
    rows, first, repeat = [], [], []
    for concurrency, run in runs:
        for i, r in enumerate(run.requests):
            is_repeat = i >= concurrency
            (repeat if is_repeat else first).append(r.ttft_s)
            rows.append({"kind": "request", "run": run.folder.name, "concurrency": concurrency, "order": i,
                         "repeat": is_repeat,
                         "ttft_s": r.ttft_s, "prompt_tokens": r.prompt_tokens, "cached_tokens": r.cached_tokens})
    return rows, first, repeat


def ttft_drop(first: Sequence[float], repeat: Sequence[float], seed: int = 0) -> dict[str, float]:
    """Median repeat TTFT / median first-request TTFT with a percentile bootstrap interval (each group resampled
    on its own); empty where either group has fewer than two requests."""
    if len(first) < 2 or len(repeat) < 2:
        return {}
    from scipy import stats

    def ratio(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.median(a, axis=axis) / np.median(b, axis=axis)

    a, b = np.asarray(repeat, float), np.asarray(first, float)
    ci = stats.bootstrap((a, b), ratio, vectorized=True, n_resamples=RESAMPLES, confidence_level=LEVEL,
                         method="percentile", rng=np.random.default_rng(seed)).confidence_interval
    return {"load_ttft_repeat_over_first": float(ratio(a, b)), "load_ttft_repeat_over_first_ci_low": float(ci.low),
            "load_ttft_repeat_over_first_ci_high": float(ci.high)}


def decide(rows: Sequence[Mapping[str, Any]], prefix_tokens: int, scraped: Counters | None = None
           ) -> tuple[str, str, dict, tuple[Support, ...]]:
    """The verdict, its reason in words, the engine-read metrics and the supports it rests on: the per-request
    counts, and the server's ``/metrics`` counters over the same runs (``scraped``) where it answered them."""
    repeats = [r for r in rows if r["repeat"]]
    counted = [r["cached_tokens"] for r in repeats if r["cached_tokens"] is not None]
    if not repeats:
        return "inconclusive", "no request could find the prefix cached (no run sent more than its concurrency)", {}, ()
    if len(counted) < len(repeats):
        return "inconclusive", (f"the server reported cached tokens on {len(counted)} of {len(repeats)} repeats "
                                "(vLLM: --enable-prompt-tokens-details)"), {}, ()
    cover = statistics.median(counted) / prefix_tokens
    values = {"engine_repeat_prefix_cached": cover}
    said = (f"the server read a median {statistics.median(counted):.0f} cached tokens on {len(repeats)} requests "
            f"that repeated a {prefix_tokens}-token shared prefix ({cover:.0%} of it)")
    verdict, op = ("confirmed", ">=") if cover >= COVER else ("refuted", "<")
    rests = [Support("engine_repeat_prefix_cached", op, COVER)]
    if scraped is None:
        said += "; the server's /metrics did not answer its cache counters: the per-request counts alone"
    else:
        per_repeat = scraped.cached / (len(repeats) * prefix_tokens)
        values |= {"engine_metrics_prefix_cached": per_repeat, "engine_metrics_cached_tokens": scraped.cached}
        said += (f"; its /metrics counted {scraped.cached:.0f} cached prompt tokens over the same runs "
                 f"({per_repeat:.0%} of the prefix per repeat)")
        if (per_repeat >= COVER) != (cover >= COVER):
            return "inconclusive", said + ": the two readings disagree", values, ()
        rests.append(Support("engine_metrics_prefix_cached", op, COVER))
    return verdict, said, values, tuple(rests)


def hit_rates(rows: Sequence[Mapping[str, Any]], prefix_tokens: int, scraped: Counters | None) -> dict[str, float]:
    """The cross-check of hit rates over the shared-prefix runs: the server's (``/metrics``: cached / looked-up
    prompt tokens) beside the workload's theoretical one (every repeat reads the whole prefix, nothing else is
    read: computed here, over the prompt tokens the server counted)."""
    prompt = sum(r["prompt_tokens"] or 0 for r in rows)
    out = {}
    if prompt:
        out["expected_prefix_hit_rate"] = sum(r["repeat"] for r in rows) * prefix_tokens / prompt
    if scraped is not None and scraped.looked_up > 0:
        out["engine_metrics_hit_rate"] = scraped.cached / scraped.looked_up
    return out


def cell_row(workload: str, concurrency: int, run: CellExport) -> dict:
    """One AIPerf run of the table as an evidence row beside the requests (``kind`` ``cell``): what the figures
    draw its throughput from; nothing rests on it."""
    return {"kind": "cell", "workload": workload, "concurrency": concurrency, "run": run.folder.name,
            "output_tokens_per_s": run.values["output_tokens_per_s"], "requests_per_s": run.values["requests_per_s"],
            "ttft_s": run.values["load_ttft_p50_s"]}


def finding(served: Served, runs: Sequence[tuple[int, CellExport]], model: Any, setup: Mapping[str, Any],
            scraped: Counters | None = None, cells: Sequence[dict] = ()) -> findings.Finding:
    """The backend's finding from its shared-prefix runs (``(concurrency, export)`` each) and the server's
    ``/metrics`` counters over them (``scraped``; None where it did not answer them); ``cells``
    (:func:`cell_row`, every run of the backend's table) ride along in its evidence for the figures."""
    rows, first, repeat = _repeats(runs)
    verdict, said, values, rests = decide(rows, served.prefix_tokens, scraped)
    drop, rates = ttft_drop(first, repeat), hit_rates(rows, served.prefix_tokens, scraped)
    if drop:
        said += (f"; TTFT of the repeats / of the first requests {drop['load_ttft_repeat_over_first']:.3g}× "
                 f"[{drop['load_ttft_repeat_over_first_ci_low']:.3g}, "
                 f"{drop['load_ttft_repeat_over_first_ci_high']:.3g}] ({LEVEL:.0%} percentile bootstrap, timed)")
    if len(rates) == 2:
        said += (f"; hit rate {rates['engine_metrics_hit_rate']:.0%} as /metrics counted it, "
                 f"{rates['expected_prefix_hit_rate']:.0%} expected of the workload (computed)")
    switch = "on" if served.prefix_caching else "off (the engine's own switch: the fault)"
    outcome = Outcome(verdict, f"Prefix caching {verdict} on {served.backend}, caching {switch}: {said}.",
                      values | drop | rates, [*rows, *cells], rests_on=rests,
                      notes=[f"repeats: each run's requests after its first `concurrency` (those sent before any "
                             f"could find the prefix cached); confirmed at a median cover of {COVER:.0%} or more",
                             f"bootstrap: B={RESAMPLES}, level {LEVEL:.0%}, each group resampled on its own"])
    return _as_finding(outcome, served, model, setup)


def _as_finding(o: Outcome, served: Served, model: Any, setup: Mapping[str, Any]) -> findings.Finding:
    o = probes.at_most_inconclusive_without_engine(o)
    decl = probes.declared(PROBE)
    probes.check_rests(decl, o, subject=False)
    env = environment.fingerprint(served.backend, served.engine_version, model, None, {"evaltable": dict(setup)})
    return findings.Finding(
        probe=PROBE, probe_version=decl.version, claims=[CLAIM], verdict=o.verdict, summary=o.summary,
        engine=served.backend, environment=env,
        params={"model": setup.get("model"), "prefix_tokens": served.prefix_tokens,
                "prefix_caching": served.prefix_caching},
        metrics=findings.metric_values(o.metrics),
        evidence={"columns": list(dict.fromkeys(k for r in o.rows for k in r)), "rows": o.rows, "notes": o.notes},
        rests_on=findings.supports_doc(o.rests_on))


def not_run(backend: str, reason: str, setup: Mapping[str, Any]) -> findings.Finding:
    """The finding of a backend the table cannot measure here: ``not-run`` with the reason (and its command)."""
    env = environment.fingerprint(backend, None, None, None, {"evaltable": dict(setup)})
    return findings.Finding(probe=PROBE, probe_version=PrefixCaching.version, claims=[CLAIM], verdict="not-run",
                            summary=f"Not run on {backend}: {reason}", engine=backend, environment=env,
                            params={"model": setup.get("model")}, reason=reason)
