"""isolation.cache_salt — KV never crosses manifests.

The same prompt under reuse keys A, A, B (B before or after A's pair, at random per trial): reuse must happen only within A. Measured by the reuse counters and by
time to the first decoded token (another sequence's one-token request runs before each timed request, so
even a full repeat recomputes its last prompt token on the cached KV: real engine work, not a cached answer): a one-sided two-sample Kolmogorov–Smirnov test (the method of "Auditing Prompt
Caching in LM APIs") that repeat-under-A is faster than cold, and a TOST equivalence test at a
stated margin that B-after-A is *as slow as* cold (a non-significant KS is not proof of equality),
paired by trial as the bootstrap is: each trial times cold A and B on one prompt, back to back.
Beside the tests, the effect sizes: median TTFT of repeat-under-A and of B, each over median cold,
with a percentile bootstrap CI (trials resampled in pairs, seeded, ``resamples`` draws, level 1 − 2α,
the interval that matches a TOST at α); "no leak" needs B's interval inside the equivalence margin.
Timed work runs on a fixed thread count. A snapshot taken under one manifest must be refused by a
cell of another manifest (another model, or the same model with an adapter); on a request cell that
refusal is the cell's own digest check, so the LoRA row is read from the engine instead: one engine with
the adapter loaded (``adapter``, or one written from the model's geometry) gets a prompt twice without the
adapter and twice with it, all under one key (``adapter_requests``), and must change its output with the
adapter and reuse none of the base model's KV for it while reusing its own.

Where the engine itself has no salt (``Description.absent["engine_salt"]``, e.g. llama.cpp), any
isolation is the cell's doing: the probe then bypasses the cell's manifest check and hands the
foreign state straight to the engine. An engine that takes it shows the mechanism is absent, and
the manifest claim is ``not-applicable`` to this engine (the cell's isolation is reported beside it). Where
no foreign state can be handed to it (llama-server: no state import over HTTP), the claim stays
``inconclusive``: the engine never answered, and no reuse across keys is the cell's own doing.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass

import numpy as np
from scipy import stats

from .. import adapters, models
from ..engine import EngineUnavailable, ManifestMismatch, UnsupportedFeature, WorkbenchError
from . import Decision, Figure, Outcome, Probe, ProbeContext, Support, param, Bound, COUNT, TOKENS, SEED
from .common import fresh_salt, reported_source, spread, timed, token_ids


def ks_floor(n: int) -> float:
    """The smallest p a one-sided two-sample KS test of n against n samples can return (perfect separation):
    1 / C(2n, n), through log-gamma, so a large n costs nothing and underflows to 0 instead of overflowing."""
    return math.exp(2 * math.lgamma(n + 1) - math.lgamma(2 * n + 1))


@dataclass(frozen=True)
class Params:
    prompt_tokens: int = param(192, "tokens in the shared prompt", TOKENS)
    trials: int = param(16, "timing samples per procedure (the KS p-value floor must lie far below alpha)",
                        Bound(4, 100_000))
    alpha: float = param(0.01, "significance level of the KS and TOST tests")
    margin: float = param(0.25, "TOST equivalence margin: other-key prefill within ±margin (ratio) of cold")
    other_model: str | None = param(None, "a model with another manifest, for snapshot refusal; None: a synthetic "
                                          "model with the main model's KV shape (layers, KV heads, head size) and "
                                          "other weights, so only a key, never a size check, can refuse its state")
    adapter: str | None = param(None, "a LoRA adapter directory: the adapter-manifest arm, and the adapter the engine is "
                                      "sent in requests where it has a salt; None there: one written from the "
                                      "model's geometry (src/workbench/adapters.py)")
    threads: int = param(1, "engine threads for timed work (fixed, so timings compare)", COUNT)
    resamples: int = param(2000, "bootstrap resamples (B) of the TTFT-ratio confidence intervals (level 1 − 2·alpha; "
                                 "fewer than 200 leave a percentile interval's tails empty)", Bound(200, 1_000_000))
    seed: int = param(0, "seed for the probe's own token ids and the bootstrap", SEED)

    def __post_init__(self) -> None:
        if not 0 < self.alpha < 1:
            raise ValueError("alpha must be in (0, 1)")
        if ks_floor(self.trials) > self.alpha / 100:
            raise ValueError(f"trials={self.trials} puts the KS p-value floor at {ks_floor(self.trials):.2g}, "
                             f"not far below alpha={self.alpha:g}; raise trials")
        if not 0 < self.margin < 1:
            raise ValueError("margin must be in (0, 1)")


def same_kv_shape(d) -> str:
    """A synthetic model whose per-token KV has the shape of the described model's (same layers, KV heads and
    head size: a sequence state's cell rows then have the same sizes) and a vocabulary that holds its token
    ids, with other weights: another manifest."""
    from ..models import SyntheticSpec

    g = d.geometry
    vocab = max(SyntheticSpec.vocab, int(d.extra.get("vocab_size") or 0))
    return SyntheticSpec(layers=g.layers, embd=g.kv_heads * g.head_dim, heads=g.kv_heads, kv_heads=g.kv_heads,
                         vocab=vocab, seed=1).spec


class CacheSalt(Probe):
    version = "8"  # 6: a salt-less engine handed no foreign state is inconclusive (its cell made the 0 across keys);
    # 7: a refused adapter is not-applicable only where the release lacks the LoRA symbols; 8: the TOST is paired
    # by trial (it was Welch's unpaired test on trials the bootstrap pairs)
    claims = ("contract.manifest", "contract.lora")
    _applied = Support("lora_changed_output", "==", True)
    rests = {("*", "refuted"): ((Support("engine_cross_manifest_reused_tokens", ">", 0),),),
             ("*", "confirmed"): ((Support("engine_cross_manifest_reused_tokens", "==", 0),
                                   Support("engine_reused_tokens", ">", 0)),),
             ("contract.lora", "partial"): ((_applied, Support("engine_lora_cross_reused_tokens", ">", 0)),),
             ("contract.lora", "not-applicable"): ((Support("symbols_missing", ">", 0),),),
             ("contract.lora", "confirmed"): ((_applied, Support("engine_lora_base_reused_tokens", ">", 0),
                                               Support("engine_lora_cross_reused_tokens", "==", 0),
                                               Support("engine_lora_reused_tokens", ">", 0)),)}
    figures = (Figure("latency", "latency"),
               Figure("timeline", "timeline", {"spans": (("ttft_s", "to first token"),), "lane": "procedure",
                                               "title": "Per-request timeline"}))
    Params = Params
    # alpha and margin are the rule's test levels: a run that moves them is exploratory
    measures = ("prompt_tokens", "trials", "other_model", "adapter", "threads", "resamples", "seed")

    def from_evidence(self, evidence, p) -> Outcome:
        """The rule on its rows as recorded: the trials, then the refusals, then the foreign-state and adapter arms
        where they ran (their counts recorded in ``inputs``)."""
        rows, given = evidence["rows"], evidence["inputs"]
        n, k = given["trials"], given["refusals"]
        extra = iter(rows[n + k:])
        engine = next(extra) if given["engine"] else None
        lora = next(extra) if given["lora"] else None
        return verdict(rows[:n], rows[n:n + k], p, given["no_salt"], engine, lora)

    def run(self, ctx: ProbeContext, p: Params) -> Outcome:
        rng = np.random.default_rng(p.seed)
        rows: list[dict] = []
        with ctx.open(slots=2, **ctx.fixed_threads(p.threads)) as cell:
            d = cell.describe()
            for t in range(p.trials):
                prompt = token_ids(rng, p.prompt_tokens, d)
                a, b = fresh_salt("A"), fresh_salt("B")
                order = [("cold A", a), ("repeat A", a)]
                order.insert(2 * int(rng.integers(0, 2)), ("other B", b))  # B before or after A's pair, at random
                for proc, salt in order:
                    cell.ensure_prefix(token_ids(rng, 1, d), slot=1, salt=fresh_salt("between"))
                    elapsed, st = timed(cell.ensure_prefix, prompt, salt=salt)
                    first = cell.decode(max_tokens=1)
                    rows.append({"trial": t, "procedure": proc, "reused_tokens": st.reused_tokens,
                                 "reuse_source": st.source, "engine_reused": st.engine_reused_tokens,
                                 "computed_tokens": st.computed_tokens, "ttft_s": elapsed + first.ttft_s,
                                 "recomputed_last_token": first.engine_counters.get("recomputed_last_token"),
                                 "exact": st.exact})
            snap = cell.snapshot()
        other = p.other_model or same_kv_shape(d)
        refusals = [self._refusal(ctx, snap, other, {}, "other model")]
        if p.adapter:
            refusals.append(self._refusal(ctx, snap, ctx.model, {"adapters": [p.adapter]}, "same model + adapter"))
        engine = lora = None
        if "engine_salt" in d.absent and "state_export" in d.observers:
            engine = self._engine_accepts(ctx, snap, other)
        elif "engine_salt" not in d.absent:
            lora = self._adapter_requests(ctx, p, d, rng)
        out = verdict(rows, refusals, p, d.absent.get("engine_salt"), engine, lora)
        out.inputs = {"trials": len(rows), "refusals": len(refusals), "engine": engine is not None,
                      "lora": lora is not None, "no_salt": d.absent.get("engine_salt")}
        return out

    def _refusal(self, ctx: ProbeContext, snap, model: str, options: dict, label: str) -> dict:
        try:
            with ctx.open(model, **options) as other:
                other.restore(snap)
            return {"arm": label, "refused": False, "error": None}
        except ManifestMismatch as e:
            return {"arm": label, "refused": True, "error": str(e)}
        except WorkbenchError as e:  # the other manifest cannot be opened on this engine
            return {"arm": label, "refused": None, "error": str(e)}

    def _adapter_requests(self, ctx: ProbeContext, p: Params, d, rng: np.random.Generator) -> dict:
        """One engine with the adapter loaded (``adapter``, else one written from the model's geometry): a prompt
        twice without the adapter, then twice with it, all under one key, so only the engine can keep the
        adapter's KV apart; each reply's reuse is the engine's own count."""
        arm = {"arm": "adapter requests", "refused": None, "error": None,
               "adapter": p.adapter or "written from the model's geometry"}
        with tempfile.TemporaryDirectory(prefix="workbench-lora-") as tmp:
            try:
                path = p.adapter or str(adapters.write_lora(models.hf_directory(ctx.resolved), tmp))
            except WorkbenchError as e:
                return arm | {"error": f"no adapter to send: {e}"}
            try:
                with ctx.open(adapters=[path]) as cell:
                    if "adapter_requests" not in cell.describe().observers:
                        return arm | {"error": "the cell sends no adapter requests on this engine"}
                    prompt, key = token_ids(rng, p.prompt_tokens, d), fresh_salt("lora")
                    replies = [cell.adapter_request(prompt, key=key, adapter=a) for a in (False, False, True, True)]
            except (models.ModelSpecError, UnsupportedFeature) as e:  # not the engine's answer: the adapter given is
                return arm | {"error": str(e)}  # not one, or the cell cannot send adapters (a served engine)
            except EngineUnavailable as e:  # it opened without adapters: its release lacks LoRA (missing symbols)
                return arm | {"refused": True, "error": str(e), "absent": str(e), "missing": len(e.missing)}
            except WorkbenchError as e:  # the engine refused to start or serve with this adapter
                return arm | {"refused": True, "error": str(e)}
        return arm | {"refused": False, "reused": [r.reused_tokens for r in replies],
                      "base_tokens": list(replies[0].tokens), "adapter_tokens": list(replies[2].tokens)}

    def _engine_accepts(self, ctx: ProbeContext, snap, model: str) -> dict:
        """Hand the foreign state to the engine directly (the cell's manifest check bypassed) and decode."""
        try:
            with ctx.open(model) as other:
                other.import_state(snap.payload, snap.tokens)
                got = other.decode(max_tokens=2).tokens
            return {"arm": "engine, cell check bypassed", "refused": False, "decoded": got, "error": None}
        except WorkbenchError as e:
            return {"arm": "engine, cell check bypassed", "refused": True, "decoded": None, "error": str(e)}


def tost_log(x: np.ndarray, y: np.ndarray, margin: float) -> float:
    """Paired TOST p-value that the mean of log x − log y, pair by pair, lies within ±log(1+margin): the larger
    p of two one-sided one-sample t-tests of the log ratios, against −log(1+margin) and +log(1+margin). This is
    statsmodels' ``ttost_paired(x, y, 1/(1+margin), 1+margin, transform=np.log)``
    (statsmodels/stats/weightstats.py) built on scipy. NaN below two pairs."""
    if len(x) != len(y):
        raise ValueError("a paired TOST needs one y per x")
    if len(x) < 2:
        return float("nan")
    d, m = np.log(x) - np.log(y), math.log1p(margin)
    lower = stats.ttest_1samp(d, -m, alternative="greater").pvalue
    upper = stats.ttest_1samp(d, m, alternative="less").pvalue
    return float(max(lower, upper))


@dataclass(frozen=True)
class Ratio:
    """Median TTFT of one procedure over median cold TTFT, with its bootstrap interval."""

    value: float
    low: float
    high: float
    level: float
    resamples: int
    pairs: int

    def within(self, margin: float) -> bool:
        """The whole interval inside the equivalence band [1/(1+margin), 1+margin]."""
        return 1 / (1 + margin) <= self.low and self.high <= 1 + margin

    def __str__(self) -> str:
        return (f"{self.value:.3g}× [{self.low:.3g}, {self.high:.3g}] ({self.level:.0%} percentile bootstrap CI, "
                f"B={self.resamples}, {self.pairs} paired trials)")


def _median_ratio(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.median(x, axis=axis) / np.median(y, axis=axis)


def paired_trials(rows: list[dict], proc: str) -> tuple[np.ndarray, np.ndarray]:
    """TTFT of ``proc`` and of cold A, trial by trial, over the trials that timed both: a trial times its
    procedures on one prompt, back to back, so the two are paired (what the TOST and the bootstrap resample)."""
    by_trial: dict[int, dict[str, float]] = {}
    for r in rows:
        by_trial.setdefault(r["trial"], {})[r["procedure"]] = r["ttft_s"]
    pairs = [(t[proc], t["cold A"]) for t in by_trial.values() if proc in t and "cold A" in t]
    x, y = zip(*pairs) if pairs else ((), ())
    return np.array(x, dtype=float), np.array(y, dtype=float)


def ttft_ratio(rows: list[dict], proc: str, p: Params) -> Ratio:
    """Median TTFT of ``proc`` over median cold TTFT, with a percentile bootstrap CI at level 1 − 2·alpha that
    resamples trials, keeping each trial's pair together (:func:`paired_trials`)."""
    x, y = paired_trials(rows, proc)
    level = 1 - 2 * p.alpha
    if len(x) < 2:
        return Ratio(float("nan"), float("nan"), float("nan"), level, p.resamples, len(x))
    ci = stats.bootstrap((x, y), _median_ratio, paired=True, vectorized=True, n_resamples=p.resamples,
                         confidence_level=level, method="percentile", rng=np.random.default_rng(p.seed))
    return Ratio(float(_median_ratio(x, y)), float(ci.confidence_interval.low), float(ci.confidence_interval.high),
                 level, p.resamples, len(x))


def lora_row(arm: dict | None, refusals: list[dict], no_salt: str | None) -> tuple[str, dict, list[str], tuple]:
    """The LoRA row from the engine's answers to adapter requests (:meth:`CacheSalt._adapter_requests`): its
    verdict, metrics, notes and the values it rests on. Confirmed only when the adapter changed the engine's
    output and the engine, with the base model's KV of the same prompt under the same key there to reuse
    (a base repeat reused it), reused none of it for the adapter request, yet reused the adapter's own on a
    repeat. The cell refusing a snapshot across the adapter manifest is its own digest check, never the answer.
    Not-applicable only on the engine's word that it has no LoRA (``absent``); its refusal of the adapter sent
    (e.g. the one the workbench wrote, malformed for it) leaves the row inconclusive, naming the refusal."""
    notes = []
    if len(refusals) > 1:
        notes.append("the adapter arm's snapshot refusal is the cell's own manifest check, not the engine's answer")
    if (unanswered := _unanswered(arm, refusals, no_salt)) is not None:
        verdict, note = unanswered
        missing = (arm or {}).get("missing", 0) if verdict == "not-applicable" else 0
        if missing:  # the release's own lack of the LoRA symbols: the engine's word, what not-applicable rests on
            return verdict, {"symbols_missing": missing}, notes + [note], (Support("symbols_missing", ">", 0),)
        return verdict, {}, notes + [note], ()
    assert arm is not None  # _unanswered answers for a missing arm
    base, base_repeat, cross, repeat = arm["reused"]
    changed = arm["base_tokens"] != arm["adapter_tokens"]
    counts = {"engine_lora_base_reused_tokens": base_repeat, "engine_lora_cross_reused_tokens": cross,
              "engine_lora_reused_tokens": repeat}
    metrics = {k: v for k, v in counts.items() if v is not None} | {"lora_changed_output": changed}
    notes.append(f"adapter requests ({arm['adapter']}), one prompt under one key: engine reuse without the adapter "
                 f"{base} then {base_repeat}, with it {cross} then {repeat}; greedy tokens {arm['base_tokens']} "
                 f"without, {arm['adapter_tokens']} with")
    if None in counts.values():
        return "inconclusive", metrics, notes + ["the engine gave no reuse count for some adapter request"], ()
    if not changed:
        return "inconclusive", metrics, notes + ["the adapter did not change the engine's greedy tokens, so whether "
                                                 "it was applied cannot be told"], ()
    applied = Support("lora_changed_output", "==", True)
    if cross > 0:
        notes.append(f"the engine served an adapter request from {cross} tokens of the base model's KV under one key: "
                     "it keys KV by salt only, so the adapter's digest must fold into cache_salt")
        return "partial", metrics, notes, (applied, Support("engine_lora_cross_reused_tokens", ">", 0))
    if base_repeat == 0 or repeat == 0:
        return "inconclusive", metrics, notes + ["with nothing reused on a repeat, 0 across the adapter says nothing"], ()
    return "confirmed", metrics, notes, (applied, Support("engine_lora_base_reused_tokens", ">", 0),
                                         Support("engine_lora_cross_reused_tokens", "==", 0),
                                         Support("engine_lora_reused_tokens", ">", 0))


def lora_reason(verdict: str, metrics: dict, notes: list[str]) -> str:
    """The LoRA row's own reason, from what :func:`lora_row` returned: the note that decided it, or, confirmed, the
    engine's counts it rests on (the finding's summary is about the salt, and can read otherwise)."""
    if verdict != "confirmed":
        return notes[-1][:1].upper() + notes[-1][1:] + "."
    return (f"The adapter changed the engine's output, and the engine reused none of the base model's KV of the same "
            f"prompt under the same key for it (0 tokens; a base repeat reused "
            f"{metrics['engine_lora_base_reused_tokens']}) while reusing the adapter's own on a repeat "
            f"({metrics['engine_lora_reused_tokens']} tokens): adapter KV is kept apart.")


def _unanswered(arm: dict | None, refusals: list[dict], no_salt: str | None) -> tuple[str, str] | None:
    """The LoRA row where no adapter request was answered, and why: (verdict, note); None when they were."""
    if no_salt and len(refusals) > 1:  # an engine without a salt has no key to fold an adapter's digest into
        return "not-applicable", ("the engine has no salt to key an adapter's KV apart, so the LoRA row is "
                                  "not-applicable here")
    if arm is None:
        return "inconclusive", "no adapter request reached the engine, so the LoRA row stays inconclusive"
    if arm["refused"] and arm.get("absent"):  # the engine's own word that it has no LoRA at all
        return "not-applicable", f"the engine has no LoRA: {arm['absent']}"
    if arm["refused"]:  # a refusal of the adapter sent is about that artifact, not the engine lacking LoRA
        return "inconclusive", (f"the engine refused the adapter ({arm.get('adapter')}): {arm['error']}; refusing that "
                                "artifact does not show the engine lacks LoRA, so the LoRA row stays open")
    if arm["refused"] is None:
        return "inconclusive", f"the adapter arm did not run: {arm['error']}"
    return None


@dataclass(frozen=True)
class Separation:
    """What the isolation rule reads, summarised from the A, A, B trials: reuse within and across keys (the
    engine's counts where every timed request has one), the timing tests, snapshot refusals and, where the
    engine has no salt, what it did with a foreign state handed to it directly."""

    within: int | None  # the least reuse of a repeat under A; None: no count came back
    cross: int | None  # reuse of B's requests, across keys
    cell_cross: int | None  # the same, as the cell reported it
    counted: bool  # every timed request has the engine's own count
    source: str | None  # where the reported reuse came from
    ks_same: float  # one-sided KS p that a repeat under A is faster than cold
    ks_other: float  # the same for B
    ks_floor: float
    tost: float  # paired TOST p that B is as slow as cold (NaN below two trials)
    warm: Ratio  # median repeat / median cold TTFT
    other: Ratio  # median B / median cold TTFT
    alpha: float
    margin: float
    snapshot_crossed: bool  # a snapshot was restored onto another manifest
    no_salt: str | None = None  # why the engine has no salt of its own
    engine_took: bool | None = None  # a foreign state handed to a salt-less engine: taken, refused, not tried

    @property
    def leaked(self) -> bool:
        return bool(self.cross) or self.ks_other < self.alpha or self.snapshot_crossed

    @property
    def band(self) -> str:
        return f"[{1 / (1 + self.margin):.3g}, {1 + self.margin:.3g}]"


def _by_procedure(rows: list[dict]) -> dict[str, list[dict]]:
    return {proc: [r for r in rows if r["procedure"] == proc] for proc in ("cold A", "repeat A", "other B")}


def summarise(rows: list[dict], refusals: list[dict], p: Params, no_salt: str | None = None,
              engine: dict | None = None) -> Separation:
    by = _by_procedure(rows)
    t = {k: [r["ttft_s"] for r in v] for k, v in by.items()}
    timed_rows = by["other B"] + by["repeat A"]
    counted = all(r.get("engine_reused") is not None for r in timed_rows)
    # The cell's reported reuse is the engine's counter on vLLM, its arithmetic on llama.cpp, missing where the
    # engine gave no count; the engine's own counts decide wherever every request has one.
    source = reported_source(r["reuse_source"] for r in timed_rows)
    key, read = ("engine_reused" if counted else "reused_tokens"), counted or source is not None
    return Separation(
        within=min(r[key] for r in by["repeat A"]) if read else None,
        cross=sum(r[key] for r in by["other B"]) if read else None,
        cell_cross=sum(r["reused_tokens"] for r in by["other B"]) if source else None, counted=counted, source=source,
        # One-sided: a cache hit can only make a request faster ("greater" = first sample's CDF lies above).
        ks_same=stats.ks_2samp(t["repeat A"], t["cold A"], alternative="greater").pvalue,
        ks_other=stats.ks_2samp(t["other B"], t["cold A"], alternative="greater").pvalue,
        ks_floor=ks_floor(len(t["cold A"])), tost=tost_log(*paired_trials(rows, "other B"), p.margin),
        warm=ttft_ratio(rows, "repeat A", p), other=ttft_ratio(rows, "other B", p), alpha=p.alpha, margin=p.margin,
        snapshot_crossed=any(r["refused"] is False for r in refusals), no_salt=no_salt,
        engine_took=None if not (no_salt and engine) else engine["refused"] is False)


def decide(s: Separation) -> Decision:
    """The ladder: a salt to test → no leak by counts, timing or snapshots → a salt of the engine's own (without
    one, the cell keeps keys apart, so a zero across keys is its own doing, never the engine's isolation; and
    not-applicable needs the engine's word, a foreign state it took or refused) → a count read → reuse within a
    key → a repeat measurably faster → B shown as slow as cold."""
    if s.engine_took is not None:  # no salt: the engine took the foreign state, or refused it for its shape
        return Decision("not-applicable", "no-salt-took" if s.engine_took else "no-salt-shape")
    if s.leaked:
        return Decision("refuted", "leak", rests_on=(Support("engine_cross_manifest_reused_tokens", ">", 0),))
    if s.no_salt:  # and no foreign KV was handed to it: any zero across keys is the cell's (llama-server)
        return Decision("inconclusive", "no-salt-cell")
    if s.within is None:
        return Decision("inconclusive", "no-count")
    if s.within == 0:
        return Decision("inconclusive", "no-reuse")
    if s.ks_same >= s.alpha:
        return Decision("inconclusive", "repeat-not-faster")
    if not s.tost < s.alpha or not s.other.within(s.margin):  # NaN (too few trials) is not shown equivalent
        return Decision("inconclusive", "not-equivalent")
    return Decision("confirmed", "isolated", rests_on=(Support("engine_cross_manifest_reused_tokens", "==", 0),
                                                       Support("engine_reused_tokens", ">", 0)))


def explain(d: Decision, s: Separation, engine: dict | None) -> str:
    """The verdict's summary in words."""
    warm, other = s.warm, s.other
    if d.case == "no-salt-took":
        return ("The engine has no cache salt of its own: handed a state saved under another manifest with the "
                f"cell's check bypassed, it took it and decoded {len(engine['decoded'] or [])} tokens from it. "
                f"Isolation here is the cell's bookkeeping (cell-reported cross-key reuse {s.cell_cross}; B/cold "
                f"median TTFT {other}), which cannot speak for an engine-level salt.")
    if d.case == "no-salt-shape":
        return (f"The engine has no cache salt of its own ({s.no_salt}); isolation here is the cell's bookkeeping "
                f"(cell-reported cross-key reuse {s.cell_cross}; B/cold median TTFT {other}). The other model's "
                "state was refused by the engine for its shape, not for a key.")
    if d.case == "leak":
        leaks = [why for bad, why in (
            (bool(s.cross), f"{s.cross} tokens reused across keys"),
            (s.ks_other < s.alpha, f"other-key requests are faster than cold (one-sided KS p={s.ks_other:.3g}; "
                                   f"B/cold median TTFT {other})"),
            (s.snapshot_crossed, "a snapshot was restored onto another manifest")) if bad]
        return "KV crossed manifests: " + "; ".join(leaks) + "."
    if d.case == "no-salt-cell":
        return (f"The engine has no cache salt of its own ({s.no_salt}), so the cell keeps keys apart itself (it "
                "has the engine recompute a prompt whose key changed): no reuse across keys is the cell's doing and "
                "cannot confirm isolation. No foreign state could be handed to the engine with the cell's check "
                "bypassed (no state import), so the engine never showed the salt absent either.")
    if d.case == "no-count":
        return ("The engine returned no reuse count, so whether KV crossed keys cannot be read from it; timing alone "
                f"cannot decide it (B/cold median TTFT {other}).")
    if d.case == "no-reuse":
        return ("No reuse was observed even within one key, so isolation cannot be told apart from no caching "
                f"(repeat reuse 0, KS p={s.ks_same:.3g}; repeat/cold median TTFT {warm}).")
    if d.case == "repeat-not-faster":
        return (f"Repeats under A reused {s.within} tokens and B reused 0, but a repeat was not measurably faster "
                f"than cold (one-sided KS p={s.ks_same:.3g}; repeat/cold median TTFT {warm}), so the timing side "
                "channel cannot show a cross-key hit either way at this prompt length; raise prompt_tokens.")
    if d.case == "not-equivalent":
        return (f"Reuse stayed within one key by the counters, but other-key requests could not be shown as slow as "
                f"cold within ±{s.margin:.0%} (paired TOST p={s.tost:.2g}; B/cold median TTFT {other}, equivalence band "
                f"{s.band}); timing is too noisy to rule out a cross-key hit.")
    return (f"Reuse stayed within one key: repeats under A reused {s.within} tokens (faster than cold, one-sided KS "
            f"p={s.ks_same:.2g}; repeat/cold median TTFT {warm}), B reused 0 and was as slow as cold within "
            f"±{s.margin:.0%} (paired TOST p={s.tost:.2g}; B/cold median TTFT {other}, inside {s.band}), and snapshots "
            "were refused across manifests.")


def _metrics(s: Separation, rows: list[dict]) -> dict:
    by = _by_procedure(rows)
    sc, sr, so = (spread([r["ttft_s"] for r in by[k]]) for k in ("cold A", "repeat A", "other B"))
    engine_counts = ({"engine_cross_manifest_reused_tokens": s.cross, "engine_reused_tokens": s.within}
                     if s.counted else {})
    return engine_counts | {
        "cross_manifest_reused_tokens": s.cell_cross,
        "reused_tokens": min(r["reused_tokens"] for r in by["repeat A"]) if s.source else None,
        "ks_p_same_manifest": s.ks_same, "ks_p_other_manifest": s.ks_other, "tost_p_other_manifest": s.tost,
        "ttft_cold_s": sc["median"], "ttft_warm_s": sr["median"], "ttft_other_s": so["median"],
        "ttft_iqr_s": sc["q3"] - sc["q1"], "ttft_warm_iqr_s": sr["q3"] - sr["q1"],
        "ttft_ratio": s.warm.value, "ttft_ratio_ci_low": s.warm.low, "ttft_ratio_ci_high": s.warm.high,
        "ttft_ratio_other": s.other.value, "ttft_ratio_other_ci_low": s.other.low,
        "ttft_ratio_other_ci_high": s.other.high}


def _notes(s: Separation, rows: list[dict], refusals: list[dict]) -> list[str]:
    by = _by_procedure(rows)
    timed_rows = by["other B"] + by["repeat A"]
    sc, sr, so = (spread([r["ttft_s"] for r in by[k]]) for k in ("cold A", "repeat A", "other B"))
    notes = [f"snapshot onto {r['arm']}: " + ("refused" if r["refused"] else "ACCEPTED" if r["refused"] is False
                                              else f"not testable ({r['error']})") for r in refusals]
    if not s.source:
        missing = sum(r["reuse_source"] == "none" for r in timed_rows)
        notes.append(f"the engine returned no reuse count on {missing} of {len(timed_rows)} timed requests: the "
                     "reported reuse is missing, not 0")
    notes.append(f"time to first token: cold median {sc['median']:.4g}s IQR [{sc['q1']:.4g}, {sc['q3']:.4g}]; repeat median "
                 f"{sr['median']:.4g}s IQR [{sr['q1']:.4g}, {sr['q3']:.4g}]; KS floor for {len(by['cold A'])} trials "
                 f"{s.ks_floor:.2g}" + (" (same-key p is at its floor: perfect separation)"
                                        if s.ks_same <= s.ks_floor * 1.0001 else ""))
    notes.append(f"effect sizes, median TTFT over median cold: repeat under A {s.warm}; other key B {s.other} "
                 f"(cold median {1e3 * sc['median']:.3g} ms, B median {1e3 * so['median']:.3g} ms); "
                 f"equivalence band {s.band}")
    return notes


def verdict(rows: list[dict], refusals: list[dict], p: Params, no_salt: str | None = None,
            engine: dict | None = None, lora_arm: dict | None = None) -> Outcome:
    """Confirmed: reuse within one key (the engine's counts), none across keys by counts or timing (a one-sided
    KS that a repeat is faster, a TOST and a bootstrap interval that B is as slow as cold), and snapshots
    refused across manifests. An engine without a salt that takes or refuses a foreign state handed to it
    directly is not-applicable. The LoRA row is its own rule (:func:`lora_row`)."""
    s = summarise(rows, refusals, p, no_salt, engine)
    d = decide(s)
    lora_verdict, lora_metrics, lora_notes, lora_rests = lora_row(lora_arm, refusals, no_salt)
    notes = _notes(s, rows, refusals) + lora_notes
    if no_salt:
        notes.append(f"the cell declares no engine-level salt: {no_salt}")
    if d.case == "no-salt-shape":
        notes.append(f"the engine refused the other model's state ({engine['error']}): its KV shape differs, "
                     "so this shows a size check, not a salt; give other_model of the same shape to show more")
    sources = {"cross_manifest_reused_tokens": s.source, "reused_tokens": s.source} if s.source else {}
    return Outcome(d.verdict, explain(d, s, engine), _metrics(s, rows) | lora_metrics,
                   rows + refusals + [arm for arm in (engine, lora_arm) if arm], notes,
                   {"contract.lora": lora_verdict} | dict(d.claim_verdicts), rests_on=d.rests_on,
                   claim_rests_on={"contract.lora": lora_rests}, sources=sources,
                   claim_reasons={"contract.lora": lora_reason(lora_verdict, lora_metrics, lora_notes)})
