"""Seed 004's "prefix caching confirmed active", one finding per backend, from the table's shared-prefix cells.

Every run of a shared-prefix workload sends its first ``concurrency`` requests before any could find the shared
system prompt cached; each later one (a *repeat*) can. The verdict rests on the server's own count of what it read
from its cache for the repeats (``usage.prompt_tokens_details.cached_tokens`` in each response, as AIPerf recorded
it): the median over the repeats of cached tokens / the shared prefix's tokens. At least :data:`COVER` of the
prefix: confirmed; less: refuted (the server computed what it had already seen); no repeat, or no count in the
responses: inconclusive. A second reading of the same runs rests beside it: the server's own ``/metrics`` cache
counter (:attr:`.backends.Backend.counters`), read before and after each shared-prefix run, per repeat over the
prefix's tokens, over the runs where both reads answered (one that failed is left out of it, named); the two must
agree (else inconclusive). Where ``/metrics`` answered over no run (a server found at ``--endpoint`` without them)
the verdict rests on the per-request counts alone and says so; where the counter is the per-request count's own
variable (llama-server: :attr:`.backends.Backend.same_counter`) it checks their sum and rests nothing. The TTFT drop (median repeat TTFT over median first-request TTFT, with a percentile
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
from ..certify import classes
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

    version = "3"  # 2: the server's /metrics counter rests beside the per-request counts; 3: not where it is the
    # same variable (params.metrics_counter "same"), and a run whose /metrics read failed is left out of it alone
    claims = (CLAIM,)
    # each backend served over OpenAI chat completions (stream_options.include_usage, cached tokens read): the
    # shape of contenox v1.0.0's vllm backend, driven by AIPerf, not by a contenox runtime
    result_class = classes.ResultClass.RAW.value
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
        if why or METRICS_READING not in f.metrics or f.verdict_on(claim.id) not in ("confirmed", "refuted"):
            return why
        from .backends import BACKENDS

        rested = {s.metric for s in f.supports_of(claim.id)}
        same = f.engine in BACKENDS and bool(BACKENDS[f.engine].same_counter)  # the source's word, not the file's
        value = lambda tag: (f.metrics.get(tag) or {}).get("value")  # noqa: E731
        both = (value(METRICS_READING), value("engine_repeat_prefix_cached"))
        if not all(isinstance(v, (int, float)) for v in both) or (both[0] >= COVER) != (both[1] >= COVER):
            why.append(f"its /metrics reading ({METRICS_READING} {both[0]!r}) and the per-request counts "
                       f"({both[1]!r}) disagree: the rule says inconclusive")
        elif same and METRICS_READING in rested:
            why.append(f"its /metrics reading ({METRICS_READING}) is the variable the per-request counts are "
                       f"({BACKENDS[f.engine].same_counter}), yet the verdict rests on it as a second reading")
        elif not same and METRICS_READING not in rested:
            why.append(f"its /metrics reading ({METRICS_READING}) was recorded, but the verdict does not rest on it")
        return why


@dataclass(frozen=True)
class Served:
    """What the finding says about the server it measured: its backend, engine version and how it was started."""

    backend: str
    engine_version: str | None
    prefix_caching: bool  # False: started with the engine's own switch off (the fault)
    prefix_tokens: int
    same_counter: str = ""  # where /metrics' counter is the per-request count's own variable: the source saying so


Run = Sequence[tuple[int, CellExport]]
"""One AIPerf run of a shared-prefix workload: its phases in the order they ran, ``(concurrency, export)`` each."""


def _repeats(runs: Sequence[Run]) -> tuple[list[dict], list[float], list[float]]:
    """Each request as an evidence row, and the first requests' and the repeats' TTFTs. A run's first phase sends
    its first ``concurrency`` requests before any could find the prefix cached; every later request, and every
    request of a later phase (the first phase computed the prefix), is a repeat."""
    rows, first, repeat = [], [], []
    for k, phases in enumerate(runs):
        for p, (concurrency, run) in enumerate(phases):
            for i, r in enumerate(run.requests):
                is_repeat = p > 0 or i >= concurrency
                (repeat if is_repeat else first).append(r.ttft_s)
                rows.append({"kind": "request", "run": f"{run.folder.name}/{run.phase}", "run_index": k,
                             "concurrency": concurrency, "order": i, "repeat": is_repeat, "ttft_s": r.ttft_s,
                             "prompt_tokens": r.prompt_tokens, "cached_tokens": r.cached_tokens})
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


Reading = Counters | str
"""One shared-prefix run's ``/metrics`` rise (:func:`.backends.rise`), or why it could not be read."""


def decide(rows: Sequence[Mapping[str, Any]], prefix_tokens: int, scraped: Sequence[Reading] | Counters | None = None,
           same_counter: str = "") -> tuple[str, str, dict, tuple[Support, ...]]:
    """The verdict, its reason in words, the engine-read metrics and the supports it rests on: the per-request
    counts, and the server's ``/metrics`` counters over the same runs (``scraped``: each run's reading, aligned
    with the rows' ``run_index``; one :class:`Counters` for all of them) over the runs where they were read. Where
    that counter is the per-request count's own variable (``same_counter``, the source saying so) it checks
    their sum and is no second reading: the verdict rests on the per-request counts."""
    repeats = [r for r in rows if r["repeat"]]
    counted = [r["cached_tokens"] for r in repeats if r["cached_tokens"] is not None]
    if not repeats:
        return "inconclusive", "no request could find the prefix cached (no run sent more than its concurrency)", {}, ()
    if len(counted) < len(repeats):
        return "inconclusive", (f"the server reported cached tokens on {len(counted)} of {len(repeats)} repeats "
                                "(vLLM: --enable-prompt-tokens-details)"), {}, ()
    cover = statistics.median(counted) / prefix_tokens
    values: dict[str, float] = {"engine_repeat_prefix_cached": cover}
    said = (f"the server read a median {statistics.median(counted):.0f} cached tokens on {len(repeats)} requests "
            f"that repeated a {prefix_tokens}-token shared prefix ({cover:.0%} of it)")
    verdict, op = ("confirmed", ">=") if cover >= COVER else ("refuted", "<")
    rests = [Support("engine_repeat_prefix_cached", op, COVER)]
    readings = [scraped] if isinstance(scraped, Counters) else list(scraped or [])
    read = {i for i, x in enumerate(readings) if isinstance(x, Counters)}
    unread = "; ".join(x for x in readings if isinstance(x, str))
    mine = [r for r in repeats if r.get("run_index", 0) in read]
    if not mine:
        said += (f"; the server's /metrics did not answer its cache counters ({unread or 'not read'}): the "
                 "per-request counts alone")
        return verdict, said, values, tuple(rests)
    total = sum((readings[i] for i in sorted(read)), Counters(0.0, 0.0))
    per_repeat = total.cached / (len(mine) * prefix_tokens)
    values |= {"engine_metrics_prefix_cached": per_repeat, "engine_metrics_cached_tokens": total.cached}
    said += (f"; its /metrics counted {total.cached:.0f} cached prompt tokens over {len(read)} of {len(readings)} "
             f"run(s) ({per_repeat:.0%} of the prefix per repeat)")
    if unread:
        said += f", the other(s) left out of it: {unread}"
    same_runs = statistics.median(r["cached_tokens"] for r in mine) / prefix_tokens
    if (per_repeat >= COVER) != (same_runs >= COVER):
        return "inconclusive", said + ": the two readings disagree", values, ()
    if same_counter:
        answered = sum(r["cached_tokens"] or 0 for r in rows if r.get("run_index", 0) in read)
        if abs(total.cached - answered) >= 0.5:  # one variable: a difference is requests the table did not send
            return "inconclusive", (said + f", but the responses of those runs counted {answered:.0f}: that counter "
                                    f"is their own variable ({same_counter}), so something else used the server "
                                    "while the table ran"), values, ()
        said += (f"; that counter is the per-request counts' own variable ({same_counter}): it equals their sum "
                 f"({answered:.0f}), no second reading, and the verdict rests on the per-request counts")
    else:
        rests.append(Support("engine_metrics_prefix_cached", op, COVER))
    return verdict, said, values, tuple(rests)


def hit_rates(rows: Sequence[Mapping[str, Any]], prefix_tokens: int, scraped: Sequence[Reading] | Counters | None
              ) -> dict[str, float]:
    """The cross-check of hit rates over the shared-prefix runs whose ``/metrics`` was read: the server's (cached /
    looked-up prompt tokens) beside the workload's theoretical one (every repeat reads the whole prefix, nothing
    else is read: computed here, over the prompt tokens the server counted)."""
    readings = [scraped] if isinstance(scraped, Counters) else list(scraped or [])
    read = {i for i, x in enumerate(readings) if isinstance(x, Counters)}
    mine = [r for r in rows if r.get("run_index", 0) in read] if read else list(rows)
    prompt = sum(r["prompt_tokens"] or 0 for r in mine)
    out = {}
    if prompt:
        out["expected_prefix_hit_rate"] = sum(r["repeat"] for r in mine) * prefix_tokens / prompt
    total = sum((readings[i] for i in sorted(read)), Counters(0.0, 0.0))
    if read and total.looked_up > 0:
        out["engine_metrics_hit_rate"] = total.cached / total.looked_up
    return out


def cell_row(workload: str, concurrency: int, run: CellExport) -> dict:
    """One AIPerf run of the table as an evidence row beside the requests (``kind`` ``cell``): what the figures
    draw its throughput from; nothing rests on it."""
    return {"kind": "cell", "workload": workload, "concurrency": concurrency, "run": f"{run.folder.name}/{run.phase}",
            "output_tokens_per_s": run.values["output_tokens_per_s"], "requests_per_s": run.values["requests_per_s"],
            "ttft_s": run.values["load_ttft_p50_s"]}


def finding(served: Served, runs: Sequence[Run], model: Any, setup: Mapping[str, Any],
            scraped: Sequence[Reading] = (), cells: Sequence[dict] = (), checks: Sequence[str] = ()
            ) -> findings.Finding:
    """The backend's finding from its shared-prefix runs (:data:`Run` each) and the server's ``/metrics``
    counters over each of them (``scraped``, aligned with ``runs``: the rise, or why it was not read); ``cells``
    (:func:`cell_row`, every phase of the backend's table) ride along in its evidence for the figures, ``checks``
    (the TTFT cross-check's words, :mod:`.crosscheck`) in its notes."""
    rows, first, repeat = _repeats(runs)
    verdict, said, values, rests = decide(rows, served.prefix_tokens, scraped, served.same_counter)
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
                      notes=[f"repeats: each run's requests after its first phase's first `concurrency` (those sent "
                             "before any could find the prefix cached), every request of a later phase among them; "
                             f"confirmed at a median cover of {COVER:.0%} or more", *checks,
                             f"bootstrap: B={RESAMPLES}, level {LEVEL:.0%}, each group resampled on its own",
                             *([f"/metrics is the same counter as each response's cached_tokens, not a second "
                                f"reading: {served.same_counter}"] if served.same_counter else [])])
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
                "prefix_caching": served.prefix_caching,
                "metrics_counter": "same" if served.same_counter else "independent"},
        metrics=findings.metric_values(o.metrics),
        evidence={"columns": list(dict.fromkeys(k for r in o.rows for k in r)), "rows": o.rows, "notes": o.notes},
        rests_on=findings.supports_doc(o.rests_on), result_class=classes.for_verdict(o.verdict, decl.result_class))


def not_run(backend: str, reason: str, setup: Mapping[str, Any]) -> findings.Finding:
    """The finding of a backend the table cannot measure here: ``not-run`` with the reason (and its command)."""
    env = environment.fingerprint(backend, None, None, None, {"evaltable": dict(setup)})
    return findings.Finding(probe=PROBE, probe_version=PrefixCaching.version, claims=[CLAIM], verdict="not-run",
                            summary=f"Not run on {backend}: {reason}", engine=backend, environment=env,
                            params={"model": setup.get("model")}, reason=reason,
                            result_class=classes.ResultClass.FAILED.value)
