"""G1–G3 measured on real engines: one candidate against the strongest llama.cpp baseline, on one model.

``workbench certify gates --engine E`` (and notebook 60) runs :func:`measure` in a child process and writes one
finding, ``gates.long_context``, whose three claim rows are the gates' verdicts (:mod:`.gates`). Its engine is the
candidate's: on a GPU TensorRT-LLM, the claims' subject; on a CPU vLLM, a reference beside them that never answers
them (:mod:`workbench.standing`, :mod:`workbench.settle`).

What it measures, each arm on the same model (a synthetic one's GGUF for llama.cpp and its Hugging Face twin with the
same weights for the others, or ``--model`` GGUF and ``--subject-model`` HF_DIR of one checkpoint):

- **serve rows** (G1): every arm's KV pool gets one memory budget (:data:`.gates.BUDGET_RULE`: half the ladder's top
  tier at 16-bit KV of this model, so the budget binds), and the largest ladder tier within it is served: a request
  of that many tokens, decoded. What the arm holds within the budget is read from its engine where the engine sizes
  its pool from the budget itself (vLLM: ``num_gpu_blocks``), else computed (the budget over the engine's own bytes
  per token: llama.cpp) and labelled so; where it is computed, the cell is opened again at the next tier and the KV
  buffer the engine states it allocates is read (llama.cpp's load log, "KV buffer size"), so a refusal is the
  engine's number, never the workbench's arithmetic. Each serve cell runs its own A2 (its ``quality``).
  llama.cpp's profiles are its KV precisions (:data:`SERVE_KV`: f16, q8_0 and q4_0, modeld's ``KVCacheType`` values),
  the best of them the baseline.
- **warm-up rows**: one untimed request per timed arm at the smallest tier, with the output cap, before any timed
  run (an engine's first requests pay its start-up: vLLM's run 0 and 1 prefilled 1024 tokens in 0.22 s and 0.31 s
  against 0.008 s in run 2); the plain baseline's reply there says whether the workload copies.
- **timed rows** (G2, G3): runs of the whole ladder (``runs``), each tier a fresh prompt of uniform token ids under a
  fresh key (cold: the engine's reuse counter is recorded beside it), arms interleaved and their order rotated every
  run, one thread count. Per row: prefill (EnsurePrefix), first output (prefill and the first decoded token), decode
  and turn time, each stage on its own (:class:`.integrity.StageTimes`), the tokens delivered of the output cap, with
  the warm state it ran in. llama.cpp's timed arms run at the candidate's KV precision (:data:`TIMED_KV`: ``match``),
  which the same-model rule compares.
- **quality rows**: each timed arm's A2 smoke (:func:`.quality.smoke`) on the same cell, so each row's throughput has
  its quality status; their cold replies are each arm's greedy output on one shared prompt, compared across arms
  (the same-model rule: two files of one checkpoint answer alike).

llama.cpp's own speculation joins the baseline where the workload copies (``speculation="auto"``: the plain
baseline's warm-up reply at the smallest tier, its output 4-grams found in its prompt at :data:`.gates.COPY_HEAVY` or
more; the loop's ``llamacpp-server-spec`` arm, as ``scripts/bench-served-spec-copy`` measured it paying 1.92× on JSON
copy); uniform token ids do not copy, so on them the plain baseline is the strongest.

What builds the outcome is a claim value (:meth:`Gates.outcome_defaults`): the ladder, the budget rule, the
baseline's arms and KV profiles, the output cap, the speculation rule and the target (``on_target``: an NVML GPU, a
certified model in ``--certified FILE``, every llama.cpp arm holding every layer on the GPU by its own load log).
Moved, the run is exploratory: measured and reported, never a claim's verdict.
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
SERVE_KV = ("f16", "q8_0", "q4_0")  # llama.cpp KV precisions tried for G1 (modeld's KVCacheType "", "q8_0", "q4_0")
MATCH = "match"  # a timed llama.cpp arm at the candidate's KV precision
TIMED_KV = (MATCH,)  # … timed for G2/G3: the candidate's precision, which the same-model rule compares
KV_NAMES = {"float32": "f32", "float": "f32", "f32": "f32", "float16": "f16", "half": "f16", "f16": "f16",
            "bfloat16": "bf16", "bf16": "bf16", "fp8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8", "q8_0": "q8_0",
            "q4_0": "q4_0"}
"""A KV element type as an engine or a model's dtype names it, in llama.cpp's spelling (the same-model rule's)."""
LLAMA_KV = ("f32", "f16", "bf16", "q8_0", "q4_0")  # the KV types llama.cpp's cell opens (cells/llamacpp/llama.py)
KV_CLASS = {"f32": "32-bit float", "f16": "16-bit float", "bf16": "16-bit float", "fp8": "8-bit float",
            "q8_0": "8-bit blocks (q8_0)", "q4_0": "4-bit blocks (q4_0)"}
"""What the same-model rule compares of a KV precision: the element's width and kind (f16 and bf16 are one: the same
bytes per token, and a bf16 checkpoint's KV against llama.cpp's f16, the product's default, is the comparison a
researcher expects), never a quantized KV against a float one."""
MATCH_KV = {"f32": "f32", "f16": "f16", "bf16": "f16"}
"""llama.cpp's timed KV type for a candidate's precision (``match``): the same class, at the product's default where
one serves (f16 for a bf16 candidate)."""
CLAIM_OUTPUT_TOKENS = 128  # the output cap of a G2 turn: part of its stated latency budget
PROMPT_SET = "uniform token ids past the control tokens, one draw per (tier, run), seed {seed}"
RULES = ("G1", "G2", "G3")


class Gates(Declared):
    """The G1–G3 findings declared like a probe's: claims, version, class, figures; a verdict is decided again from
    the rows it recorded (:meth:`rederive`). Version 2: G1 reads refusals from the engine, every gate its cells'
    quality smoke, G2 whole turns; the same-model rule compares shape, KV precision, device and greedy output."""

    version = "2"
    claims = (gates.G1, gates.G2, gates.G3)
    result_class = classes.ResultClass.RAW.value  # engines driven directly, not through contenox-runtime
    figures = (Figure("prefill", "gates_prefill"),)

    def obtained(self, found: Sequence[findings.Finding]) -> str:
        return "workbench certify gates"

    def outcome_defaults(self) -> dict[str, Any]:
        """Moved from these, the run builds its outcome (a hand-picked budget or ladder, a shorter turn, a baseline
        without a KV profile or its speculation, off target): exploratory, never a claim's verdict."""
        return {"output_tokens": CLAIM_OUTPUT_TOKENS, "speculation": "auto", "tiers": list(LADDER),
                "memory_budget_bytes": None, "baseline": list(BASELINE_ARMS), "serve_kv": list(SERVE_KV),
                "timed_kv": list(TIMED_KV), "on_target": True}

    def rederive(self, f: findings.Finding, claim: claims.Claim) -> list[str]:
        """The claim row's verdict decided again by its gate's rule from the rows, identities and rules the finding
        recorded (the same-model check is made again from its identities, never read from its words); a rule that
        departs from the claim's is exploratory and settles nothing, and so is a run on target without the target
        it verified (an NVML GPU and a certified model)."""
        said = f.verdict_on(claim.id)
        rules = rules_of(f.params)
        rule = rules[claim.id]
        if getattr(rule, "exploratory", None):
            return [f"exploratory rule for {claim.id}: {rule.exploratory}"]
        why = [] if f.environment.get("target") or not f.params.get("on_target") else [
            "declared on target, but it recorded no verified target (an NVML GPU and a certified model)"]
        rows = f.evidence.get("rows") or []
        ids = (f.environment.get("gates") or {}).get("identities") or {}
        again = decide(claim.id, rules, rows, f.params.get("ladder") or [],
                       context(rows, ids, bool(f.params.get("subject_model"))))
        return why + ([] if again.verdict == said else [
            f"decided again from the rows it recorded, {claim.id} says {again.verdict}, not {said}: {again.summary}"])


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
    on_target: bool = False  # the claim's run: an NVML GPU here, every model certified, llama.cpp on the GPU
    certified: str | None = None  # with on_target: the file listing the certified models, one a line
    seed: int = 0

    def __post_init__(self) -> None:
        if self.speculation not in ("auto", "always"):
            raise ValueError(f"speculation must be auto or always, got {self.speculation!r}")
        if self.runs < 1 or self.output_tokens < 1 or not self.tiers or min(self.tiers) < 2 * self.output_tokens:
            raise ValueError("runs and output_tokens must be at least 1, and every tier at least twice output_tokens")
        odd = [k for k in (*self.serve_kv, *self.timed_kv) if k not in (*LLAMA_KV, MATCH)]
        if odd:
            raise ValueError(f"llama.cpp KV precisions are {', '.join(LLAMA_KV)} (timed also {MATCH}: the "
                             f"candidate's), got {', '.join(odd)}")
        if self.certified and not self.on_target:
            raise ValueError("--certified is read only with --on-target; add --on-target or drop --certified")

    def rules(self, budget: int) -> dict[str, Any]:
        given = (f"given: {self.memory_budget_bytes / 2**20:.4g} MiB" if self.memory_budget_bytes
                 else gates.BUDGET_RULE)
        return {gates.G1: gates.TierRule(budget_bytes=budget, budget_rule=given),
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
    """One gate's verdict from recorded rows (``context``: the run's same-model checks and its baseline's copy
    share, :func:`context`)."""
    if claim_id == gates.G1:
        return gates.decide_tier(rules[claim_id], rows, ladder, context.get("not_comparable_g1"))
    if claim_id == gates.G2:
        return gates.decide_usable(rules[claim_id], rows, context.get("not_comparable"), context.get("copies"))
    return gates.decide_prefill(rules[claim_id], rows, context.get("not_comparable"))


def context(rows: Sequence[Mapping[str, Any]], identities: Mapping[str, dict], formats: bool = False) -> dict:
    """What the rules read beside the rows, made from what the run recorded: the same-model check of G2/G3
    (``not_comparable``) and of G1 (``not_comparable_g1``: the KV precision varies by design), and the share of the
    plain baseline's warm-up reply found in its prompt (``copies``)."""
    return {"not_comparable": same_model(identities, rows, formats),
            "not_comparable_g1": same_model(identities, rows, formats, g1=True), "copies": copies(rows)}


def copies(rows: Sequence[Mapping[str, Any]]) -> float | None:
    """The plain baseline's warm-up reply: the share of its 4-grams found in its prompt (None: not measured)."""
    return next((r.get("copy_fraction") for r in rows if r.get("kind") == "warmup" and r.get("role") == gates.BASELINE
                 and r.get("speculation", "none") == "none"), None)


# --------------------------------------------------------------------------- the arms


def arms(plan: Plan, copies: bool, kv: str | None = None) -> tuple[Arm, list[Arm], list[Arm]]:
    """The candidate, the baseline's G1 arms (one per KV precision) and its timed arms (at ``kv``, the candidate's
    precision, where :data:`TIMED_KV` says ``match``; with llama.cpp's own speculation where the workload copies, or
    always when asked)."""
    from ..loop import arms as loop_arms

    candidate = Arm(plan.engine, gates.CANDIDATE, plan.engine)
    serve, timed_arms = [], []
    timed_kv = tuple(dict.fromkeys((kv or "f16") if k == MATCH else k for k in plan.timed_kv))
    for name in plan.baseline:
        spec = loop_arms.get(name)
        takes_kv = "kv_type" in {f.name for f in dataclasses.fields(cells.options_class(spec.engine))}
        for kvs, out in ((plan.serve_kv, serve), (timed_kv, timed_arms)):
            for k in (kvs if takes_kv else (None,)):
                opts = dict(spec.cell_options) | ({"kv_type": k} if k else {})
                out.append(Arm(f"{name}:{k}" if k else name, gates.BASELINE, spec.engine, opts, k, spec.speculation))
    if plan.speculation == "always" or copies:
        spec = loop_arms.get(SPEC_ARM)
        k = timed_kv[0]  # llama-server's --cache-type-k/-v: the spec arm at the timed arms' precision
        opts = dict(spec.cell_options)
        opts["server_args"] = (*opts.get("server_args", ()), "--cache-type-k", k, "--cache-type-v", k)
        timed_arms.append(Arm(SPEC_ARM, gates.BASELINE, spec.engine, opts, k, spec.speculation))
    return candidate, serve, timed_arms


def _model_for(plan: Plan, arm: Arm) -> str:
    return plan.subject_model if arm.role == gates.CANDIDATE and plan.subject_model else plan.model


def _target_options(plan: Plan, arm: Arm) -> dict:
    """On target a llama.cpp arm is asked to hold every layer on the GPU (the claim's "llama.cpp CUDA cell"); whether
    it did is its engine's word (:func:`device`), which the same-model rule compares."""
    from ..loop import arms as loop_arms

    if plan.on_target and arm.role == gates.BASELINE:
        return {"gpu_layers": loop_arms.ALL_LAYERS}
    return {}


def _open(plan: Plan, arm: Arm, **extra: Any) -> tuple[Any, float]:
    opts = dict(arm.options) | _target_options(plan, arm) | extra
    if plan.threads:
        opts["threads"] = plan.threads
    return timed(lambda: cells.open_cell(arm.engine, _model_for(plan, arm), **opts))


def device(engine: str, d: Any) -> tuple[str, str]:
    """Where ``engine``'s cell said its layers are: (device, GPU layers). llama.cpp (in-process and served) by its
    load log (``offloaded_layers``, N of M); TensorRT-LLM by the GPUs it runs on; vLLM by its platform's device type;
    the GPU's and the CPU's names from this machine's fingerprint (NVML, /proc/cpuinfo)."""
    hw = environment.hardware()
    gpus = [g.get("name") or "a GPU" for g in ((hw.get("gpu") or {}).get("devices") or [])]
    cpu = f"CPU: {(hw.get('cpu') or {}).get('model') or hw.get('summary') or 'unnamed'}"
    gpu = f"GPU: {gpus[0] if gpus else 'one NVML did not name'}"
    x = d.extra or {}
    if "offloaded_layers" in x:
        done, of = x.get("offloaded_layers") or (0, d.geometry.layers)
        if of and done >= of:
            return gpu, "all"
        return (f"GPU and CPU: {done} of {of} layers on the GPU", f"{done}/{of}") if done else (cpu, "none")
    if x.get("gpu_devices"):
        return gpu, "all"
    said = str((cells.availability(engine).details or {}).get("device") or "")
    if said == "cpu":
        return cpu, "none"
    return (gpu, "all") if said in ("cuda", "gpu") else ("not stated by the engine", "not stated")


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


def precision(arm: Arm, d: Any, model: Any = None) -> str:
    """The arm's KV element type in llama.cpp's spelling (:data:`KV_NAMES`): the precision it was opened with, else
    the one its engine states (vLLM's ``kv_dtype``), else the model's dtype where the engine says its KV takes it
    (TensorRT-LLM's ``KvCacheConfig.dtype='auto'``), else its bytes per value."""
    if arm.kv:
        return KV_NAMES.get(arm.kv, arm.kv)
    said = str((d.extra or {}).get("kv_dtype") or "")
    if said.removeprefix("torch.") in KV_NAMES:
        return KV_NAMES[said.removeprefix("torch.")]
    if "model's dtype" in said:
        weights = (_weights(d, model) or "").lower()
        return KV_NAMES.get(weights, weights or said)
    return f"{d.geometry.dtype_bytes:g} B/value"


def serve_row(plan: Plan, arm: Arm, budget: int, ladder: Sequence[int], served: int = 0, enough: int | None = None) -> dict:
    """G1: ``arm`` under the memory budget: what its engine holds within it, the largest tier within it served (a
    cell whose context its engine capped below that KV, vLLM's default, is opened again at the tier), its cell's
    A2, and, where what it holds was computed rather than stated by the engine, the KV buffer the engine states for
    the next tier (:func:`_next_tier`). ``served``: the largest tier another profile of the same side already served;
    a tier no larger is not served again (it could not raise that side's best, and llama.cpp's q8_0 KV takes minutes
    for 16k tokens on one CPU core), the row says so; nor is any tier where that side already serves ``enough`` (the
    candidate's largest: a larger baseline tier could not change G1's verdict, and q4_0 KV at 32k takes minutes)."""
    row: dict[str, Any] = {"kind": "serve", "arm": arm.name, "role": arm.role, "engine": arm.engine, "kv": arm.kv,
                           "budget_bytes": budget, "engine_capacity_tokens": None, "tier": min(ladder),
                           "served": False, "refused_by": None, "error": None, "quality": "not-run"}
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
            dev, layers = device(arm.engine, d)
            row |= {"engine_capacity_tokens": d.kv_capacity_tokens, "budget_capacity_tokens": within,
                    "context_tokens": d.context_tokens, "kv": precision(arm, d, models.resolve(_model_for(plan, arm))),
                    "load_s": load_s, **memory,
                    "device": dev, "gpu_layers": layers,
                    "capacity_from": "engine" if (d.extra or {}).get("kv_capacity_source") else "computed",
                    "capacity_source": (d.extra or {}).get("kv_capacity_source") or
                    "computed: the budget over the engine's own bytes per token (the cell sized its KV from it)"}
            if not fits:
                row |= {"refused_by": "budget", "error": f"it holds {within} tokens within the budget"}
            elif max(fits) <= served:
                row |= {"tier": max(fits), "served": None,
                        "skipped": f"its tier ({max(fits)}) is one its side already served ({served})"}
            elif enough is not None and served and served >= enough:
                row |= {"tier": max(fits), "served": None,
                        "skipped": f"its tier ({max(fits)}) fits the budget, but its side already serves the "
                                   f"candidate's largest ({enough}): it could not change the verdict"}
            elif max(fits) > d.context_tokens and context is None:
                context = max(fits)
                continue
            else:
                row |= _serve(cell, min(max(fits), d.context_tokens), d, plan)
            row |= _cell_a2(cell, plan.seed)
        break
    top = max(fits, default=0)
    if row["capacity_from"] == "computed" and top < max(ladder):
        row |= _next_tier(plan, arm, min(t for t in ladder if t > top))
    return row


def _cell_a2(cell: Any, seed: int) -> dict:
    """A serve cell's own A2 (:func:`.quality.a2`): its quality status, what it said."""
    try:
        got = quality.a2(cell, seed=seed)
    except (ContextOverflow, UnsupportedFeature, WorkbenchError) as e:
        return {"quality": "not-run", "quality_said": " ".join(str(e).split())[:200]}
    return {"quality": "passed" if got["equal"] else "failed",
            "quality_said": f"A2: warm suffix output {'equals' if got['equal'] else 'differs from'} the cold full prompt's"}


def _next_tier(plan: Plan, arm: Arm, tier: int) -> dict:
    """The KV buffer ``arm``'s engine states it allocates for a context of ``tier`` tokens (llama.cpp's load log,
    "KV buffer size"): its own number for the tier it did not reach, where what it holds within the budget was
    computed. None where the engine states none, or refused to open at that tier (its error recorded)."""
    out: dict[str, Any] = {"next_tier": tier, "next_tier_kv_bytes": None}
    try:
        cell, _ = _open(plan, arm, context_tokens=tier)
    except EngineUnavailable:
        raise
    except (ContextOverflow, UnsupportedFeature, WorkbenchError, ValueError) as e:
        return out | {"next_tier_error": " ".join(str(e).split())[:300]}
    with cell:
        stated = (cell.describe().extra or {}).get("kv_buffer_bytes")
    if stated is not None:
        out |= {"next_tier_kv_bytes": int(stated),
                "next_tier_kv_bytes_from": f"{arm.engine}'s own statement at load (\"KV buffer size\")"}
    return out


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
    return {"tier": tier, "served": True, "prefill_s": prefill_s, "decoded_tokens": len(out.tokens)}


def warmup_row(arm: Arm, cell: Any, tier: int, plan: Plan, vocab: int) -> dict:
    """One untimed request of ``tier`` tokens (its prompt and the output cap) on ``arm``'s open cell before the timed
    runs: what an engine's first requests pay (its start-up) stays out of the runs; the reply's copy share says
    whether the workload copies."""
    from ..loop.replay import copy_fraction

    prompt = _ids(vocab, tier - plan.output_tokens, plan.seed + 7)
    row = {"kind": "warmup", "arm": arm.name, "role": arm.role, "engine": arm.engine, "speculation": arm.speculation,
           "tier": tier, "served": False}
    try:
        _, prefill_s = timed(lambda: cell.ensure_prefix(prompt, salt=f"warmup-{uuid.uuid4().hex}"))
        out = cell.decode(max_tokens=plan.output_tokens)
    except (ContextOverflow, UnsupportedFeature, WorkbenchError) as e:
        return row | {"error": " ".join(str(e).split())[:300]}
    return row | {"served": True, "prefill_s": prefill_s, "decode_tokens": len(out.tokens),
                  "copy_fraction": copy_fraction(prompt, out.tokens)}


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

    return row | {"served": True, "prefill_s": prefill_s, "first_output_s": prefill_s + dec.ttft_s,
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
    target: dict | None = None  # the verified target (an NVML GPU, the certified models), on target only


def _ladder(plan: Plan, resolved: Any) -> tuple[tuple[int, ...], list[str]]:
    ceiling = models.context_ceiling(resolved)
    ladder = tuple(sorted(t for t in set(plan.tiers) if ceiling is None or t <= ceiling))
    notes = [f"tiers above the model's {ceiling}-token context left out: "
             f"{', '.join(str(t) for t in sorted(set(plan.tiers) - set(ladder)))}"] if len(ladder) < len(set(plan.tiers)) else []
    if not ladder:
        raise ValueError(f"no tier of {', '.join(map(str, plan.tiers))} fits model {plan.model} ({ceiling} tokens)")
    return ladder, notes


def default_budget(resolved: Any, ladder: Sequence[int]) -> int:
    """:data:`.gates.BUDGET_RULE`: half the ladder's top tier at 16-bit KV of this model (its GGUF geometry, 2 bytes
    per value): a budget that binds, so each engine's KV bytes per token decide the tier it holds."""
    g = models.gguf_geometry(resolved.path)[0] if resolved.is_gguf else models.hf_geometry(models.hf_config(resolved.path), "float16")[0]
    return max(ladder) * g.bytes_per_token // 2


def _shape(d: Any, model: Any) -> str | None:
    """The arm's model's shape as the files it loaded state it: the Hugging Face folder the engine read (vLLM's twin
    of a synthetic GGUF, or ``--subject-model``), else the model's own file."""
    folder = (d.extra or {}).get("hf_directory")
    try:
        return models.architecture(Path(folder) if folder else model.path)
    except (models.ModelSpecError, OSError):
        return None


def _identity(plan: Plan, arm: Arm, d: Any) -> dict:
    """The arm's same-model identity (:class:`.integrity.Identity`), with its engine's version and what its engine
    said of its layers beside it (the matrix's row reads them)."""
    model = models.resolve(_model_for(plan, arm))
    dev, layers = device(arm.engine, d)
    batch = arm.options.get("n_batch", "the engine's default")
    return {"engine_version": d.engine_version, "offloaded_layers": (d.extra or {}).get("offloaded_layers")} | \
        dataclasses.asdict(Identity(
            model=model.name, digest=model.sha256, quantization=_weights(d, model), architecture=_shape(d, model),
            kv_precision=KV_CLASS.get(precision(arm, d, model), precision(arm, d, model)),
            prompt_set=PROMPT_SET.format(seed=plan.seed),
            output_cap=plan.output_tokens, device=dev,
            runtime_profile=f"threads={plan.threads or 'default'}; batch={batch}; gpu_layers={layers}",
            warm_state="cold")) | {"kv": precision(arm, d, model)}


def same_model(identities: Mapping[str, dict], rows: Sequence[Mapping[str, Any]], formats: bool = False,
               g1: bool = False) -> str | None:
    """The same-model rule between the candidate and each baseline timed arm (context is each row's tier, so it is
    compared row by row by construction), and between their greedy replies on one shared prompt (A2's cold one):
    the differences in words, or None. ``formats``: the candidate runs the model in another format
    (``--subject-model``), so its name and digest are the user's word, not compared (its shape, weights and greedy
    output are). ``g1``: G1's check, where the KV precision varies by design and each serve cell's device and GPU
    layers are compared with the candidate's."""
    roles = {r["arm"]: r.get("role") for r in rows if r.get("kind") == "timed"}
    cand = [a for a in identities if roles.get(a) == gates.CANDIDATE]
    if not cand:
        return None
    mine = Identity.of(identities[cand[0]])
    varies = ("context", "model", "digest") if formats else ("context",)
    varies += ("kv_precision",) if g1 else ()
    out = []
    for a, i in identities.items():
        if roles.get(a) == gates.BASELINE:
            out += [f"{a}: {w}" for w in differences(mine, Identity.of(i), varies=varies)]
            out += [f"{a}: {w}" for w in [greedy(rows, cand[0], a)] if w]
    if g1:
        serve = [r for r in rows if r.get("kind") == "serve"]
        c = next((r for r in serve if r.get("role") == gates.CANDIDATE), {})
        for r in serve:
            if r.get("role") == gates.BASELINE and r.get("device") is not None:
                out += [f"{r['arm']} (under the budget): {k.replace('_', ' ')}: {c.get(k)} vs {r.get(k)}"
                        for k in ("device", "gpu_layers") if r.get(k) != c.get(k)]
    return "; ".join(dict.fromkeys(out)) or None


def greedy(rows: Sequence[Mapping[str, Any]], cand: str, arm: str) -> str | None:
    """Whether ``arm`` answers the shared prompt as the candidate does under greedy decode (each one's A2 cold
    reply, :func:`.quality.a2`): None where it does, else why not (two files of one checkpoint answer alike)."""
    def reply(a: str) -> Mapping[str, Any] | None:
        return next((r for r in rows if r.get("kind") == "a2" and r.get("arm") == a
                     and r.get("cold_tokens") is not None), None)

    c, b = reply(cand), reply(arm)
    if c is None or b is None:
        return f"no greedy reply of {cand if c is None else arm} on the shared prompt (no A2 tokens)"
    if c.get("prompt_sha256") != b.get("prompt_sha256"):
        return "the greedy replies answer different prompts (the vocabularies differ)"
    if list(c["cold_tokens"]) != list(b["cold_tokens"]):
        return (f"greedy output on the shared prompt differs: {list(b['cold_tokens'])} vs the candidate's "
                f"{list(c['cold_tokens'])}")
    return None


def _smoke(name: str, arm: Arm, cell: Any, synthetic: bool, seed: int) -> list[dict]:
    """The arm's quality smoke on its open cell (:func:`.quality.smoke`) as rows; a cell that cannot run it says
    why in a row of its own (its throughput then makes no claim)."""
    who = {"arm": name, "role": arm.role, "engine": arm.engine}
    try:
        status, said, _, rows = quality.smoke(cell, synthetic, seed)
    except (UnsupportedFeature, WorkbenchError) as e:
        return [{"kind": "a2", **who, "status": "not-run", "equal": None, "said": " ".join(str(e).split())[:300]}]
    return [r | who | {"status": status, "said": said} for r in rows]


def measure(plan: Plan) -> Measured:
    """Every row of the run (serve, warm-up, quality, timed), opened and closed here; see the module's words."""
    resolved = models.resolve(plan.model)
    ladder, notes = _ladder(plan, resolved)
    budget = plan.memory_budget_bytes or default_budget(resolved, ladder)
    rows: list[dict] = []
    candidate, serve, _ = arms(plan, False)
    rows.append(serve_row(plan, candidate, budget, ladder))
    top = int(rows[0]["tier"]) if rows[0].get("served") else 0
    for arm in serve:
        best = max((int(r["tier"]) for r in rows if r["role"] == gates.BASELINE and r.get("served")), default=0)
        rows.append(serve_row(plan, arm, budget, ladder, best, top))
    opened: dict[str, tuple[Arm, Any, float]] = {}
    described: dict[str, Any] = {}
    try:
        cell, load_s = _open(plan, candidate, context_tokens=max(ladder))
        opened[candidate.name] = (candidate, cell, load_s)
        kv = MATCH_KV.get(precision(candidate, cell.describe(), models.resolve(_model_for(plan, candidate))))
        if kv is None:
            notes.append("the candidate's KV precision is none llama.cpp runs as a float: its timed arms run f16, and "
                         "the same-model rule says so")
        baseline = arms(plan, False, kv)[2]
        for arm in baseline:
            cell, load_s = _open(plan, arm, context_tokens=max(ladder))
            opened[arm.name] = (arm, cell, load_s)
        vocab = int(opened[candidate.name][1].describe().extra.get("vocab_size") or 512)
        for name, (arm, cell, _) in opened.items():
            rows.append(warmup_row(arm, cell, min(ladder), plan, vocab))
        copying = copies(rows) if plan.speculation == "auto" else None
        if plan.speculation == "always" or (copying or 0) >= gates.COPY_HEAVY:
            arm = arms(plan, True, kv)[2][-1]
            cell, load_s = _open(plan, arm, context_tokens=max(ladder))
            opened[arm.name] = (arm, cell, load_s)
            rows.append(warmup_row(arm, cell, min(ladder), plan, vocab))
        described = {name: cell.describe() for name, (_, cell, _) in opened.items()}
        rows += _smoked_and_timed(plan, opened, ladder, vocab, resolved.kind == "synthetic")
    finally:
        for _, cell, _ in opened.values():
            cell.close()
    identities = {name: _identity(plan, opened[name][0], d) for name, d in described.items()}
    return Measured(rows, ladder, budget, identities, described, notes, copies(rows), resolved)


def _smoked_and_timed(plan: Plan, opened: Mapping[str, tuple[Arm, Any, float]], ladder: Sequence[int], vocab: int,
                      synthetic: bool) -> list[dict]:
    """Each open arm's A2 rows, then the timed runs: every tier of the ladder on every arm, arms interleaved and their
    order rotated every run."""
    rows = [r for name, (arm, cell, _) in opened.items() for r in _smoke(name, arm, cell, synthetic, plan.seed)]
    loads = {name: load_s for name, (_, _, load_s) in opened.items()}
    order = list(opened)
    for run in range(plan.runs):
        turn = order[run % len(order):] + order[:run % len(order)]  # rotated every run
        for tier in ladder:
            for name in turn:
                arm, cell, _ = opened[name]
                rows.append(timed_row(arm, cell, tier, run, plan, loads.pop(name, None), vocab))
    return rows


def time_arms(plan: Plan, given: Sequence[Arm]) -> list[dict]:
    """The gates' warm-up, A2 and timed rows of ``given`` arms, each opened on ``plan.model`` with the ladder's top as
    its context unless its options say otherwise: a tool beside the gates' own run, for rows of arms configured
    otherwise (a llama.cpp held to a shorter context, or to one token a forward pass) that drive a rule to each of
    its verdicts on real engines (tests/certify/test_gates_vllm.py). Run in a child process (:func:`isolate.call`)
    where vLLM is among them."""
    resolved = models.resolve(plan.model)
    ladder, _ = _ladder(plan, resolved)
    opened: dict[str, tuple[Arm, Any, float]] = {}
    try:
        for arm in given:
            cell, load_s = _open(plan, arm, **({} if "context_tokens" in arm.options else
                                               {"context_tokens": max(ladder)}))
            opened[arm.name] = (arm, cell, load_s)
        vocab = int(next(iter(opened.values()))[1].describe().extra.get("vocab_size") or 512)
        rows = [warmup_row(arm, cell, min(ladder), plan, vocab) for arm, cell, _ in opened.values()]
        return rows + _smoked_and_timed(plan, opened, ladder, vocab, resolved.kind == "synthetic")
    finally:
        for _, cell, _ in opened.values():
            cell.close()


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
    said = context(m.rows, m.identities, bool(plan.subject_model)) | {
        "formats": (f"the candidate runs {plan.subject_model}, the baseline {plan.model}: one checkpoint by the user's "
                    "word (model and digest not compared; shape, weights and greedy output are)")
        if plan.subject_model else None}
    out = {c: decide(c, rules, m.rows, m.ladder, said) for c in Gates.claims}
    verdict = headline({c: o.verdict for c, o in out.items()})
    values = _values(out)
    cand = m.described.get(plan.engine)
    env = environment.fingerprint(plan.engine, cand.engine_version if cand else None, m.resolved,
                                  cand.geometry if cand else None, {"gates": {"identities": m.identities}}
                                  | ({"target": m.target} if m.target else {}))
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
                  "gates": said},
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
    target = verified_target(plan)
    try:
        m = measure(plan)
    except EngineUnavailable as e:
        return _not_run(plan, e.reason)
    m.target = target
    return finding(plan, m)


def verified_target(plan: Plan) -> dict | None:
    """On target, checked rather than believed (:mod:`workbench.loop.target`): NVML reports a GPU here and every model
    the run loads is in the ``certified`` list (G4's own rule); None off target. Raises WorkbenchError naming what to
    fix, before anything runs."""
    if not plan.on_target:
        return None
    from ..loop import target

    specs = [plan.model] + ([plan.subject_model] if plan.subject_model else [])
    return target.verify_gpu(environment.hardware()) | target.verify_models(
        Path(plan.certified) if plan.certified else None, specs)


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


__all__ = ["Arm", "BASELINE_ARMS", "DEFAULT_MODEL", "Gates", "KV_CLASS", "KV_NAMES", "LADDER", "LLAMA_KV", "MATCH",
           "MATCH_KV", "Measured",
           "PROBE", "Plan", "SERVE_KV", "TIMED_KV", "arms", "context", "copies", "decide", "default_budget", "device",
           "finding", "greedy", "headline", "measure", "percentiles", "precision", "rules_of", "run", "run_in_child",
           "same_model", "serve_row", "time_arms", "timed_row", "verified_target", "warmup_row"]
