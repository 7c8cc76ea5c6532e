"""G1–G3 measured on real engines: one candidate against the strongest llama.cpp baseline, on one model.

``workbench certify gates --engine E`` (and notebook 60) runs :func:`measure` in a child process and writes one
finding, ``gates.long_context``, whose three claim rows are the gates' verdicts (:mod:`.gates`). Its engine is the
candidate's: on a GPU TensorRT-LLM, the claims' subject; on a CPU vLLM, a reference beside them that never answers
them (:mod:`workbench.standing`, :mod:`workbench.settle`).

What it measures, each arm on the same model (a synthetic one's GGUF for llama.cpp and its Hugging Face twin with the
same weights for the others, or ``--model`` GGUF and ``--subject-model`` HF_DIR of one checkpoint):

- **serve rows** (G1): every arm's KV pool gets one memory budget (``memory_budget_bytes``; default half the ladder's
  top tier at 16-bit KV of this model, so the budget binds), the engine states the KV it made of it (llama.cpp:
  ``llama_n_ctx``; vLLM: ``num_gpu_blocks``), and the largest ladder tier within it is served: a request of that many
  tokens, decoded. llama.cpp's profiles are its KV precisions (``serve_kv``: f16 and q8_0, modeld's ``KVCacheType``
  values), the best of them the baseline.
- **timed rows** (G2, G3): runs of the whole ladder (``runs``), each tier a fresh prompt of uniform token ids under a
  fresh key (cold: the engine's reuse counter is recorded beside it), arms interleaved and their order rotated every
  run, one thread count. Per row: prefill (EnsurePrefix), first output (prefill and the first decoded token), decode
  and turn time, each stage on its own (:class:`.integrity.StageTimes`), with the warm state it ran in.
- **quality rows**: each timed arm's A2 smoke (:func:`.quality.smoke`) on the same cell, so each row's throughput has
  its quality status.

llama.cpp's own speculation joins the baseline where the workload copies (``speculation="auto"``: a pilot decode of
the plain baseline at the smallest tier, its output 4-grams found in its prompt at :data:`.gates.COPY_HEAVY` or more;
the loop's ``llamacpp-server-spec`` arm, as ``scripts/bench-served-spec-copy`` measured it paying 1.92× on JSON copy);
uniform token ids do not copy, so on them the plain baseline is the strongest.
"""

from __future__ import annotations

import dataclasses
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from .. import cells, claims, environment, findings, models
from ..engine import ContextOverflow, EngineUnavailable, UnsupportedFeature, WorkbenchError
from ..probes import Declared, Figure
from . import classes, gates, quality
from .integrity import Identity, Percentiles, WarmState, differences, engine_session, engine_stages, timed

PROBE = "gates.long_context"
LADDER = (8192, 16384, 32768, 65536)
DEFAULT_MODEL = "synthetic:long,ctx=65536"  # the 64k tier needs a 64k model; make run takes synthetic:long (32k)
BASELINE_ARMS = ("llamacpp",)  # the loop's arms (workbench.loop.arms) that make the llama.cpp baseline
SPEC_ARM = "llamacpp-server-spec"  # llama.cpp's own speculation (llama-server's n-gram drafting), the loop's arm
SERVE_KV = ("f16", "q8_0")  # llama.cpp KV precisions tried for G1 (modeld's KVCacheType "" and "q8_0")
TIMED_KV = ("f16",)  # … and timed for G2/G3 (the product's default)
CLAIM_OUTPUT_TOKENS = 128  # the output cap of a G2 turn: part of its stated latency budget
PROMPT_SET = "uniform token ids past the control tokens, one draw per (tier, run), seed {seed}"
RULES = ("G1", "G2", "G3")


class Gates(Declared):
    """The G1–G3 findings declared like a probe's: claims, version, class, figures; a verdict is decided again from
    the rows it recorded (:meth:`rederive`)."""

    version = "1"
    claims = (gates.G1, gates.G2, gates.G3)
    result_class = classes.ResultClass.RAW.value  # engines driven directly, not through contenox-runtime
    figures = (Figure("prefill", "gates_prefill"),)

    def obtained(self, found: Sequence[findings.Finding]) -> str:
        return "workbench certify gates"

    def outcome_defaults(self) -> dict[str, Any]:
        """Moved from these, the run builds its outcome (a looser budget, a shorter turn, the baseline's speculation
        left out): exploratory, never a claim's verdict."""
        return {"output_tokens": CLAIM_OUTPUT_TOKENS, "speculation": "auto"}

    def rederive(self, f: findings.Finding, claim: claims.Claim) -> list[str]:
        """The claim row's verdict decided again by its gate's rule from the rows and rules the finding recorded; a
        rule that departs from the claim's is exploratory and settles nothing."""
        said = f.verdict_on(claim.id)
        rules = rules_of(f.params)
        rule = rules[claim.id]
        if getattr(rule, "exploratory", None):
            return [f"exploratory rule for {claim.id}: {rule.exploratory}"]
        again = decide(claim.id, rules, f.evidence.get("rows") or [], f.params.get("ladder") or [],
                       f.evidence.get("gates") or {})
        return [] if again.verdict == said else [
            f"decided again from the rows it recorded, {claim.id} says {again.verdict}, not {said}: {again.summary}"]


@dataclass(frozen=True)
class Plan:
    """One run of the gates: the candidate engine, the model, the baseline and the ladder, and the rules."""

    engine: str
    model: str = DEFAULT_MODEL
    subject_model: str | None = None  # the candidate's model in its engine's format (an HF folder); None: ``model``
    baseline: tuple[str, ...] = BASELINE_ARMS
    serve_kv: tuple[str, ...] = SERVE_KV
    timed_kv: tuple[str, ...] = TIMED_KV
    tiers: tuple[int, ...] = LADDER
    runs: int = gates.CLAIM_MIN_RUNS
    output_tokens: int = CLAIM_OUTPUT_TOKENS
    memory_budget_bytes: int | None = None
    threads: int | None = None
    speculation: str = "auto"  # auto: llama.cpp's own speculation joins where the workload copies | always
    first_output_s: float = gates.CLAIM_FIRST_OUTPUT_S
    turn_s: float = gates.CLAIM_TURN_S
    min_runs: int = gates.CLAIM_MIN_RUNS
    on_target: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        if self.speculation not in ("auto", "always"):
            raise ValueError(f"speculation must be auto or always, got {self.speculation!r}")
        if self.runs < 1 or self.output_tokens < 1 or not self.tiers or min(self.tiers) < 2 * self.output_tokens:
            raise ValueError("runs and output_tokens must be at least 1, and every tier at least twice output_tokens")

    def rules(self, budget: int) -> dict[str, Any]:
        return {gates.G1: gates.TierRule(budget_bytes=budget),
                gates.G2: gates.UsableRule(first_output_s=self.first_output_s, turn_s=self.turn_s,
                                           min_runs=self.min_runs),
                gates.G3: gates.PrefillRule(min_runs=self.min_runs)}


@dataclass(frozen=True)
class Arm:
    """One engine configuration of the run: its role, engine, options and what it is called in the rows."""

    name: str
    role: str  # gates.CANDIDATE | gates.BASELINE
    engine: str
    options: Mapping[str, Any] = field(default_factory=dict)
    kv: str | None = None  # the KV precision option it was opened with (None: the engine's default)
    speculation: str = "none"  # none | engine (the engine's own)


def rules_of(params: Mapping[str, Any]) -> dict[str, Any]:
    """The gates' rules as a finding recorded them (``params["rules"]``)."""
    doc = params["rules"]

    def load(cls: type, d: Mapping[str, Any]) -> Any:
        return cls(**{k: v for k, v in d.items() if k != "exploratory"})

    return {gates.G1: load(gates.TierRule, doc[gates.G1]), gates.G2: load(gates.UsableRule, doc[gates.G2]),
            gates.G3: load(gates.PrefillRule, doc[gates.G3])}


def decide(claim_id: str, rules: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], ladder: Sequence[int],
           context: Mapping[str, Any]) -> gates.GateVerdict:
    """One gate's verdict from recorded rows (``context``: the run's same-model check and its baseline's copy
    share, as the finding recorded them)."""
    not_comparable = context.get("not_comparable")
    if claim_id == gates.G1:
        return gates.decide_tier(rules[claim_id], rows, ladder, not_comparable)
    if claim_id == gates.G2:
        return gates.decide_usable(rules[claim_id], rows, not_comparable, context.get("copies"))
    return gates.decide_prefill(rules[claim_id], rows, not_comparable)


# --------------------------------------------------------------------------- the arms


def arms(plan: Plan, copies: bool) -> tuple[Arm, list[Arm], list[Arm]]:
    """The candidate, the baseline's G1 arms (one per KV precision) and its timed arms (with llama.cpp's own
    speculation where the workload copies, or always when asked)."""
    from ..loop import arms as loop_arms

    candidate = Arm(plan.engine, gates.CANDIDATE, plan.engine)
    serve, timed_arms = [], []
    for name in plan.baseline:
        spec = loop_arms.get(name)
        takes_kv = "kv_type" in {f.name for f in dataclasses.fields(cells.options_class(spec.engine))}
        for kvs, out in ((plan.serve_kv, serve), (plan.timed_kv, timed_arms)):
            for kv in (kvs if takes_kv else (None,)):
                opts = dict(spec.cell_options) | ({"kv_type": kv} if kv else {})
                out.append(Arm(f"{name}:{kv}" if kv else name, gates.BASELINE, spec.engine, opts, kv,
                               spec.speculation))
    if plan.speculation == "always" or copies:
        spec = loop_arms.get(SPEC_ARM)
        timed_arms.append(Arm(SPEC_ARM, gates.BASELINE, spec.engine, dict(spec.cell_options), None, spec.speculation))
    return candidate, serve, timed_arms


def _model_for(plan: Plan, arm: Arm) -> str:
    return plan.subject_model if arm.role == gates.CANDIDATE and plan.subject_model else plan.model


def _target_options(plan: Plan, arm: Arm) -> dict:
    """On target a llama.cpp arm holds every layer on the GPU (the claim's "llama.cpp CUDA cell")."""
    from ..loop import arms as loop_arms

    if plan.on_target and arm.role == gates.BASELINE:
        return {"gpu_layers": loop_arms.ALL_LAYERS}
    return {}


def _open(plan: Plan, arm: Arm, **extra: Any) -> tuple[Any, float]:
    opts = dict(arm.options) | _target_options(plan, arm) | extra
    if plan.threads:
        opts["threads"] = plan.threads
    return timed(lambda: cells.open_cell(arm.engine, _model_for(plan, arm), **opts))


# --------------------------------------------------------------------------- rows


def _ids(vocab: int, n: int, seed: int) -> list[int]:
    import numpy as np

    low = min(260, vocab - 1)
    return [int(t) for t in np.random.default_rng(seed).integers(low, vocab, n)]


HF_WEIGHTS = {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}


def _weights(d: Any, model: Any = None) -> str | None:
    """The weights' type as the engine or the model folder says it, else as the model file says it (a served engine
    states none), normalised (F32, F16, BF16, Q4_1, …)."""
    said = (d.extra or {}).get("weights")
    if said:
        return str(said).removeprefix("all ").upper()
    folder = (d.extra or {}).get("hf_directory")
    if folder:
        dtype = models.hf_dtype(models.hf_config(Path(folder))) or "float32"
        return HF_WEIGHTS.get(dtype, dtype.upper())
    return _file_weights(model) if model is not None else None


def _file_weights(model: Any) -> str | None:
    """A model file's weights type: a synthetic GGUF's matrices are F32 (its spec names no other); a GGUF's
    ``general.file_type``; a Hugging Face folder's ``config.json`` dtype."""
    if model.kind == "synthetic":
        return "F32"
    if model.kind == "hf":
        dtype = models.hf_dtype(models.hf_config(model.path)) or "float32"
        return HF_WEIGHTS.get(dtype, dtype.upper())
    try:
        import gguf

        field = gguf.GGUFReader(str(model.path)).fields["general.file_type"]
        return gguf.LlamaFileType(int(field.parts[field.data[0]][0])).name.removeprefix("MOSTLY_")
    except (KeyError, ValueError, OSError, IndexError):
        return None


def _kv_label(arm: Arm, d: Any) -> str:
    dtype = (d.extra or {}).get("kv_dtype")
    return arm.kv or (str(dtype) if dtype else f"{d.geometry.dtype_bytes:g} B/value")


def serve_row(plan: Plan, arm: Arm, budget: int, ladder: Sequence[int], served: int = 0) -> dict:
    """G1: ``arm`` under the memory budget: the KV its engine made of it, and the largest tier within it served (a
    cell whose context its engine capped below that KV, vLLM's default, is opened again at the tier). ``served``: the
    largest tier another profile of the same side already served; a tier no larger is not served again (it could not
    raise that side's best, and llama.cpp's q8_0 KV takes minutes for 16k tokens on one CPU core), the row says so."""
    row: dict[str, Any] = {"kind": "serve", "arm": arm.name, "role": arm.role, "engine": arm.engine, "kv": arm.kv,
                           "budget_bytes": budget, "engine_capacity_tokens": None, "tier": min(ladder),
                           "served": False, "refused_by": None, "error": None}
    context: int | None = None
    while True:
        try:
            cell, load_s = _open(plan, arm, kv_budget_bytes=budget, context_tokens=context)
        except EngineUnavailable:
            raise
        except (ContextOverflow, UnsupportedFeature, WorkbenchError, ValueError) as e:  # refused at start
            return row | {"refused_by": "engine", "error": " ".join(str(e).split())[:300]}
        with cell:
            d = cell.describe()
            within, memory = _within_budget(cell, d, budget)
            fits = [t for t in ladder if t <= within]
            row |= {"engine_capacity_tokens": d.kv_capacity_tokens, "budget_capacity_tokens": within,
                    "context_tokens": d.context_tokens, "kv": _kv_label(arm, d), "load_s": load_s, **memory,
                    "capacity_source": (d.extra or {}).get("kv_capacity_source") or "llama_n_ctx (the KV cells it made)"}
            if not fits:
                return row | {"refused_by": "engine", "error": f"the engine holds {within} tokens within the budget"}
            if max(fits) <= served:
                return row | {"tier": max(fits), "served": None,
                              "skipped": f"its tier ({max(fits)}) is one its side already served ({served})"}
            if max(fits) > d.context_tokens and context is None:
                context = max(fits)
                continue
            return row | _serve(cell, min(max(fits), d.context_tokens), d, plan)


def _within_budget(cell: Any, d: Any, budget: int) -> tuple[int, dict]:
    """The tokens the engine holds within ``budget`` bytes: the KV cells it made, but no more than the budget over
    the engine's own bytes per token (llama.cpp pads its cells to 256, so it may make more than the budget holds:
    those do not count), and what was read."""
    how, per_token = "the cell's description (its geometry)", d.kv_capacity_bytes / max(d.kv_capacity_tokens, 1)
    if "capacity" in d.observers:
        try:
            mem = cell.kv_memory()
            how, per_token = f"the engine's own statement ({mem.how})", mem.bytes_per_token
        except (UnsupportedFeature, WorkbenchError):
            pass
    within = min(d.kv_capacity_tokens, int(budget // per_token)) if per_token > 0 else d.kv_capacity_tokens
    return within, {"engine_kv_bytes_per_token": per_token, "engine_kv_bytes_per_token_from": how,
                    "engine_kv_bytes": d.kv_capacity_tokens * per_token}


def _serve(cell: Any, tier: int, d: Any, plan: Plan) -> dict:
    """A request of ``tier`` tokens (its prompt and one decoded token) on an open cell, as the serve row records it."""
    prompt = _ids(int(d.extra.get("vocab_size") or 512), tier - 1, plan.seed)
    try:
        _, prefill_s = timed(lambda: cell.ensure_prefix(prompt, salt=f"serve-{uuid.uuid4().hex}"))
        out = cell.decode(max_tokens=1)
    except (ContextOverflow, UnsupportedFeature, WorkbenchError) as e:
        return {"tier": tier, "refused_by": "engine", "error": " ".join(str(e).split())[:300]}
    return {"tier": tier, "served": bool(out.tokens), "prefill_s": prefill_s}


def timed_row(arm: Arm, cell: Any, tier: int, run: int, plan: Plan, load_s: float | None, vocab: int) -> dict:
    """One cold request of ``tier`` tokens (its prompt and the output cap) on ``arm``'s open cell."""
    prompt = _ids(vocab, tier - plan.output_tokens, plan.seed + 1000 * run + tier)
    process, session = engine_session(cell)
    row: dict[str, Any] = {"kind": "timed", "arm": arm.name, "role": arm.role, "engine": arm.engine, "kv": arm.kv,
                           "speculation": arm.speculation, "tier": tier, "run": run,
                           "prompt_tokens": len(prompt), "output_cap": plan.output_tokens, "served": False}
    try:
        st, prefill_s = timed(lambda: cell.ensure_prefix(prompt, salt=f"gate-{uuid.uuid4().hex}"))
        dec, wall = timed(lambda: cell.decode(max_tokens=plan.output_tokens))
    except (ContextOverflow, UnsupportedFeature, WorkbenchError) as e:
        return row | {"error": " ".join(str(e).split())[:300]}
    times = list(dec.token_times_s) or [wall]
    decode_s = max(times[-1] - dec.ttft_s, 0.0)
    reused = st.engine_reused_tokens if st.engine_reused_tokens is not None else st.reused_tokens
    warm = WarmState("cold", process, session, reused_tokens=reused, prefilled_tokens=st.computed_tokens,
                     counters_source=st.source)
    from ..loop.replay import copy_fraction

    return row | {"served": bool(dec.tokens), "prefill_s": prefill_s, "first_output_s": prefill_s + dec.ttft_s,
                  "decode_s": decode_s, "turn_s": prefill_s + times[-1], "decode_tokens": len(dec.tokens),
                  "decode_per_token_s": decode_s / (len(dec.tokens) - 1) if len(dec.tokens) > 1 else None,
                  "cold": not reused, "copy_fraction": copy_fraction(prompt, dec.tokens),
                  "stages": engine_stages(load_s, prefill_s, decode_s).as_dict(), "warm": warm.as_dict()}


# --------------------------------------------------------------------------- the run


@dataclass
class Measured:
    rows: list[dict]
    ladder: tuple[int, ...]
    budget: int
    identities: dict[str, dict]
    described: dict[str, Any]
    notes: list[str]
    copies: float | None
    resolved: Any


def _ladder(plan: Plan, resolved: Any) -> tuple[tuple[int, ...], list[str]]:
    ceiling = models.context_ceiling(resolved)
    ladder = tuple(sorted(t for t in set(plan.tiers) if ceiling is None or t <= ceiling))
    notes = [f"tiers above the model's {ceiling}-token context left out: "
             f"{', '.join(str(t) for t in sorted(set(plan.tiers) - set(ladder)))}"] if len(ladder) < len(set(plan.tiers)) else []
    if not ladder:
        raise ValueError(f"no tier of {', '.join(map(str, plan.tiers))} fits model {plan.model} ({ceiling} tokens)")
    return ladder, notes


def default_budget(resolved: Any, ladder: Sequence[int]) -> int:
    """Half the ladder's top tier at 16-bit KV of this model (its GGUF geometry, 2 bytes per value): a budget that
    binds, so each engine's KV bytes per token decide the tier it holds."""
    g = models.gguf_geometry(resolved.path)[0] if resolved.is_gguf else models.hf_geometry(models.hf_config(resolved.path), "float16")[0]
    return max(ladder) * g.bytes_per_token // 2


def _identity(plan: Plan, arm: Arm, d: Any, resolved: Any) -> dict:
    """The arm's same-model identity, with its engine's version beside it (the matrix's row reads it)."""
    model = models.resolve(_model_for(plan, arm))
    return {"engine_version": d.engine_version} | dataclasses.asdict(Identity(
        model=model.name, digest=model.sha256, quantization=_weights(d, model), prompt_set=PROMPT_SET.format(seed=plan.seed),
        output_cap=plan.output_tokens, device=environment.hardware().get("summary"),
        runtime_profile=f"threads={plan.threads or 'default'}", warm_state="cold")) | {"kv": _kv_label(arm, d)}


def same_model(identities: Mapping[str, dict], roles: Mapping[str, str], formats: bool = False) -> str | None:
    """The same-model rule between the candidate and each baseline arm (context is each row's tier, so it is
    compared row by row by construction); the differences in words, or None. ``formats``: the candidate runs the
    model in another format (``--subject-model``), so its name and digest are the user's word, not compared."""
    cand = [Identity.of(i) for a, i in identities.items() if roles[a] == gates.CANDIDATE]
    varies = ("context", "model", "digest") if formats else ("context",)
    out = []
    for a, i in identities.items():
        if roles[a] == gates.BASELINE and cand:
            why = differences(cand[0], Identity.of(i), varies=varies)
            out += [f"{a}: {w}" for w in why]
    return "; ".join(out) or None


def _smoke(name: str, arm: Arm, cell: Any, synthetic: bool, seed: int) -> list[dict]:
    """The arm's quality smoke on its open cell (:func:`.quality.smoke`) as rows; a cell that cannot run it says
    why in a row of its own (its throughput then makes no claim)."""
    who = {"arm": name, "role": arm.role, "engine": arm.engine}
    try:
        status, said, _, rows = quality.smoke(cell, synthetic, seed)
    except (UnsupportedFeature, WorkbenchError) as e:
        return [{"kind": "a2", **who, "status": "not-run", "equal": None, "said": " ".join(str(e).split())[:300]}]
    return [r | who | {"status": status, "said": said} for r in rows]


def _pilot(plan: Plan, arm: Arm, cell: Any, ladder: Sequence[int], vocab: int) -> float | None:
    """The plain baseline's output at the smallest tier: the share of its 4-grams in its prompt (does the workload
    copy?)."""
    from ..loop.replay import copy_fraction

    prompt = _ids(vocab, min(ladder) - plan.output_tokens, plan.seed + 7)
    cell.ensure_prefix(prompt, salt=f"pilot-{uuid.uuid4().hex}")
    return copy_fraction(prompt, cell.decode(max_tokens=plan.output_tokens).tokens)


def measure(plan: Plan) -> Measured:
    """Every row of the run (serve, quality, timed), opened and closed here; see the module's words."""
    resolved = models.resolve(plan.model)
    ladder, notes = _ladder(plan, resolved)
    budget = plan.memory_budget_bytes or default_budget(resolved, ladder)
    rows: list[dict] = []
    candidate, serve, _ = arms(plan, False)
    rows.append(serve_row(plan, candidate, budget, ladder))
    for arm in serve:
        best = max((int(r["tier"]) for r in rows if r["role"] == gates.BASELINE and r.get("served")), default=0)
        rows.append(serve_row(plan, arm, budget, ladder, best))
    opened: dict[str, tuple[Arm, Any, float]] = {}
    described: dict[str, Any] = {}
    try:
        for arm in [candidate, *arms(plan, False)[2]]:
            cell, load_s = _open(plan, arm, context_tokens=max(ladder))
            opened[arm.name] = (arm, cell, load_s)
        plain = next(a for a, _, _ in opened.values() if a.role == gates.BASELINE)
        vocab = int(opened[plain.name][1].describe().extra.get("vocab_size") or 512)
        copies = _pilot(plan, plain, opened[plain.name][1], ladder, vocab) if plan.speculation == "auto" else None
        if plan.speculation == "always" or (copies or 0) >= gates.COPY_HEAVY:
            arm = arms(plan, True)[2][-1]
            cell, load_s = _open(plan, arm, context_tokens=max(ladder))
            opened[arm.name] = (arm, cell, load_s)
        for name, (arm, cell, _) in opened.items():
            described[name] = cell.describe()
            rows += _smoke(name, arm, cell, resolved.kind == "synthetic", plan.seed)
        loads = {name: load_s for name, (_, _, load_s) in opened.items()}
        order = list(opened)
        for run in range(plan.runs):
            turn = order[run % len(order):] + order[:run % len(order)]  # rotated every run
            for tier in ladder:
                for name in turn:
                    arm, cell, _ = opened[name]
                    rows.append(timed_row(arm, cell, tier, run, plan, loads.pop(name, None), vocab))
    finally:
        for _, cell, _ in opened.values():
            cell.close()
    identities = {name: _identity(plan, opened[name][0], d, resolved) for name, d in described.items()}
    return Measured(rows, ladder, budget, identities, described, notes, copies, resolved)


# --------------------------------------------------------------------------- the finding


def _not_run(plan: Plan, reason: str) -> findings.Finding:
    env = environment.fingerprint(plan.engine, None, None, None, {"gates": {"plan": _plan_doc(plan)}})
    return findings.Finding(
        probe=PROBE, probe_version=Gates.version, claims=list(Gates.claims), verdict="not-run",
        summary=f"Not run on {plan.engine}: {reason}", engine=plan.engine, environment=env,
        params=_plan_doc(plan) | {"rules": {c: r.as_dict() for c, r in plan.rules(plan.memory_budget_bytes or 0).items()}},
        reason=f"{reason}. On an NVIDIA GPU: {claims.GATES_COMMAND}",
        result_class=classes.ResultClass.FAILED.value)


def _plan_doc(plan: Plan) -> dict:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(plan).items()}


def headline(verdicts: Mapping[str, str]) -> str:
    """The run's own verdict line: confirmed where any gate is (the entry condition's disjunction), refuted where
    every one is, else inconclusive (each row keeps its own)."""
    got = set(verdicts.values())
    if "confirmed" in got:
        return "confirmed"
    return "refuted" if got == {"refuted"} else "inconclusive"


def finding(plan: Plan, m: Measured) -> findings.Finding:
    """The run's finding: each gate's verdict on its claim row, the rows, the rules and the same-model check."""
    rules = plan.rules(m.budget)
    roles = {r["arm"]: r["role"] for r in m.rows}
    context = {"not_comparable": same_model(m.identities, roles, bool(plan.subject_model)), "copies": m.copies,
               "formats": (f"the candidate runs {plan.subject_model}, the baseline {plan.model}: the same checkpoint by "
                           "the user's word (model and digest not compared; quantization is)") if plan.subject_model else None}
    out = {c: decide(c, rules, m.rows, m.ladder, context) for c in Gates.claims}
    verdict = headline({c: o.verdict for c, o in out.items()})
    values = _values(out)
    cand = m.described.get(plan.engine)
    env = environment.fingerprint(plan.engine, cand.engine_version if cand else None, m.resolved,
                                  cand.geometry if cand else None, {"gates": {"identities": m.identities}})
    summary = " ".join(f"{claims.get(c).match}: {o.verdict}, {o.summary}." for c, o in out.items())
    return findings.Finding(
        probe=PROBE, probe_version=Gates.version, claims=list(Gates.claims), verdict=verdict,
        summary=f"Step-function gates on {plan.engine} against llama.cpp ({m.resolved.name}): {summary}",
        engine=plan.engine, environment=env,
        params=_plan_doc(plan) | {"ladder": list(m.ladder), "budget_bytes": m.budget,
                                  "rules": {c: r.as_dict() for c, r in rules.items()}},
        metrics=findings.metric_values(values),
        evidence={"columns": list(dict.fromkeys(k for r in m.rows for k in r)), "rows": m.rows,
                  "notes": [*m.notes, *(r.describe() for r in rules.values() if hasattr(r, "describe")),
                            f"prompt set: {PROMPT_SET.format(seed=plan.seed)}",
                            "result class raw_backend_control on every row: the engines driven directly"],
                  "gates": context},
        claim_verdicts={c: o.verdict for c, o in out.items()},
        claim_reasons={c: " ".join(o.summary.split()) for c, o in out.items()},
        result_class=classes.for_verdict(verdict, Gates.result_class))


def _values(out: Mapping[str, gates.GateVerdict]) -> dict:
    import math

    values: dict[str, Any] = {}
    g1, g2, g3 = out[gates.G1], out[gates.G2], out[gates.G3]
    values |= {f"g1_{k}": v for k, v in g1.figures.items()}
    values |= {f"g2_{k}": v for k, v in g2.figures.items()}
    for prefix, o in (("g2_usable_ratio", g2), ("g3_prefill_ratio", g3)):
        if o.ratio:
            values |= {prefix: o.ratio["value"], f"{prefix}_low": o.ratio["low"], f"{prefix}_high": o.ratio["high"]}
    return {k: v for k, v in values.items() if not (isinstance(v, float) and not math.isfinite(v))}


def run(plan: Plan) -> findings.Finding | None:
    """The gates as one finding; None where the candidate is llama.cpp itself (nothing to compare: its baseline)."""
    if any(cells.runs(plan.engine) == cells.runs(_baseline_engine(a)) for a in plan.baseline):
        return None
    avail = cells.availability(plan.engine)
    if not avail.available:
        return _not_run(plan, avail.reason or f"{plan.engine} is unavailable")
    try:
        m = measure(plan)
    except EngineUnavailable as e:
        return _not_run(plan, e.reason)
    return finding(plan, m)


def _baseline_engine(name: str) -> str:
    from ..loop import arms as loop_arms

    return loop_arms.get(name).engine


def run_in_child(plan: Plan, out: str | os.PathLike | None = None) -> findings.Finding | None:
    """:func:`run` in a child process forked with the candidate's engine imported (a crash is reported with its
    signal and log tail; the caller lives); the finding written to ``out`` when given."""
    from .. import isolate, probes

    preload = tuple(dict.fromkeys([*probes.preload(plan.engine), *cells.preload(_baseline_engine(plan.baseline[0]))]))
    f = isolate.call(run, plan, preload=preload)
    if f is not None and out is not None:
        findings.write(f, out)
    return f


def percentiles(rows: Sequence[Mapping[str, Any]], arm: str, tier: int, column: str) -> Percentiles | None:
    """``column`` of ``arm``'s timed rows at ``tier`` over its runs (the certification matrix's figures)."""
    return Percentiles.of(r.get(column) for r in rows
                          if r.get("kind") == "timed" and r["arm"] == arm and int(r["tier"]) == tier and r.get("served"))


__all__ = ["Arm", "BASELINE_ARMS", "DEFAULT_MODEL", "Gates", "LADDER", "Measured", "PROBE", "Plan", "arms", "decide",
           "default_budget", "finding", "headline", "measure", "percentiles", "rules_of", "run", "run_in_child",
           "same_model", "serve_row", "timed_row"]
