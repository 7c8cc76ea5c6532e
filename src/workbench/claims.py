"""The blueprint's testable claims, declared once.

Each claim has a stable id, the blueprint section it lives in, the exact text that identifies
its row or item in the Markdown blueprint (``match``: the start of the Risks/Contract table's first
cell, or of the Open Unknowns list item), and its *subject*: the engine whose behaviour it is
about. Probes cite claim ids; the write-back finds the row by ``match``; nothing else duplicates
the blueprint's words.

Only a finding from the subject engine can settle a claim; another engine's finding is a
reference beside it (see :mod:`workbench.standing`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Subject:
    """An engine claims can be about, and what a machine needs to answer them."""

    engine: str  # the cell registry's engine name
    name: str  # as people write it
    needs: str  # what running its probes takes, for "unresolved — needs …"


SUBJECTS = {"trtllm": Subject("trtllm", "TensorRT-LLM", "tensorrt_llm on an NVIDIA GPU")}


@dataclass(frozen=True)
class Claim:
    id: str
    section: str  # "unknowns" | "risks" | "contract" | "entry"
    match: str
    text: str
    subject: str = "trtllm"  # every blueprint claim is about TensorRT-LLM
    resolve: str | None = None  # the command that settles it, where that is not the probes citing it (one shell line
    # that pastes on a GPU machine: --model and --out given, HF_DIR the model folder to fill in, a note as a # comment)
    survey: bool = False  # about what the release ships, not how it behaves: a static survey may settle it
    on_target: bool = False  # about target hardware: settled only by a finding whose fingerprint has its GPU

    @property
    def about(self) -> Subject:
        return SUBJECTS[self.subject]


SECTIONS = {
    "unknowns": "Open Unknowns",
    "risks": "Risks",
    "contract": "Contract Mapping Reference",
    "entry": "Admissible Future Shape",
    # the specialization-cells blueprint's four step-function gates, under the entry condition (workbench.certify)
    "gates": "Step-function gates",
    "certification": "Certification matrix",  # what every cell publishes beside the gates (workbench.certify.matrix)
    "gateway": "Event plane claims",  # in the gateway guide (data/guide/, workbench.events.guide), not the blueprint
    "shapes": "Gateway shape claims",  # the gateway guide's shapes on a pool of real engines (workbench.gateway)
    "seed004": "Seed 004: TensorRT-LLM as an eval backend",  # its acceptance criteria (workbench evaltable)
    # the cell on modeld's own wire: the daemon, backend-parity invariants and the benchmark report (workbench.transport)
    "cell": "The cell on modeld's wire",
}

GATES_RUN = ("workbench certify gates --engine trtllm --model GGUF --subject-model HF_DIR --on-target --certified FILE "
             "--out findings")
GATES_COMMAND = GATES_RUN + "  # on an NVIDIA GPU (llama.cpp holds every layer on it); GGUF and HF_DIR one model"
"""What measures G1–G3 on target (workbench.certify.long_context)."""
LOOP_COMMAND = ("workbench loop --trace taubench --arms trtllm,llamacpp,llamacpp-spec,llamacpp-server,"
                "llamacpp-server-spec --model GGUF --arm-model trtllm=HF_DIR --on-target --certified FILE --out findings")
"""What measures G4 on target: the agentic loop (workbench.loop)."""

_CLAIMS = [
    # Open Unknowns
    Claim("unknown.cpp_entrypoint", "unknowns",
          "Whether the current TensorRT-LLM release exposes a documented, stable C/C++ entrypoint",
          "Whether the current TensorRT-LLM release exposes a documented, stable C/C++ entrypoint for the "
          "PyTorch-native model-definition path without embedding Python.", survey=True),
    Claim("unknown.reuse_metrics", "unknowns", "Exact LLM-API surface and granularity of per-request KV reuse metrics",
          "Exact LLM-API surface and granularity of per-request KV reuse metrics."),
    Claim("unknown.retention_pressure", "unknowns", "Whether priority-100 retention survives sustained pressure",
          "Whether priority-100 retention survives sustained pressure."),
    Claim("unknown.connector_granularity", "unknowns", "Whether the Connector API can export blocks with positions",
          "Whether the Connector API can export blocks with positions usable for shifted import, or only "
          "whole-prefix onboard."),
    # Risks
    Claim("risk.warmup", "risks", "Warm-up `max_tokens=1` may not materialize",
          "Warm-up `max_tokens=1` may not materialize/retain all prefix blocks under pressure."),
    Claim("risk.retention_bias", "risks", "Priority retention may only bias LRU rather than pin",
          "Priority retention may only bias LRU rather than pin."),
    Claim("risk.reuse_metrics", "risks", "Per-request perf metrics may not expose reused-block counts",
          "Per-request perf metrics may not expose reused-block counts."),
    Claim("risk.version_churn", "risks", "Version churn across TensorRT-LLM releases",
          "Version churn across TensorRT-LLM releases.", survey=True,
          # settled across releases (workbench.probes.churn), not by one run
          resolve="workbench probe surface.contract_mapping --engine trtllm --model HF_DIR --out findings  "
                  "# once with each TensorRT-LLM release installed (at least two), into the same --out"),
    Claim("risk.memory_fraction", "risks", "`free_gpu_memory_fraction` conflicts with byte-based capacity policy",
          "`free_gpu_memory_fraction` conflicts with byte-based capacity policy."),
    # Contract Mapping Reference rows
    Claim("contract.manifest", "contract", "Manifest-keyed reuse validity",
          "Manifest-keyed reuse validity: `cache_salt` = manifest digest ⊕ adapter digests; KV never crosses manifests."),
    Claim("contract.ensure_prefix", "contract", "`EnsurePrefix`",
          "EnsurePrefix: warm-up `generate_async(max_tokens=1)` with `KvCacheRetentionConfig` pinning the prefix range."),
    Claim("contract.prefill_suffix", "contract", "`PrefillSuffix`",
          "PrefillSuffix: deferred, riding the next decode's prefill."),
    Claim("contract.decode", "contract", "`Decode`",
          "Decode: `generate_async(streaming=True)` with `SamplingParams` and `GuidedDecodingParams`."),
    Claim("contract.explain_context", "contract", "`ExplainContext`",
          "ExplainContext: RemoveTail=false, RemoveMiddle=false, PositionShift=false, RecomputeRange=true."),
    Claim("contract.snapshot", "contract", "`Snapshot`/`Restore`",
          "Snapshot/Restore: text-level snapshot; engine KV blobs are not exportable."),
    Claim("contract.describe", "contract", "`Describe`",
          "Describe: KV geometry from config.json, enforced via `max_seq_len` + `KvCacheConfig.max_tokens`."),
    Claim("contract.embed", "contract", "`Embed`", "Embed: ErrUnsupportedFeature."),
    Claim("contract.lora", "contract", "LoRA", "LoRA: `LoraConfig` + per-request adapters; digests fold into `cache_salt`."),
    Claim("contract.slot_switch", "contract", "Slot switch", "Slot switch: tear down / recreate the `LLM` instance."),
    Claim("contract.overflow", "contract", "`ErrContextOverflow`",
          "ErrContextOverflow: enforced adapter-side from token counts before dispatch."),
    # Entry conditions
    Claim("entry.step_function", "entry",
          "a benchmark on target hardware (certified model, agentic loop, product path) showing a step-function win",
          "A benchmark on target hardware (certified model, agentic loop, product path) showing a step-function win "
          "over the llama.cpp CUDA cell, including a llama.cpp-with-speculation baseline.",
          # settled across the four gates (workbench.standing.step_function): kept when any one is confirmed on
          # target, refuted when all four are; no finding cites it
          on_target=True, resolve=f"{GATES_RUN} && {LOOP_COMMAND}"),
    Claim("entry.contract_table", "entry",
          "the contract-mapping table below validated against the then-current TensorRT-LLM release",
          "The contract-mapping table below validated against the then-current TensorRT-LLM release.", survey=True),
]

# The specialization-cells blueprint's step-function gates (contenox/runtime 2bfdc1f5,
# docs/development/blueprints/modeld/effective-context/specialization-cells-blueprint.md, "Step-Function Gates"): "Keep
# a candidate cell only if it delivers at least one". Each is its own claim and rule (workbench.certify.gates); the
# entry condition above is kept when any one is confirmed on target. ``match`` is the gate's label in the written-back
# line (workbench.certify.writeback), not a row of the blueprint.
_CLAIMS += [
    Claim("gate.context_tier", "gates", "G1 context tier",
          "Context tier that otherwise cannot run: under the same memory budget (the capacity policy), the subject "
          "serves a context tier the best llama.cpp cannot.", on_target=True, resolve=GATES_COMMAND),
    Claim("gate.usable_context", "gates", "G2 usable context",
          "At least 2x usable context at the same latency budget: the largest context the subject serves within a "
          "stated first-output and turn-time budget is at least twice the best llama.cpp's.", on_target=True,
          resolve=GATES_COMMAND),
    Claim("gate.prefill_32k", "gates", "G3 long-context prefill",
          "At least 3x prefill/first-output improvement at 32k+ context: the subject's prefill or first-output time "
          "at 32k or 64k tokens beats the best llama.cpp's by 3x on the lower bound of its interval.", on_target=True,
          resolve=GATES_COMMAND),
    Claim("gate.turn_time", "gates", "G4 agent turn time",
          "Materially better end-to-end agent turn time at the same quality: the agentic loop against the best "
          "llama.cpp arm, its own speculation included (the source gives no number; the workbench's own reading of "
          "\"materially\" is in workbench.loop.gate).", on_target=True, resolve=LOOP_COMMAND),
]
GATES = ("gate.context_tier", "gate.usable_context", "gate.prefill_32k", "gate.turn_time")
"""The four gates in the source's order: the entry condition is a disjunction of them."""

# The certification matrix's quality column (workbench.certify.quality): benchmark integrity's "answer-quality smoke",
# with alternative-silicon.md's tier A2 (contenox/runtime 2bfdc1f5, docs/development/blueprints/modeld/).
_CLAIMS += [
    Claim("cert.quality_smoke", "certification", "quality smoke",
          "Quality smoke: warm suffix output equals the cold full prompt under greedy decode (certification tier A2) "
          "and a small task set passes its checker; without it no throughput claim stands.",
          resolve="workbench certify quality --engine trtllm --model HF_DIR --out findings"),
]

# The cache-aware gateway's TensorRT-LLM guide (data/guide/trtllm-gateway.md): its premises about the engine.
_CLAIMS += [
    Claim("gateway.admission", "gateway", "Admission: `GET /server_info` reports the block size and hash contract",
          "Admission: `GET /server_info` reports the block size and hash contract the routing rule must match "
          "(\"Confirm each endpoint's /server_info reports the expected block size before relying on KV routing\").",
          # in-process there is no /server_info (the probe says not-applicable): the served engine answers it
          resolve="workbench probe events.admission --engine trtllm-serve --model HF_DIR --out findings"),
    Claim("gateway.one_consumer", "gateway", "Exactly one consumer: `POST /kv_cache_events` drains",
          "Exactly one consumer: `POST /kv_cache_events` drains buffered events, so a second consumer takes events "
          "from the first (\"The Gateway must be the sole consumer for each endpoint\")."),
    Claim("gateway.inventory", "gateway", "The inventory built from the events predicts the engine's reuse",
          "The inventory built from the events predicts the engine's reuse, the premise of KV-exact routing "
          "(\"Per-endpoint KV inventory → KV-exact selection\")."),
    Claim("gateway.ledger", "gateway", "The event ledger closes",
          "The event ledger closes: under an eviction ramp stored − removed equals what the engine holds, a clear or "
          "restart empties the inventory and misses follow, and removing one of two copies of a block does not "
          "invalidate its hash (a mirror never leaks or forgets blocks)."),
    Claim("gateway.hash_parity", "gateway", "Block hashes can be recomputed from token ids",
          "Block hashes can be recomputed from token ids (hash parity: \"Correct parity, then warm the pool again "
          "before measuring\")."),
    Claim("gateway.overflow", "gateway", "A bounded event buffer drops events on overflow",
          "A bounded event buffer drops events on overflow, and a consumer can detect the loss and resynchronise "
          "(\"Subscriber repeatedly resynchronizes: another consumer drains events or the engine ring overflows\").",
          # the cell's default buffer (1024 events) never overflows on the probe's few requests: shrink it
          resolve="workbench probe events.overflow_resync --engine trtllm -c event_buffer_max_size=4 --model HF_DIR "
                  "--out findings"),
    Claim("gateway.isolation", "gateway", "Isolation in the inventory: salted or LoRA requests do not merge",
          "Isolation in the inventory: salted or LoRA requests do not merge in an inventory built from events."),
    Claim("gateway.diagnosis", "gateway", "\"KV hits remain zero\" when block size, tokenizer or event ownership is wrong",
          "\"KV hits remain zero\" when block size, tokenizer or event ownership is wrong (the guide's failure "
          "diagnosis)."),
]

# The gateway guide's shapes (data/guide/trtllm-gateway.md, "Gateway shape claims"): subject trtllm-serve.
_PD = ("workbench probe gateway.pd --engine trtllm-serve --model HF_DIR --out findings  "
       "# two trtllm-serve workers with cache_transceiver_config, on an NVIDIA GPU")
_CLAIMS += [
    Claim("shapes.kv_routing", "shapes", "KV-exact routing beats fullproxy on engine-read hit rate and TTFT",
          "KV-exact routing beats fullproxy on engine-read hit rate and TTFT (\"Single-pool KV-exact: add "
          "`kvExactMode: 3` and a matching `kvBlockSize`\").",
          resolve="workbench probe gateway.routing --engine trtllm-serve --model HF_DIR --out findings"),
    Claim("shapes.pd_lifecycle", "shapes", "The P/D lifecycle holds",
          "The P/D lifecycle holds: the generation leg keeps the original prompt, the opaque state is relayed "
          "untouched, and a context result that already finished skips generation (\"Sequential P/D lifecycle\").",
          resolve=_PD),
    Claim("shapes.pd_transferred_kv", "shapes", "The decode uses the transferred KV",
          "The decode uses the transferred KV: the generation endpoint loads the context leg's KV instead of "
          "recomputing it.", resolve=_PD),
]

# Seed 004 (TensorRT-LLM as an eval backend): the acceptance criteria the eval-backend table measures.
_CLAIMS += [
    Claim("seed004.prefix_caching", "seed004", "Paged KV cache + prefix caching flags confirmed active",
          "Paged KV cache + prefix caching flags confirmed active: a request that repeats a served prompt's shared "
          "prefix finds it cached, as the server counts it.",
          # settled by the table's shared-prefix cells (workbench.evaltable.finding), not by a probe
          resolve="workbench evaltable --backend trtllm-serve --model HF_DIR --workload prefix-1k --out DIR"),
]

# The cell the blueprint's "Admissible Future Shape" describes ("a separate binary implementing the modeld gRPC transport
# contract"), held to modeld's own rules: its wire (runtime/transport/grpc), the backend-parity invariants
# (backend-parity-blueprint.md I1, I2, I6) and the benchmark report's equivalence (runtime/benchreport, certification
# tier A2 of alternative-silicon.md). Settled by contract.conformance and contract.benchreport through the daemon.
_CLAIMS += [
    Claim("cell.wire", "cell", "The cell answers on modeld's wire",
          "The cell answers on modeld's wire: contenox.transport.v1.Compute with the JSON codec, an unfenced Health, "
          "the owner fence on every other call (a stale fence never reaches the engine), errors as modeld's tokens."),
    Claim("parity.fatal", "cell", "I1. Fatal-error discipline",
          "I1. Fatal-error discipline: an engine fault gives ErrSessionFatal and ContextReport.FatalError, and the "
          "poisoned session never reaches the engine again."),
    Claim("parity.capability_truth", "cell", "I2. Capability truth",
          "I2. Capability truth: a residency capability is reported exactly when the operation that needs it succeeds "
          "on the engine."),
    Claim("parity.deferred_prefill", "cell", "I6. Deferred prefill behind a per-backend opt-in",
          "I6. Deferred prefill behind a per-backend opt-in, with its DeferredPrefill* counters (and the physical "
          "ones) moving exactly as the engine works."),
    Claim("bench.warm_equals_cold", "cell", "A2. Warm suffix output equals the cold full prompt",
          "A2. Warm suffix output equals the cold full prompt under greedy decode, with the stable prefix reused by "
          "the engine (benchreport's warm_changed_suffix.output_equals_cold)."),
    Claim("bench.edited_miss", "cell", "An edited stable segment is a precise cache miss",
          "An edited stable segment is a precise cache miss (the engine recomputes it) and still equals a cold run "
          "(benchreport's edited_stable_segment)."),
]

CLAIMS: dict[str, Claim] = {c.id: c for c in _CLAIMS}


def get(claim_id: str) -> Claim:
    try:
        return CLAIMS[claim_id]
    except KeyError:
        raise KeyError(f"unknown claim {claim_id!r}; known: {', '.join(CLAIMS)}") from None


def in_section(section: str) -> list[Claim]:
    return [c for c in _CLAIMS if c.section == section]
