"""reuse.per_request_metrics — which per-request reuse fields exist, in what unit, and how exact.

Each matrix row is a (setup, probe) pair under its own fresh salt, so the expected reuse is the
common token prefix of the two prompts, on every engine (per-slot or radix-tree memory alike).
Three channels are reconciled against it, every disagreement kept:

* the cell's report (its PrefixStatus): bookkeeping, which alone can confirm nothing;
* the engine's own per-request reuse counter (``PrefixStatus.engine_reused_tokens``: vLLM's
  ``num_cached_tokens``, TensorRT-LLM's ``perf_metrics``) and, where the cell can read KV back
  (``kv_readback``), the KV the engine holds for the sequence before and after the request. An engine
  without a reuse counter (``Description.absent["reuse_counter"]``, e.g. llama.cpp, whose perf
  counters count the tokens the cell chose to send) makes the counter risk ``not-applicable``;
* output equivalence: the engine's logits after the reused request against a cold recompute of the
  same tokens in another sequence (max abs difference). Reuse of the wrong KV cannot pass this. Another
  sequence's request runs between setup and probe, so the probe's logits are its own request's (the last
  prompt token recomputed on the reused KV), never the setup's cached ones. Two cold computations of one
  prompt already differ when the sequence sits at other cells of llama.cpp's unified KV cache (SmolLM2
  Q4_1, 65 tokens: up to ~0.4 with 1 thread; the sums run in another order). So each request is computed
  cold twice, in the other slot and again in its own, at other cells: the largest difference between cold
  computations (median over the run, so one bad control cannot raise it) is the engine's noise floor, and a
  reused request's difference from the other slot's cold run counts only beyond ``noise_margin`` × that
  floor and the tolerance. Cold runs that disagree beyond it, or a floor above half the logits' spread,
  leave the check inconclusive rather than let a fault hide under the noise.

TTFT is the time from the request to the first decoded token, with a fixed thread count; the rows
run in a random order per repeat.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import Decision, Figure, Outcome, Probe, ProbeContext, Support, param, Bound, CONTEXT, COUNT, TOKENS, SEED
from ..engine import common_prefix
from .common import block_size, fresh_salt, median, reported_source, spread, timed, token_ids


@dataclass(frozen=True)
class Params:
    blocks: int = param(4, "k: prompts are about k blocks long", Bound(2))
    nominal_block: int = param(32, "block used for k·B±1 boundaries when the engine reuses per token", Bound(2, CONTEXT))
    tail_tokens: int = param(16, "length of a divergent tail", TOKENS)
    repeats: int = param(3, "repetitions of the matrix (timing spread)", COUNT)
    logits_tolerance: float = param(0.05, "largest |logit| difference a reused request may show against a cold "
                                          "recompute, as a fraction of the cold logits' standard deviation "
                                          "(float rounding of another batch split stays near 0.006)")
    noise_margin: float = param(2.0, "a reused request's logits differ only beyond this × the engine's noise between "
                                     "two cold computations of the same tokens (measured on every request)")
    threads: int = param(1, "engine threads for timed work (fixed, so timings compare)", COUNT)
    seed: int = param(0, "seed for the probe's own token ids", SEED)

    def __post_init__(self) -> None:
        if self.logits_tolerance < 0 or self.noise_margin < 1:
            raise ValueError("logits_tolerance ≥ 0 and noise_margin ≥ 1 are required")


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


def classify(truth: int, reported: int | None, prompt: int, granularity: int) -> str:
    if reported is None:
        return "no channel"
    if reported == truth:
        return "exact"
    if truth == prompt and reported == prompt - 1:
        return "last-token rule"
    if granularity > 1 and 0 <= truth - reported < granularity + 1:
        return "block rounding"
    return "mismatch"


class PerRequestMetrics(Probe):
    version = "5"
    claims = ("unknown.reuse_metrics", "risk.reuse_metrics")
    _wrong, _none = (Support("logits_max_abs_diff", ">", None),), (Support("engine_counted_requests", "==", 0),)
    _exact = ((Support("engine_reuse_exact_fraction", "==", 1),),
              (Support("engine_reuse_exact_fraction", "==", 1), Support("logits_max_abs_diff", "<=", None)))
    _inexact = ((Support("engine_reuse_exact_fraction", "<", 1),),)
    rests = {("*", "refuted"): (_wrong, _none), ("*", "confirmed"): _exact, ("*", "partial"): _inexact,
             ("*", "not-applicable"): ((Support("logits_max_abs_diff", "<=", None),),),
             # the risk row: a counter that is missing or wrong confirms it; an exact one refutes it
             ("risk.reuse_metrics", "confirmed"): (_wrong, _none), ("risk.reuse_metrics", "refuted"): _exact,
             ("risk.reuse_metrics", "not-applicable"): (_wrong, (Support("logits_max_abs_diff", "<=", None),))}
    figures = (Figure("matrix", "reuse_matrix"),
               Figure("timeline", "timeline", {"spans": (("t_setup_s", "setup"), ("ttft_s", "probe to first token")),
                                               "lane": "case", "title": "Per-request timeline"}))
    Params = Params

    def longest(self, p: Params) -> tuple[int, str]:
        """The longest prompt, k·B + 1 and a tail, at the nominal block (llama.cpp's B; an engine with blocks of
        its own uses those: give nominal_block as that engine's block to size it)."""
        return (p.blocks * p.nominal_block + 1 + p.tail_tokens,
                f"blocks × nominal_block + 1 + tail_tokens ({p.blocks} × {p.nominal_block} + 1 + {p.tail_tokens})")

    def run(self, ctx: ProbeContext, p: Params) -> Outcome:
        rows: list[dict] = []
        with ctx.open(slots=2, **ctx.fixed_threads(p.threads)) as cell:
            d = cell.describe()
            B = block_size(d, p.nominal_block)
            no_counter = d.absent.get("reuse_counter")
            has_events = "kv_events" in d.observers
            readback = "kv_readback" in d.observers
            for rep in range(p.repeats):
                rng = np.random.default_rng(p.seed + rep)
                cases = matrix(rng, p.blocks, B, p.tail_tokens, lambda n, rng=rng: token_ids(rng, n, d))
                for i in rng.permutation(len(cases)):
                    case, setup, probe, same = cases[i]
                    salt = fresh_salt("reuse")
                    t_setup, _ = timed(cell.ensure_prefix, setup, salt=salt)
                    # another sequence's request in between: the probe's logits must be its own request's
                    cell.ensure_prefix(token_ids(rng, 1, d), slot=1, salt=fresh_salt("between"))
                    if has_events:
                        cell.drain_kv_events()
                    t_probe, st = timed(cell.ensure_prefix, probe, salt=salt if same else fresh_salt("other"))
                    first = cell.decode(max_tokens=1)
                    events = cell.drain_kv_events() if has_events else []
                    truth = common_prefix(setup, probe) if same else 0
                    c = st.engine_counters
                    engine_reused = st.engine_reused_tokens
                    holds = c.get("engine_resident_after") == len(probe) if readback else None
                    diff = scale = None
                    floor = None
                    if readback:
                        warm = np.asarray(cell.last_logits())
                        cell.ensure_prefix(probe, slot=1, salt=fresh_salt("cold"))
                        cold_logits = np.asarray(cell.last_logits(slot=1))
                        # the same tokens cold again, in the probe's own slot (other cells than slot 1's): the
                        # engine's noise between two cold computations; only the floor, never the reference
                        cell.ensure_prefix(probe, salt=fresh_salt("control"))
                        control = np.asarray(cell.last_logits())
                        floor = float(np.max(np.abs(control - cold_logits)))
                        diff = float(np.max(np.abs(warm - cold_logits)))
                        scale = float(np.std(cold_logits))
                    reported = None if st.source == "none" else st.reused_tokens  # no count is no reading
                    rows.append({
                        "repeat": rep, "case": case, "prompt_tokens": len(probe), "expected_reused": truth,
                        "reported_reused": reported, "reuse_source": st.source, "reported_exact": st.exact,
                        "granularity": st.granularity_tokens, "engine_reused": engine_reused,
                        "engine_holds_prompt": holds, "recomputed_last_token": first.engine_counters.get(
                            "recomputed_last_token"),
                        "engine_resident_before": c.get("engine_resident_before"),
                        "engine_resident_after": c.get("engine_resident_after"),
                        "logits_max_abs_diff": diff, "logits_cold_std": scale,
                        "logits_layout_floor": floor,
                        "engine_counters": dict(c),
                        "stored_blocks": sum(len(e.block_hashes) for e in events if e.kind == "stored") if has_events else None,
                        "t_setup_s": t_setup, "t_probe_s": t_probe, "ttft_s": t_probe + first.ttft_s,
                        "reported_vs_expected": classify(truth, reported, len(probe), st.granularity_tokens),
                        "engine_vs_expected": classify(truth, engine_reused, len(probe), st.granularity_tokens),
                    })
            fields = sorted({k for r in rows for k in r["engine_counters"]})
        return verdict(rows, fields, d.engine, no_counter, p.logits_tolerance, p.noise_margin)


NOISE_CEILING = 0.5  # a cold-to-cold floor above this × the logits' spread leaves nothing to judge reuse by


LOGITS = ("logits_max_abs_diff", "logits_cold_std", "logits_layout_floor")


def _bar(r: dict, tolerance: float, margin: float, floor: float) -> float:
    """The logits difference a request may show: the tolerance and ``margin`` × the engine's cold-to-cold noise."""
    return max(tolerance * r["logits_cold_std"], margin * floor)


def _beyond(value: float | None, r: dict, tolerance: float, margin: float, floor: float) -> bool:
    """A logits difference past both the tolerance and ``margin`` × the engine's own cold-to-cold noise; a
    non-finite difference or bound is never within (NaN compares false, so it must fail, not pass)."""
    if value is None:
        return False
    bound = _bar(r, tolerance, margin, floor)
    return not (math.isfinite(value) and math.isfinite(bound) and value <= bound)


def nonfinite(rows: list[dict]) -> list[dict]:
    """Requests whose logits read-back holds NaN or infinity: no comparison with them is evidence."""
    return [r for r in rows if any(isinstance(r.get(k), float) and not math.isfinite(r[k]) for k in LOGITS)]


def noise(rows: list[dict], tolerance: float, margin: float) -> tuple[float | None, list[dict], bool]:
    """The run's noise floor (median of every request's cold-to-cold difference, so one bad control cannot
    raise the bar for the rest), the requests whose own cold computations disagree beyond it (an engine that
    computes one prompt two ways), and whether the floor is too high to judge reuse at all."""
    floors = [r["logits_layout_floor"] for r in rows if r.get("logits_layout_floor") is not None]
    if not floors:
        return None, [], False
    floor = float(np.median(floors))
    odd = [r for r in rows if _beyond(r.get("logits_layout_floor"), r, tolerance, margin, floor)]
    logits_spread = float(np.median([r["logits_cold_std"] for r in rows if r.get("logits_cold_std")] or [0.0]))
    return floor, odd, floor > NOISE_CEILING * logits_spread


def _floor_text(floor: float | None, margin: float) -> str:
    return f"; within {margin:g} × the engine's own noise floor {floor:.2g}" if floor is not None else ""


@dataclass(frozen=True)
class Reconciliation:
    """What the reuse rule reads, summarised from the matrix rows: how each channel stood to the token-id
    expectation, the logits check against the engine's own noise, and the TTFTs."""

    engine: str
    fields: tuple[str, ...]
    rows: int
    exact: int  # requests whose reported reuse equals the expectation
    counted: int  # requests the engine gave a reuse count for
    engine_exact: int  # of those, counts equal to the expectation
    reported: int  # requests with a reported reuse at all
    mismatched: tuple[dict, ...]  # rows where the cell or the engine missed the expectation beyond granularity
    disagreeing: tuple[dict, ...]  # rows where the engine's count is not the cell's
    lost: tuple[dict, ...]  # rows after which the engine did not hold the prompt
    diffs: tuple[float, ...]  # logits differences from a cold recompute
    floor: float | None  # the engine's cold-to-cold noise floor
    odd: tuple[dict, ...]  # rows whose two cold computations disagree beyond the floor
    too_noisy: bool  # the floor is above NOISE_CEILING × the logits' spread
    wrong: tuple[dict, ...]  # rows whose reused KV changed the output
    wrong_bar: float | None  # the lowest bar a wrong row passed
    clean_bar: float | None  # the highest bar of a reused request
    nonfinite: int  # rows whose logits hold NaN or infinity
    granularity: int
    cold: tuple[float, ...]
    warm: tuple[float, ...]
    source: str | None  # where the reported reuse came from (the engine's counter, the cell's arithmetic)
    no_counter: str | None = None  # why the engine has no reuse counter


def summarise(rows: list[dict], fields: list[str], engine: str, no_counter: str | None, tolerance: float,
              margin: float = 2.0) -> Reconciliation:
    with_engine = [r for r in rows if r["engine_vs_expected"] != "no channel"]
    floor, odd, too_noisy = noise(rows, tolerance, margin)
    wrong = [r for r in rows if _beyond(r["logits_max_abs_diff"], r, tolerance, margin, floor or 0.0)]
    bars = [_bar(r, tolerance, margin, floor or 0.0) for r in rows if r["logits_max_abs_diff"] is not None]
    return Reconciliation(
        engine=engine, fields=tuple(fields), rows=len(rows),
        exact=sum(r["reported_vs_expected"] == "exact" for r in rows), counted=len(with_engine),
        engine_exact=sum(r["engine_vs_expected"] == "exact" for r in with_engine),
        reported=sum(r["reported_reused"] is not None for r in rows),
        mismatched=tuple(r for r in rows if "mismatch" in (r["reported_vs_expected"], r["engine_vs_expected"])),
        disagreeing=tuple(r for r in with_engine if r["engine_reused"] != r["reported_reused"]),
        lost=tuple(r for r in rows if r.get("engine_holds_prompt") is False),
        diffs=tuple(r["logits_max_abs_diff"] for r in rows if r["logits_max_abs_diff"] is not None),
        floor=floor, odd=tuple(odd), too_noisy=too_noisy, wrong=tuple(wrong),
        wrong_bar=min((_bar(r, tolerance, margin, floor or 0.0) for r in wrong), default=None),
        clean_bar=max(bars, default=None), nonfinite=len(nonfinite(rows)),
        granularity=max(r["granularity"] for r in rows),
        cold=tuple(r["ttft_s"] for r in rows if r["case"] == "cold"),
        warm=tuple(r["ttft_s"] for r in rows if r["case"] == "exact repeat"),
        # the cell's report is the engine's counter on vLLM, its arithmetic on llama.cpp, missing where none came back
        source=reported_source(r["reuse_source"] for r in rows), no_counter=no_counter)


RISK = "risk.reuse_metrics"


def decide(s: Reconciliation) -> Decision:
    """The ladder: logits finite → cold runs agree → reuse kept the output → a counter exists → it agrees →
    it is exact per token."""
    na = "not-applicable" if s.no_counter else None
    clean = (Support("logits_max_abs_diff", "<=", s.clean_bar),) if s.clean_bar is not None else ()
    if s.nonfinite:
        return Decision("inconclusive", "nonfinite", {RISK: na or "inconclusive"})
    if s.too_noisy or (s.odd and not s.wrong):
        return Decision("inconclusive", "noisy", {RISK: na or "inconclusive"})
    if s.wrong:
        return Decision("refuted", "wrong-kv", {RISK: na or "confirmed"},
                        (Support("logits_max_abs_diff", ">", s.wrong_bar),))
    if s.no_counter:
        return Decision("not-applicable", "no-counter", {RISK: "not-applicable"}, clean)
    if not s.counted:
        return Decision("refuted", "no-counts", {RISK: "confirmed"}, (Support("engine_counted_requests", "==", 0),))
    inexact = (Support("engine_reuse_exact_fraction", "<", 1),)
    if s.mismatched or s.disagreeing or s.lost:
        return Decision("partial", "disagree", {RISK: "partial"}, inexact)
    if s.granularity == 1 and s.exact == s.rows and s.engine_exact == s.counted:
        return Decision("confirmed", "exact", {RISK: "refuted"},
                        (Support("engine_reuse_exact_fraction", "==", 1), *clean))
    return Decision("partial", "rounded", {RISK: "partial"}, inexact)


def explain(d: Decision, s: Reconciliation, tolerance: float, margin: float) -> str:
    """The verdict's summary in words."""
    engine, n, fields = s.engine, s.rows, ", ".join(s.fields)
    if d.case == "nonfinite":
        return (f"The logits check cannot judge reuse on {engine}: on {s.nonfinite} of {n} requests the engine's "
                "logits (or their differences) were not finite (NaN or infinity), and a comparison with NaN is no "
                "evidence either way; check the model's weights.")
    if d.case == "noisy":
        why = (f"two cold computations of the same tokens differ by {s.floor:.3g} (median), more than "
               f"{NOISE_CEILING:g} × the logits' spread" if s.too_noisy else
               f"on {len(s.odd)} of {n} requests two cold computations of the same tokens disagreed beyond the "
               f"engine's noise floor {s.floor:.3g}")
        return (f"The logits check cannot judge reuse on {engine}: {why}, so a reused request's difference from a "
                "cold recompute says nothing (an engine computing one prompt two ways is itself worth a look).")
    if d.case == "wrong-kv":
        return (f"On {len(s.wrong)} of {n} requests the reused KV changed the output (logits up to "
                f"{max(s.diffs):.3g} from a cold recompute, tolerance {tolerance:g} × the logits' spread"
                + (f" and {margin:g} × the engine's noise floor {s.floor:.3g}" if s.floor is not None else "")
                + "): the reuse is not reuse of the prompt's KV.")
    if d.case == "no-counter":
        checked = (f"every reused request computed the same logits as a cold recompute (max |Δ| {max(s.diffs):.2g}, "
                   f"{len(s.diffs)} requests{_floor_text(s.floor, margin)})" if s.diffs
                   else "no logits could be read back")
        if s.lost:
            checked += f"; the engine did not hold the prompt after {len(s.lost)} request(s)"
        return (f"{engine} has no per-request reuse counter to misreport, so the risk cannot occur here. As a "
                f"reference, the cell's own reuse ({s.exact}/{n} requests equal the token-id expectation) was "
                f"checked on the engine by output equivalence: {checked}.")
    if d.case == "no-counts":
        return (f"{engine} returned no per-request reuse counter on any of {n} requests; reuse can only be "
                "estimated from events or timing.")
    if d.case == "disagree":
        off = len({id(r) for r in s.mismatched + s.disagreeing + s.lost})
        return (f"{engine} reports per-request reuse ({fields}) but {off} of {n} requests disagree across the cell, "
                "the engine and the token-id expectation beyond its granularity.")
    if d.case == "exact":
        checked = (f"; every reused request computed the same logits as a cold recompute (max |Δ| "
                   f"{max(s.diffs):.2g}{_floor_text(s.floor, margin)})" if s.diffs else "")
        return (f"{engine} accounts per-request reuse exactly, per token, on all {n} requests: its own counter "
                f"({fields}) agrees with the token-id expectation{checked}.")
    unit = "tokens" if s.granularity == 1 else f"blocks of {s.granularity} tokens"
    return (f"{engine} reports per-request reuse in {unit} ({fields}): {s.exact}/{n} requests exact, the rest "
            "within block rounding or the last-token rule, so reuse counts are labelled estimates.")


def _metrics(s: Reconciliation, rows: list[dict]) -> dict:
    sc, sw = spread(list(s.cold)), spread(list(s.warm))
    reported = [r for r in rows if r["reported_reused"] is not None]
    out = {
        "reuse_exact_fraction": s.exact / s.rows if s.source else None,
        "max_reuse_error_tokens": max(abs(r["reported_reused"] - r["expected_reused"]) for r in reported)
        if s.source else None,
        "engine_counted_requests": s.counted,
        "disagreements": len(s.mismatched) + len(s.disagreeing) + len(s.wrong),
        "granularity_tokens": s.granularity,
        "ttft_cold_s": median(s.cold), "ttft_warm_s": median(s.warm), "ttft_iqr_s": sc["q3"] - sc["q1"],
        "ttft_warm_iqr_s": sw["q3"] - sw["q1"],
        "ttft_ratio": median(s.warm) / median(s.cold) if s.cold and median(s.cold) > 0 else None,
    }
    if s.counted:
        out["engine_reuse_exact_fraction"] = s.engine_exact / s.counted
    if s.diffs:
        out["logits_max_abs_diff"] = max(s.diffs)
    if s.floor is not None:
        out["logits_layout_floor"] = s.floor
    return out


def _notes(d: Decision, s: Reconciliation, margin: float, rows: list[dict] = ()) -> list[str]:
    sc, sw, n, floor = spread(list(s.cold)), spread(list(s.warm)), s.rows, s.floor
    notes = ["channels: " + (f"engine per-request counters [{', '.join(s.fields)}]" if s.counted else
                              "no engine per-request counters")
             + (f"; logits against a cold recompute on {len(s.diffs)} requests" if s.diffs
                else "; no logits read-back")
             + (f"; cold against cold at other KV cells differs by {floor:.3g} (median over requests: the engine's "
                f"noise floor; a difference counts beyond {margin:g} × it)" if floor is not None else ""),
             f"engine accounting agreed with the token-id expectation on {s.engine_exact}/{s.counted} requests"
             + (f"; the engine returned no reuse count on {n - s.reported} of {n} requests, so the reported reuse "
                "is missing, not 0" if s.reported < n else ""),
             f"TTFT (to the first decoded token) cold median {sc['median']:.4g}s IQR [{sc['q1']:.4g}, {sc['q3']:.4g}], "
             f"exact repeat median {sw['median']:.4g}s IQR [{sw['q1']:.4g}, {sw['q3']:.4g}]"]
    notes += [f"disagreement: {r['case']} (repeat {r['repeat']}): expected {r['expected_reused']}, cell reported "
              f"{r['reported_reused']}, engine accounting {r['engine_reused']}" for r in s.mismatched + s.disagreeing]
    notes += [f"engine does not hold the prompt after {r['case']} (repeat {r['repeat']}): "
              f"{r['engine_resident_after']} of {r['prompt_tokens']} tokens read back" for r in s.lost]
    notes += [f"output changed by reuse: {r['case']} (repeat {r['repeat']}) logits differ by up to "
              f"{r['logits_max_abs_diff']:.3g} from a cold recompute" for r in s.wrong]
    notes += [f"cold computations disagree: {r['case']} (repeat {r['repeat']}) differs by "
              f"{r['logits_layout_floor']:.3g} between two cold runs of the same tokens" for r in s.odd]
    notes += _second_channel(list(rows))
    if d.case == "no-counter":
        notes.insert(0, f"the cell declares no engine reuse counter: {s.no_counter}")
    return notes


def _second_channel(rows: list[dict]) -> list[str]:
    """Where the engine counts reuse two ways (TensorRT-LLM 1.4: exact ``cached_tokens``, and the perf metrics'
    blocks beside them), every request on which the two disagree: the difference is evidence, never hidden."""
    two = [r for r in rows if (r.get("engine_counters") or {}).get("reuse_channels_differ") is not None]
    differ = [r for r in two if r["engine_counters"]["reuse_channels_differ"]]
    if not two:
        return []
    return [f"second channel: the engine's block counts agreed with its exact cached_tokens on {len(two) - len(differ)} "
            f"of {len(two)} requests" + "".join(
                f"; {r['case']} (repeat {r['repeat']}): cached_tokens {r['engine_counters']['cached_tokens']}, blocks "
                f"{r['engine_counters']['block_reused_tokens']}" for r in differ[:5])]


def verdict(rows: list[dict], fields: list[str], engine: str, no_counter: str | None, tolerance: float,
            margin: float = 2.0) -> Outcome:
    """Confirmed: the engine's own reuse counter is exact per token and every reused request computes the
    same logits as a cold recompute. Partial: block-granular or disagreeing. Refuted: reuse that changes the
    output (the KV reused was not the prompt's), or no per-request counter. Not-applicable: the engine
    declares it has no reuse counter (``no_counter``), so the counter risk cannot occur; the logits check
    then stands as the reference that the cell's reuse is sound."""
    s = summarise(rows, fields, engine, no_counter, tolerance, margin)
    d = decide(s)
    sources = {"reuse_exact_fraction": s.source, "max_reuse_error_tokens": s.source} if s.source else {}
    return Outcome(d.verdict, explain(d, s, tolerance, margin), _metrics(s, rows), rows, _notes(d, s, margin, rows),
                   dict(d.claim_verdicts), rests_on=d.rests_on, sources=sources)
