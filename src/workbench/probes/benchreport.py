"""contract.benchreport — contenox's local-node benchmark report, driven through the cell's daemon and the contract only.

:func:`workbench.transport.benchreport.run` (``runtime/benchreport``'s ``Run``) over a harness whose sessions live on
the cell's daemon, reached through modeld's wire: the cold full prefill, the same prefix warm, a changed suffix warm
against a fresh session's output, an edited stable segment against a fresh session's, decode throughput, and the
headline curve, TTFT as the changed suffix grows (``curve``: 0, 256, 1k, 4k, 8k, 16k tokens by default, each point
kept only where the prefix, the suffix and the decode fit the context). By contenox's own classes every row is a
**microbenchmark** (``benchmark-integrity-blueprint.md``): the contract's seam, one process, no product path. Timings
are workbench-timed (one run each: the report's shape, not a distribution); the verdicts rest on the engine's output
and its own reuse counts:

* ``bench.warm_equals_cold`` (tier A2): the warm changed-suffix turn's greedy output equals a fresh session's, and the
  engine itself reused the stable prefix;
* ``bench.edited_miss``: the edited stable segment made the engine compute (a precise miss, not a false reuse) and
  still decodes what a fresh session decodes.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np

from . import Bound, Decision, Figure, NotRunnable, Outcome, Probe, ProbeContext, SEED, Support, param
from ..transport import benchreport as br
from ..transport import gojson
from ..transport.contract import OpenSessionRequest, PrefixInput, SuffixInput
from ..transport.manifest import ManifestIdentity, chat_turn
from .conformance import WORDS, words


def _curve(value: tuple, what: str) -> None:
    if any(x < 0 for x in value):
        raise ValueError(f"{what}: suffix sizes are token counts, 0 or more")


@dataclass(frozen=True)
class Params:
    stable_words: int = param(160, "words of the stable system text (about 1.5 to 3 tokens each)", Bound(4, 20_000))
    suffix_words: int = param(24, "words of the user suffix", Bound(1, 20_000))
    curve: tuple[int, ...] = param((0, 256, 1024, 4096, 8192, 16384),
                                   "the changed suffix's sizes for the TTFT curve, in tokens (benchreport's headline "
                                   "0, 256, 1k, 4k, 8k, 16k); a size past the context is skipped and said",
                                   check=_curve)
    context_tokens: int = param(0, "the engine cell's context (0: the model's own ceiling, at most 32768)",
                                Bound(0, 1 << 20))
    max_decode: int = param(16, "tokens each turn decodes (benchreport's MaxDecode)", Bound(1, 1024))
    threads: int = param(1, "engine threads", Bound(1, 256))
    seed: int = param(0, "seed of the texts", SEED)


class Harness:
    """``benchreport.Harness`` over the daemon: sessions opened through the client, turns as the modeld-era runtime
    plans them (the system text stable, the user text volatile, one manifest)."""

    def __init__(self, client, ident: ManifestIdentity) -> None:
        self.client, self.ident = client, ident

    def open_session(self):
        return self.client.open_session(OpenSessionRequest())

    def turn(self, stable: str, suffix: str) -> tuple[PrefixInput, SuffixInput]:
        s, v, m = chat_turn([("system", stable), ("user", suffix)], 1, self.ident)
        return PrefixInput(text=s, manifest=m), SuffixInput(text=v, manifest=m)


def _edit(text: str, rng: np.random.Generator) -> str:
    """The stable text with one word in its second half replaced (an edited stable segment: the head stays)."""
    parts = text.split()
    i = len(parts) // 2 + int(rng.integers(0, max(len(parts) // 2, 1)))
    i = min(i, len(parts) - 1)
    parts[i] = next(w for w in WORDS if w != parts[i]).upper()
    return " ".join(parts)


class BenchReport(Probe):
    version = "1"
    claims = ("bench.warm_equals_cold", "bench.edited_miss")
    figures = (Figure("curve", "suffix_ttft_curve"), Figure("stages", "bench_stages"))
    rests = {("bench.warm_equals_cold", "confirmed"): ((Support("bench_output_equals_cold", "==", True),
                                                        Support("bench_warm_engine_reused", ">", 0)),),
             ("bench.warm_equals_cold", "refuted"): ((Support("bench_output_equals_cold", "==", False),),),
             ("bench.edited_miss", "confirmed"): ((Support("bench_edited_engine_computed", ">", 0),
                                                   Support("bench_edited_output_equals_cold", "==", True)),),
             ("bench.edited_miss", "refuted"): ((Support("bench_edited_engine_computed", "==", 0),),
                                                (Support("bench_edited_output_equals_cold", "==", False),))}
    Params = Params

    def run(self, ctx: ProbeContext, p: Params) -> Outcome:
        from .. import cells, models
        from ..transport.daemon import Daemon

        if ctx.engine not in cells.served_as_cell():
            raise NotRunnable(f"{ctx.engine} is not served as a cell on modeld's wire (cell engines: "
                              f"{', '.join(cells.served_as_cell())})")
        ceiling = models.context_ceiling(models.resolve(ctx.model)) or 4096
        context = p.context_tokens or min(ceiling, 32768)
        options = {"context_tokens": context, "slots": 2} | ctx.fixed_threads(p.threads) | dict(ctx.cell_options)
        rng = np.random.default_rng(p.seed)
        with Daemon(ctx.engine, ctx.model, options=options, slots=2,
                    opener=lambda e, m, **o: ctx.open(None, **o)) as d:
            client = d.client()
            ev = client.evidence("Daemon")
            ident = ManifestIdentity(profile_id="workbench-benchreport", backend=ev["backend"], add_bos=True)
            h = Harness(client, ident)
            stable, suffix = words(rng, p.stable_words), words(rng, p.suffix_words)
            per_token, prefix = _calibrate(h, stable, suffix, p.suffix_words)
            curve, skipped = _curve_texts(rng, p, per_token, context, prefix)
            sc = br.Scenario(stable=stable, suffix=suffix, changed_suffix=words(rng, p.suffix_words),
                             edited_stable=_edit(stable, rng), suffix_curve=curve, max_decode=p.max_decode,
                             over_context=words(rng, 2 * int(context * per_token) + 64))  # twice: refused at once
            meta = br.Report(model=ctx.model, backend=ev["backend"], mode="live_prefix_reuse",
                             profile=ident.profile_id, backend_version=f"{ev['engine']} {ev['engine_version']}")
            report, turns = br.run(h, sc, meta)
        return verdict(report, turns, skipped, p)


def _calibrate(h: Harness, stable: str, suffix: str, n_words: int) -> tuple[float, int]:
    """Words per token of the daemon's tokenizer on these texts (two SuffixStatus counts, the empty user turn's and
    the suffix's, after one EnsurePrefix) and the stable prefix's tokens, from one throw-away session."""
    sess = h.open_session()
    try:
        pin, sin = h.turn(stable, suffix)
        prefix = sess.ensure_prefix(pin).prefix_tokens
        empty = sess.prefill_suffix(h.turn(stable, "")[1]).suffix_tokens
        full = sess.prefill_suffix(sin).suffix_tokens  # the render less the stable region: what came before is moot
    finally:
        sess.close()
    return n_words / max(full - empty, 1), prefix


def _curve_texts(rng: np.random.Generator, p: Params, per_token: float, context: int, prefix: int
                 ) -> tuple[list[str], list[str]]:
    """Suffix texts of about each curve size in tokens; those that would not fit the context are skipped."""
    texts, skipped = [], []
    for n in p.curve:
        if prefix + n + p.max_decode + 32 > context:
            skipped.append(f"suffix {n} tokens: the prefix ({prefix}) + it + the decode exceed the context {context}")
            continue
        texts.append(words(rng, int(round(n * per_token))) if n else "")
    return texts, skipped


def _turn_row(t: br.Turn) -> dict:
    e = t.engine
    return {"turn": t.label, "prefix_ms": t.prefix_ms, "suffix_ms": t.suffix_ms, "ttft_ms": t.ttft_ms,
            "decode_ms": t.decode_ms, "chunks": t.tokens, "prefix_tokens": t.prefix.prefix_tokens,
            "reused_tokens": t.prefix.reused_tokens, "prefilled_tokens": t.prefix.prefilled_tokens,
            "suffix_tokens": t.suffix.suffix_tokens,
            "engine_reused_tokens": e.get("EnsurePrefix.engine_reused_tokens"),
            "engine_computed_tokens": e.get("EnsurePrefix.engine_computed_tokens"),
            "result_class": br.RESULT_CLASS, "text": t.text[:80]}


def _section_rows(r: br.Report, turns: list[br.Turn]) -> list[dict]:
    def d(obj) -> dict:
        return json.loads(gojson.marshal(obj))

    rows = [{"section": name, **d(getattr(r, attr)), "result_class": br.RESULT_CLASS}
            for name, attr in (("cold_full_prefill", "cold_full_prefill"), ("warm_same_prefix", "warm_same_prefix"),
                               ("warm_changed_suffix", "warm_changed_suffix"),
                               ("edited_stable_segment", "edited_stable_segment"), ("decode", "decode"),
                               ("failure_cases", "failure_cases"))]
    by_label = {t.label: t for t in turns}
    for i, pt in enumerate(r.suffix_ttft_curve or []):
        t = by_label.get(f"suffix curve {i}")
        rows.append({"section": "suffix_ttft_curve", **d(pt), "result_class": br.RESULT_CLASS,
                     "prefix_tokens": t.prefix.prefix_tokens if t else None,
                     "suffix_ms": t.suffix_ms if t else None,
                     "suffix_and_ttft_ms": t.suffix_ms + t.ttft_ms if t else None,
                     "engine_computed_tokens": t.engine.get("Decode.engine_computed_tokens") if t else None})
    return rows


def summarise(r: br.Report, turns: list[br.Turn]) -> dict:
    """The report's readings the rules rest on: engine-read reuse and outputs, and the report's timings."""
    t = {x.label: x for x in turns}
    warm, edited = t.get("warm same prefix"), t.get("edited stable segment")
    return {"bench_cold_prefill_s": r.cold_full_prefill.ms / 1000.0,
            "bench_cold_prefix_tokens": r.cold_full_prefill.tokens,
            "bench_warm_prefill_s": r.warm_same_prefix.ms / 1000.0, "bench_warm_hit_rate": r.warm_same_prefix.hit_rate,
            "bench_warm_engine_reused": warm.engine.get("EnsurePrefix.engine_reused_tokens") if warm else None,
            "bench_ttft_cold_s": r.cold_full_prefill.ttft_ms / 1000.0,
            "bench_ttft_warm_changed_s": r.warm_changed_suffix.ttft_ms / 1000.0,
            "bench_output_equals_cold": r.warm_changed_suffix.output_equals_cold,
            "bench_edited_engine_computed": edited.engine.get("EnsurePrefix.engine_computed_tokens") if edited else None,
            "bench_edited_output_equals_cold": r.edited_stable_segment.output_equals_cold,
            "bench_decode_tokens_per_s": r.decode.tokens_per_sec}


def decide_warm(v: dict) -> Decision:
    if v.get("bench_output_equals_cold") is False:
        return Decision("refuted", "differs", rests_on=(Support("bench_output_equals_cold", "==", False),))
    reused = v.get("bench_warm_engine_reused")
    if reused is None or not isinstance(reused, (int, float)) or reused <= 0:
        return Decision("inconclusive", "no-engine-reuse")
    return Decision("confirmed", "equal", rests_on=(Support("bench_output_equals_cold", "==", True),
                                                     Support("bench_warm_engine_reused", ">", 0)))


def decide_edited(v: dict) -> Decision:
    computed = v.get("bench_edited_engine_computed")
    if computed is None:
        return Decision("inconclusive", "unread")
    if computed == 0:
        return Decision("refuted", "false-reuse", rests_on=(Support("bench_edited_engine_computed", "==", 0),))
    if v.get("bench_edited_output_equals_cold") is False:
        return Decision("refuted", "edited-differs", rests_on=(Support("bench_edited_output_equals_cold", "==", False),))
    return Decision("confirmed", "precise-miss", rests_on=(Support("bench_edited_engine_computed", ">", 0),
                                                          Support("bench_edited_output_equals_cold", "==", True)))


WORDS_OF = {
    "differs": "the warm changed-suffix turn decoded otherwise than a fresh session on the same inputs",
    "no-engine-reuse": "the engine reused nothing of the stable prefix on the warm turn (or said nothing)",
    "equal": "the warm changed-suffix turn decoded exactly what a fresh session decodes, with the stable prefix "
             "reused by the engine",
    "unread": "the engine's count for the edited turn was not read",
    "false-reuse": "the edited stable segment was served without the engine computing anything: a false reuse",
    "edited-differs": "the edited turn decoded otherwise than a fresh session on the edited inputs",
    "precise-miss": "the edited stable segment made the engine compute, and it decoded what a fresh session decodes",
}


def verdict(r: br.Report, turns: list[br.Turn], skipped: list[str], p: Params) -> Outcome:
    v = summarise(r, turns)
    warm, edited = decide_warm(v), decide_edited(v)
    rows = _section_rows(r, turns) + [_turn_row(t) for t in turns]
    curve = ", ".join(f"{c.suffix_tokens} tok → {c.ttft_ms:.0f} ms" for c in r.suffix_ttft_curve or [])
    summary = (f"benchreport through the daemon ({br.RESULT_CLASS}): cold prefill {r.cold_full_prefill.tokens} tokens in "
               f"{r.cold_full_prefill.ms:.0f} ms, warm hit rate {r.warm_same_prefix.hit_rate:.0%}, TTFT curve "
               f"{curve or 'none'}. {WORDS_OF[warm.case]}.")
    metrics = {k: x for k, x in v.items() if x is not None and not (isinstance(x, float) and not math.isfinite(x))}
    notes = [f"benchreport JSON (runtime/benchreport's Report, Go's bytes): {gojson.marshal(r).decode()}",
             f"every row's result class: {br.RESULT_CLASS} (benchmark-integrity-blueprint.md)", *skipped,
             f"failure_cases: over_context {r.failure_cases.over_context}, cancel_decode "
             f"{r.failure_cases.cancel_decode}"]
    return Outcome(warm.verdict, summary, metrics, rows, notes,
                   claim_verdicts={"bench.warm_equals_cold": warm.verdict, "bench.edited_miss": edited.verdict},
                   rests_on=warm.rests_on, claim_rests_on={"bench.warm_equals_cold": warm.rests_on,
                                                           "bench.edited_miss": edited.rests_on},
                   claim_reasons={"bench.warm_equals_cold": WORDS_OF[warm.case] + ".",
                                  "bench.edited_miss": WORDS_OF[edited.case] + "."})


__all__ = ["BenchReport", "Harness", "Params", "decide_edited", "decide_warm", "summarise", "verdict"]
