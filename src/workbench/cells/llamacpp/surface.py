"""The llama.cpp API table: the C functions each contract row is served by, checked by ``surface.contract_mapping``
against the installed llama_cpp, and the C entry point ``surface.cpp_entrypoint`` looks for."""

from __future__ import annotations

import inspect

from ._internals import lib

# The llama.cpp C functions each contract row is served by (what the llama.cpp cell calls), with the
# parameter names llama-cpp-python gives them, as read from the release named here. A changed name is
# API drift the probe reports.
EXPECTED_AGAINST = "0.3.36"
C_SIGNATURES = {
    "llama_adapter_lora_init": ("model", "path_lora"),
    "llama_batch_init": ("n_tokens", "embd", "n_seq_max"),
    "llama_decode": ("ctx", "batch"),
    "llama_free": ("ctx",),
    "llama_get_embeddings_seq": ("ctx", "seq_id"),
    "llama_init_from_model": ("model", "params"),
    "llama_memory_can_shift": ("mem",),
    "llama_memory_clear": ("mem", "data"),
    "llama_memory_seq_add": ("mem", "seq_id", "p0", "p1", "delta"),
    "llama_memory_seq_pos_max": ("mem", "seq_id"),
    "llama_memory_seq_pos_min": ("mem", "seq_id"),
    "llama_memory_seq_rm": ("mem", "seq_id", "p0", "p1"),
    "llama_model_load_from_file": ("path_model", "params"),
    "llama_model_meta_val_str": ("model", "key", "buf", "buf_size"),
    "llama_model_n_head_kv": ("model",),
    "llama_model_n_layer": ("model",),
    "llama_n_ctx": ("ctx",),
    "llama_n_ctx_seq": ("ctx",),
    "llama_sampler_chain_init": ("params",),
    "llama_sampler_init_grammar": ("vocab", "grammar_str", "grammar_root"),
    "llama_sampler_sample": ("smpl", "ctx", "idx"),
    "llama_set_adapters_lora": ("ctx", "adapters", "n_adapters", "scales"),
    "llama_state_seq_get_data": ("ctx", "dst", "size", "seq_id"),
    "llama_state_seq_get_size": ("ctx", "seq_id"),
    "llama_state_seq_set_data": ("ctx", "src", "size", "dest_seq_id"),
    "llama_tokenize": ("vocab", "text", "text_len", "tokens", "n_tokens_max", "add_special", "parse_special"),
}
SURFACE: dict[str, dict[str, tuple[str, ...]]] = {claim: {f: C_SIGNATURES[f] for f in fns} for claim, fns in {
    "contract.manifest": ("llama_model_load_from_file", "llama_adapter_lora_init"),
    "contract.ensure_prefix": ("llama_tokenize", "llama_decode", "llama_memory_seq_rm", "llama_model_meta_val_str"),
    "contract.prefill_suffix": ("llama_decode", "llama_batch_init"),
    "contract.decode": ("llama_sampler_chain_init", "llama_sampler_sample", "llama_sampler_init_grammar"),
    "contract.explain_context": ("llama_memory_seq_pos_min", "llama_memory_seq_pos_max", "llama_memory_seq_add",
                                 "llama_memory_can_shift"),
    "contract.snapshot": ("llama_state_seq_get_size", "llama_state_seq_get_data", "llama_state_seq_set_data"),
    "contract.describe": ("llama_model_n_layer", "llama_model_n_head_kv", "llama_n_ctx", "llama_n_ctx_seq"),
    "contract.embed": ("llama_get_embeddings_seq",),
    "contract.lora": ("llama_adapter_lora_init", "llama_set_adapters_lora"),
    "contract.slot_switch": ("llama_init_from_model", "llama_free", "llama_memory_clear"),
    "contract.overflow": ("llama_n_ctx", "llama_n_ctx_seq"),
}.items()}


def surface_rows() -> list[dict]:
    """One row per contract claim: does llama_cpp have each C function of :data:`SURFACE` with its parameter names?"""
    ll = lib()
    rows = []
    for claim, fns in SURFACE.items():
        missing = []
        for f, want in fns.items():
            fn = getattr(ll, f, None)
            if fn is None:
                missing.append(f"{f} (absent)")
                continue
            try:
                got = tuple(inspect.signature(fn).parameters)
            except (TypeError, ValueError):
                got = None
            if got != want:
                missing.append(f"{f} (parameters {got}, expected {want})")
        rows.append({"claim": claim, "mechanism": ", ".join(fns), "mechanism_count": len(fns), "ok": not missing,
                     "missing": missing, "version": ll.__version__})
    return rows
