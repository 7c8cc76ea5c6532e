"""Static surface probes: they read the installed engine package, never run a model.

* ``surface.cpp_entrypoint`` — is there a C/C++ entry point for the engine's native model path?
  TensorRT-LLM: survey headers, shared libraries and their exported Executor symbols, and what
  each Executor constructor takes (engine directory vs model code). llama.cpp: whether libllama
  exports the C API the cell uses (the incumbent's answer, for comparison).
* ``surface.contract_mapping`` — row by row, does each mechanism of the Contract Mapping table
  exist in the installed release with the expected signature (TensorRT-LLM: the cell's version
  guard; llama.cpp: the functions its cell calls). Behavioural probes say whether it *works*.
  On TensorRT-LLM each guard row also records the signature it read (where the symbol lives, which of
  the names the cell uses it has, the defaults the cell pins): :func:`churn_verdict` compares those
  tables across releases for ``risk.version_churn``, which one survey cannot answer.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path

from ..observe.survey import elf_defined_dynamic_symbols, survey
from ..standing import natural
from . import NotRunnable, Outcome, Probe, ProbeContext, Support

_PACKAGE = {"trtllm": "tensorrt_llm", "llamacpp": "llama_cpp", "vllm": "vllm"}

# The llama.cpp C functions each contract row is served by (what the llama.cpp cell calls), with the
# parameter names llama-cpp-python gives them, as read from the release named here. A changed name is
# API drift the probe reports.
LLAMACPP_EXPECTED_AGAINST = "0.3.36"
_SIG = {
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
LLAMACPP_ROWS: dict[str, dict[str, tuple[str, ...]]] = {claim: {f: _SIG[f] for f in fns} for claim, fns in {
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

# The version-guard rows (``workbench.cells.trtllm_guard.GUARD``) each contract row relies on:
# ``symbol`` means every guard row of that symbol, ``symbol:feature`` only the row for that feature
# (``llmapi.llm_args.TorchLlmArgs`` has one row per feature).
TRTLLM_ROWS: dict[str, tuple[str, ...]] = {
    "contract.manifest": ("LLM.generate_async",),
    "contract.ensure_prefix": ("LLM.generate_async", "llmapi.KvCacheRetentionConfig",
                               "llmapi.KvCacheRetentionConfig.TokenRangeRetentionConfig"),
    "contract.prefill_suffix": ("LLM.generate_async",),
    "contract.decode": ("LLM.generate_async", "llmapi.SamplingParams", "llmapi.GuidedDecodingParams",
                        "llmapi.llm_args.TorchLlmArgs:guided"),
    "contract.explain_context": ("LLM.get_kv_cache_events",),
    "contract.snapshot": ("llmapi.llm_args.KvCacheConnectorConfig", "llmapi.llm_args.TorchLlmArgs:connector",
                          "_torch.pyexecutor.kv_cache_connector.KvCacheConnectorWorker"),
    "contract.describe": ("llmapi.KvCacheConfig", "llmapi.llm_args.TorchLlmArgs:core"),
    "contract.embed": (),  # mapped to ErrUnsupportedFeature: nothing to find
    "contract.lora": ("llmapi.LoRARequest", "lora_helper.LoraConfig", "llmapi.llm_args.TorchLlmArgs:lora"),
    "contract.slot_switch": ("LLM",),
    "contract.overflow": ("llmapi.llm_args.TorchLlmArgs:core",),
}


def package_dir(engine: str) -> Path:
    """The engine package's installed directory, found without importing it."""
    name = _PACKAGE[engine]
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise NotRunnable(f"{name} is not installed; this static survey needs the package (not a GPU)")
    return Path(next(iter(spec.submodule_search_locations)))


@dataclass(frozen=True)
class NoParams:
    pass


class CppEntrypoint(Probe):
    version = "2"
    claims = ("unknown.cpp_entrypoint",)
    Params = NoParams
    needs_engine = False

    def run(self, ctx: ProbeContext, p: NoParams) -> Outcome:
        root = package_dir(ctx.engine)
        if ctx.engine == "llamacpp":
            return _llamacpp_entry(root)
        if ctx.engine == "vllm":
            return _vllm_entry(root)
        s = survey(root)
        rows = [{"kind": "constructor", "where": c.where, "source": c.source, "takes": c.takes,
                 "signature": c.signature} for c in s.constructors]
        rows += [{"kind": "library", "where": lib.path, "executor_symbols": len(lib.executor_symbols),
                  "symbol_source": lib.symbol_source, "error": lib.error} for lib in s.libraries]
        metrics = {"headers": len(s.headers), "executor_symbols": sum(len(lib.executor_symbols) for lib in s.libraries)}
        notes = [f"surveyed {root}: {len(s.headers)} headers, {len(s.libraries)} shared libraries "
                 f"(symbols via {s.symbol_channel}); Executor constructors take: {', '.join(s.entry_kinds) or 'none found'}",
                 "documentation and stability cannot be read from files; a positive answer still needs NVIDIA's word"]
        if s.takes_model_code:
            return Outcome("partial", "An installed Executor constructor takes model code objects: a C++ entry into "
                           "the PyTorch-native path may exist; its documentation and stability are unverified.",
                           metrics, rows, notes, rests_on=(Support("executor_symbols", ">", 0),))
        if s.constructors:
            return Outcome("refuted", f"The installed release's C++ Executor is constructed only from "
                           f"{' / '.join(s.entry_kinds)} (engine artifacts), not from the PyTorch-native model "
                           "definitions: no C/C++ entry point into the PyTorch path is shipped.", metrics, rows, notes,
                           rests_on=(Support("executor_symbols", ">", 0),))
        return Outcome("refuted", "The installed release ships no C++ Executor entry point at all (headers and "
                       "exported symbols surveyed).", metrics, rows, notes, rests_on=(Support("executor_symbols", "==", 0),))


def _llamacpp_entry(root: Path) -> Outcome:
    wanted = sorted(_SIG)
    libs = sorted(p for p in root.rglob("*") if p.is_file() and (p.suffix == ".so" or ".so." in p.name))
    exported: set[str] = set()
    rows = []
    for lib in libs:
        names = set(elf_defined_dynamic_symbols(lib))
        exported |= names
        rows.append({"kind": "library", "where": str(lib.relative_to(root)),
                     "c_api_symbols": len(names & set(wanted))})
    headers = sorted(str(h.relative_to(root)) for h in root.rglob("*.h"))
    missing = [f for f in wanted if f not in exported]
    metrics = {"headers": len(headers), "symbols_present": len(wanted) - len(missing), "symbols_missing": len(missing)}
    notes = [f"libraries: {', '.join(r['where'] for r in rows) or 'none'}; headers shipped: {len(headers)}"]
    if missing:
        notes.append(f"missing C symbols: {', '.join(missing)}")
        return Outcome("partial", f"libllama exports {len(wanted) - len(missing)}/{len(wanted)} of the C functions "
                       "the llama.cpp cell uses.", metrics, rows, notes, rests_on=(Support("symbols_missing", ">", 0),))
    return Outcome("not-applicable", f"The unknown is about TensorRT-LLM's PyTorch path, which llama.cpp does not "
                   f"have; as a reference, llama.cpp ships a C entry point: libllama exports all {len(wanted)} C "
                   "functions (llama.h) its cell uses, so a Go daemon can host it in-process without Python.",
                   metrics, rows, notes)


def _vllm_entry(root: Path) -> Outcome:
    """vLLM (a reference): are its shared libraries a C entry point, or Python extension modules?"""
    libs = sorted(p for p in root.rglob("*") if p.is_file() and (p.suffix == ".so" or ".so." in p.name))
    rows = []
    for lib in libs:
        names = elf_defined_dynamic_symbols(lib)
        rows.append({"kind": "library", "where": str(lib.relative_to(root)), "exported_symbols": len(names),
                     "python_extension": any(n.startswith("PyInit_") for n in names)})
    standalone = [r for r in rows if not r["python_extension"]]
    metrics = {"headers": len(list(root.rglob("*.h"))), "symbols_present": sum(r["exported_symbols"] for r in rows)}
    notes = [f"{len(rows)} shared libraries; Python extension modules (export PyInit_*): "
             f"{len(rows) - len(standalone)}; others: {', '.join(r['where'] for r in standalone) or 'none'}"]
    if standalone:
        return Outcome("partial", f"vLLM ships {len(standalone)} shared libraries that are not Python extension "
                       "modules; whether any is a documented C entry point is not established by their symbols.",
                       metrics, rows, notes, rests_on=(Support("symbols_present", ">", 0),))
    return Outcome("refuted", f"vLLM ships no C/C++ entry point: all {len(rows)} of its shared libraries are Python "
                   "extension modules (custom torch ops), so a host must embed Python to run it.", metrics, rows, notes,
                   rests_on=(Support("symbols_present", ">", 0),))


class ContractMapping(Probe):
    version = "4"
    claims = ("entry.contract_table", "risk.version_churn", *(c for c in LLAMACPP_ROWS))
    Params = NoParams
    needs_engine = False

    def run(self, ctx: ProbeContext, p: NoParams) -> Outcome:
        package_dir(ctx.engine)  # not installed → not-run, before any import
        if ctx.engine == "llamacpp":
            return mapping_verdict(_llamacpp_rows(), ctx.engine, own_table=f"C functions of llama.h its cell calls "
                                   f"(table written for llama-cpp-python {LLAMACPP_EXPECTED_AGAINST})")
        if ctx.engine == "vllm":
            from ..cells import vllm

            return mapping_verdict(vllm.surface_rows(), ctx.engine, own_table=f"Python entry points its cell calls "
                                   f"(table written for vLLM {vllm.SUPPORTED})")
        return mapping_verdict(_trtllm_rows(), ctx.engine)


def mapping_verdict(rows: list[dict], engine: str, own_table: str | None = None) -> Outcome:
    """The contract rows name TensorRT-LLM mechanisms: only a TensorRT-LLM survey (``own_table`` None)
    speaks to them. Another engine's survey checks its own cell's table (``own_table`` says which) and is not-applicable to the
    rows; a row with no mechanism to look for stays inconclusive; version churn needs two versions."""
    table = [r for r in rows if "claim" in r]
    guard = [r for r in rows if "guard" in r]  # TensorRT-LLM: every version-guard row, reported as is
    verified = [r for r in table if r["ok"]]
    broken = [r for r in table if not r["ok"]]
    metrics = {"rows_verified": len(verified), "rows_total": len(table)}
    notes = [f"{r['claim']}: missing or changed {', '.join(r['missing'])}" for r in broken]
    if guard:
        notes.append(f"version guard: {sum(r['ok'] for r in guard)}/{len(guard)} rows ok")
        notes += [f"guard {r['guard']} [{r['feature']}]: {r['status']}, {r['detail']}" for r in guard if not r["ok"]]
    if own_table:
        notes.append("version churn is about TensorRT-LLM releases; this survey reads none")
        per_claim = ({r["claim"]: "not-applicable" for r in table}
                     | {"risk.version_churn": "not-applicable", "entry.contract_table": "not-applicable"})
        said = (f"all {len(table)} of its own rows are present with the expected parameter names"
                if not broken else f"{len(broken)} of its own {len(table)} rows have missing or renamed entry points")
        return Outcome("not-applicable" if not broken else "partial",
                       f"The contract rows name TensorRT-LLM mechanisms, which {engine} does not have; as a reference, "
                       f"{said} (checked against the {own_table}).",
                       metrics, rows, notes, per_claim, rests_on=(Support("rows_verified", "<", len(table)),))
    one = churn_verdict({str(rows[0].get("version")) if rows else "?": signature_table(rows)})  # one version
    notes.append(f"version churn: {one.summary}")
    # Existence alone never settles a row: at most partial (behavioural probes say whether it works).
    per_claim = {r["claim"]: ("inconclusive" if not r["mechanism_count"] else "partial" if r["ok"] else "refuted")
                 for r in table} | {"risk.version_churn": one.verdict}
    if not broken:
        return Outcome("partial", f"All {len(table)} contract rows map onto mechanisms present in the installed "
                       f"{engine} release with the expected parameter names; existence only, so at most partial "
                       "(behavioural probes say whether they work).", metrics, rows, notes,
                       per_claim | {"entry.contract_table": "partial"},
                       rests_on=(Support("rows_verified", "==", len(table)),))
    return Outcome("partial" if verified else "refuted", f"{len(verified)}/{len(table)} contract rows map onto the "
                   f"installed {engine} release; {len(broken)} rows name mechanisms that are missing or changed.",
                   metrics, rows, notes, per_claim,
                   rests_on=(Support("rows_verified", "<", len(table)) if verified else Support("rows_verified", "==", 0),))


def _llamacpp_rows() -> list[dict]:
    import inspect

    ll = importlib.import_module("llama_cpp")
    rows = []
    for claim, fns in LLAMACPP_ROWS.items():
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


def _trtllm_rows() -> list[dict]:
    """One row per contract claim, then one per version-guard row (every row, none folded into another)."""
    from ..cells import trtllm_guard
    from ..contract import EngineUnavailable

    try:
        install = trtllm_guard.load()
    except EngineUnavailable as e:  # any import failure is the reason the survey cannot run
        raise NotRunnable(e.reason) from e
    rows = []
    for claim, refs in TRTLLM_ROWS.items():
        missing = []
        for ref in refs:
            symbol, _, feature = ref.partition(":")
            matched = [r for r in install.rows if r.name == symbol and feature in ("", r.feature)]
            missing += [f"{ref} ({r.detail})" for r in matched if not r.ok] if matched else [f"{ref} (not in the guard)"]
        rows.append({"claim": claim, "mechanism": ", ".join(refs) or "ErrUnsupportedFeature",
                     "mechanism_count": len(refs), "ok": not missing,
                     "missing": missing, "version": install.version})
    rows += [{"guard": r.name, "feature": r.feature, "ok": r.ok, "status": r.status, "missing": list(r.missing),
              "detail": r.detail, "version": install.version, "signature": _signature(install.module, spec)}
             for spec, r in zip(trtllm_guard.GUARD, install.rows, strict=True)]
    return rows


def _signature(module, spec) -> dict:
    """What the guard read on one entry point, as a comparable record: where the symbol was found, which of
    the names the cell uses it has, and the declared defaults of the fields the cell pins."""
    from ..cells import trtllm_guard

    at, obj = spec.symbol, trtllm_guard.resolve(module, spec.symbol)
    if obj is None and spec.moved_to:
        at, obj = spec.moved_to, trtllm_guard.resolve(module, spec.moved_to)
    if obj is None:
        return {"at": None, "names": {}, "defaults": {}}
    have = trtllm_guard.members(obj)
    defaults = {f: trtllm_guard.field_default(obj, f) if f in have else _ABSENT for f, _ in spec.defaults}
    return {"at": at, "names": {n: n in have for n in (*spec.requires, *spec.optional)},
            "defaults": {f: _ABSENT if d is _ABSENT or type(d) is object else repr(d)  # object(): not declared
                         for f, d in defaults.items()}}


_ABSENT = "(not declared)"  # a pinned field without a declared default: recorded, so its disappearance is churn


# --------------------------------------------------------------------------- version churn, across surveys

CHURN_COMMAND = ("workbench probe surface.contract_mapping --engine trtllm --out DIR, once with each TensorRT-LLM "
                 "release installed (at least two), into the same findings folder")


def signature_table(rows: list[dict]) -> dict[str, dict] | None:
    """The per-entry-point signatures a TensorRT-LLM survey recorded (its guard rows), keyed by symbol and
    feature; None when it recorded none (another engine, or a survey from before they were recorded)."""
    guard = [r for r in rows if "guard" in r]
    if not guard or any("signature" not in r for r in guard):
        return None
    return {f"{r['guard']} [{r['feature']}]": r["signature"] for r in guard}


def signature_changes(old: dict[str, dict], new: dict[str, dict]) -> tuple[list[str], list[str]]:
    """What changed from ``old`` to ``new`` in what both surveys checked, and what only one of them checked
    (a change of the workbench's own table, not of the engine, so never counted as churn)."""
    changes, apart = [], []
    for key in sorted(old.keys() | new.keys()):
        a, b = old.get(key), new.get(key)
        if a is None or b is None:
            apart.append(f"{key} (checked in one survey only)")
            continue
        if a["at"] != b["at"]:
            changes.append(f"{key}: found at {b['at'] or 'nowhere'}, was {a['at'] or 'nowhere'}")
        if a["at"] is None or b["at"] is None:
            continue
        for n in sorted(a["names"].keys() | b["names"].keys()):
            if n not in a["names"] or n not in b["names"]:
                apart.append(f"{key}: {n} (checked in one survey only)")
            elif a["names"][n] != b["names"][n]:
                changes.append(f"{key}: {n} {'added' if b['names'][n] else 'gone'}")
        for f in sorted(a["defaults"].keys() | b["defaults"].keys()):
            if f not in a["defaults"] or f not in b["defaults"]:
                apart.append(f"{key}: default of {f} (checked in one survey only)")
            elif a["defaults"][f] != b["defaults"][f]:
                changes.append(f"{key}: {f} defaults to {b['defaults'][f]}, was {a['defaults'][f]}")
    return changes, apart


def churn_verdict(tables: dict[str, dict[str, dict] | None]) -> Outcome:
    """``risk.version_churn`` from the subject engine's surveys, one signature table per engine version (None
    where the survey recorded none). Any change between consecutive versions of a signature the cell uses:
    confirmed, with the changes; every one identical: refuted (for these versions); fewer than two versions
    with tables: inconclusive, and the command that adds one."""
    usable = {v: t for v, t in tables.items() if t is not None}
    versions = sorted(usable, key=natural)
    lacking = sorted((v for v, t in tables.items() if t is None), key=natural)
    notes = [f"surveys of {', '.join(lacking)} recorded no signature table (re-run the survey there)"] if lacking else []
    if len(versions) < 2:
        had = f"only {versions[0]}" if versions else "none"
        return Outcome("inconclusive", f"Version churn needs findings from ≥2 TensorRT-LLM versions with signature "
                       f"tables ({had} here): run {CHURN_COMMAND}.", {}, [], notes)
    rows, apart = [], []
    for old, new in zip(versions, versions[1:]):
        changes, skipped = signature_changes(usable[old], usable[new])
        rows += [{"from": old, "to": new, "change": c} for c in changes]
        apart += [f"{old} → {new}: {s}" for s in skipped]
    if apart:
        notes.append("not compared: " + "; ".join(apart))
    span = " → ".join(versions)
    if rows:
        return Outcome("confirmed", f"The TensorRT-LLM API the cell uses changed across {span}: "
                       + "; ".join(f"{r['from']} → {r['to']}: {r['change']}" for r in rows) + ".", {}, rows, notes)
    # an entry point counts as compared only where every survey found it: "nowhere" twice is no reading
    compared = len([k for k in set.intersection(*(set(usable[v]) for v in versions))
                    if all(usable[v][k]["at"] is not None for v in versions)])
    if not compared:
        return Outcome("inconclusive", f"The surveys of {span} share no entry point to compare; re-run them with "
                       "one workbench version.", {}, rows, notes)
    return Outcome("refuted", f"The {compared} entry points the cell uses read identically in TensorRT-LLM {span} "
                   "(location, names used, pinned defaults): no churn between these releases; a later one can "
                   "still bring some.", {}, rows, notes)
