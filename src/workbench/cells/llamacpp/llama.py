"""The llama.cpp cell, on llama-cpp-python's low-level context API.

One ``llama_context`` with a unified KV cache shared by ``slots`` sequences (the high-level
``Llama`` class has only one). The cell keeps, per sequence, the exact token ids whose KV is
resident, so reuse counts are exact: EnsurePrefix reuses the longest common token prefix,
evaluates only the rest and removes a divergent tail with ``llama_memory_seq_rm``.

Capacity is explicit: llama.cpp never evicts, so a request that would not fit in the KV cache is
refused with :class:`ContextOverflow` from token counts before anything is dispatched.
"""

from __future__ import annotations

import ctypes
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from ... import cpu, environment, models
from ...engine import (Capabilities, ContextExplanation, ContextOverflow, DecodeResult, Description, KvGeometry,
                         KvMemory, ManifestMismatch, PrefixStatus, Prompt, Retention, Snapshot,
                         TokenCallback, UnsupportedFeature, WorkbenchError, common_prefix, split_prompt)
from ...transport.manifest import AdapterSpec, Variant
from .. import Availability, known_options
from ..options import CellOptions
from . import llama_chat_format, surface
from ._internals import (captured, check_llama_counts, decide_extra_buffers, fill_batch, kv_buffer_bytes, lib, load_reason, model_params,
                         offloaded_layers)
from .state import CELL_META_BYTES, parse_state

ENGINE = "llamacpp"
# What llama.cpp lacks, read from its C API (ggml-org/llama.cpp include/llama.h).
ABSENT = {
    "eviction": "llama.cpp never evicts a sequence's KV: llama_decode returns 1 (no KV slot for the batch) and "
                "the caller must remove KV itself with llama_memory_seq_rm (include/llama.h)",
    "retention_priority": "llama.h has no retention priority: nothing is evicted, so there is nothing to order",
    "engine_salt": "llama_batch carries token, pos, seq_id and logits only: the engine has no cache salt, "
                   "reuse keys are the cell's own (include/llama.h, struct llama_batch)",
    "reuse_counter": "llama.h has no per-request reuse counter: llama_perf_context's n_p_eval counts the tokens "
                     "llama_decode evaluated, which are the tokens the cell chose to send, so the reuse the cell "
                     "reports is its own common-prefix arithmetic (include/llama.h)",
    "partial_warmup": "llama_decode evaluates every token of the batch before it returns; there is no "
                      "max_tokens=1 request whose prefix blocks could be stored later (include/llama.h)",
    "kv_events": "llama.h publishes no KV-cache events and has no block hashes: reuse is the caller's own "
                 "common-prefix bookkeeping over llama_memory_seq_* (include/llama.h)",
}
_TYPE_BYTES = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32}
_GGML_TYPE = {"f32": 0, "f16": 1, "q4_0": 2, "q8_0": 8, "bf16": 30}


@dataclass(frozen=True)
class LlamaCppOptions(CellOptions):
    """``open_cell("llamacpp", model, **options)`` keywords: the shared ones and llama.cpp's own."""

    kv_budget_bytes: int | None = None  # the KV pool in bytes, read in this model's bytes per token
    n_batch: int = 512
    kv_type: str = "f16"
    gpu_layers: int = 0
    # load weights into llama.cpp's extra buffer types (repacked/AMX); None decides by this machine's CPU and
    # build (workbench.cpu.extra_buffers)
    extra_buffers: bool | None = None

    def __post_init__(self) -> None:
        if self.kv_type not in _GGML_TYPE:
            raise ValueError(f"kv_type must be one of {', '.join(_GGML_TYPE)}, got {self.kv_type!r}")
        check_llama_counts(self.slots, self.threads)
        if self.connector:
            raise ValueError("llama.cpp has no KV connector; its sequence state is the state_export observer")


@dataclass
class _Seq:
    tokens: list[int] = field(default_factory=list)  # KV-resident tokens at positions pos0..pos0+n-1
    pos0: int = 0  # first position (non-zero only after a shifted import)
    key: str | None = None  # manifest ⊕ salt the KV was built under
    pending: list[int] = field(default_factory=list)  # deferred suffix, rides the next decode
    retention: Retention | None = None


def _gap_sd(row: Any, tokens: Any) -> float:
    """How far the best of ``tokens`` (an id, or an array of ids) lies below ``row``'s top logit, in standard
    deviations of the row's logits (0: one of them is the argmax)."""
    return (float(row.max()) - float(row[tokens].max())) / (float(row.std()) or 1.0)


class LlamaCppCell:
    """A real llama.cpp cell. Open with :func:`workbench.cells.open_cell` ("llamacpp", spec, …)."""

    engine = ENGINE
    preload = ("llama_cpp",)
    label = "llama.cpp"
    package = "llama_cpp"
    c_functions = tuple(sorted(surface.C_SIGNATURES))  # its C entry point: what a host without Python would call
    surface_table = f"C functions of llama.h its cell calls (table written for llama-cpp-python {surface.EXPECTED_AGAINST})"

    @classmethod
    def surface_rows(cls) -> list[dict]:
        """The contract rows on the installed release, for ``surface.contract_mapping``."""
        return surface.surface_rows()

    # ------------------------------------------------------------------ lifecycle

    @classmethod
    def availability(cls) -> Availability:
        try:
            ll = lib()
        except ImportError as e:
            return Availability(ENGINE, False, None, f"llama_cpp is not importable ({e}); install the 'llamacpp' extra")
        eb = decide_extra_buffers()
        return Availability(ENGINE, True, ll.__version__, None,
                            {"gpu_offload": bool(ll.llama_supports_gpu_offload()),
                             "system_info": ll.llama_print_system_info().decode(errors="replace").strip(),
                             "extra_buffers": eb.use, "extra_buffers_reason": eb.reason})

    @classmethod
    def open(cls, model: str, **options: Any) -> "LlamaCppCell":
        """``options``: :class:`LlamaCppOptions` keywords; an unknown one is refused with the valid names."""
        return cls(models.resolve(model), LlamaCppOptions(**known_options(LlamaCppOptions, ENGINE, options)))

    def __init__(self, model: models.ResolvedModel, o: LlamaCppOptions | None = None) -> None:
        o = o or LlamaCppOptions()
        if not model.is_gguf:
            raise WorkbenchError(f"llama.cpp needs a GGUF model; {model.spec!r} is a {model.kind} model")
        ll = self._ll = lib()
        ll.llama_backend_init()
        self.model = model
        self._closed = True
        self.extra_buffers = decide_extra_buffers(o.extra_buffers)
        mparams = model_params(ll, gpu_layers=o.gpu_layers, extra=self.extra_buffers)
        with captured() as lines:
            self._model = ll.llama_model_load_from_file(str(model.path).encode(), mparams)
        if not self._model:
            raise WorkbenchError(f"llama.cpp could not load {model.path}: " + load_reason(lines))
        self._offloaded = offloaded_layers(lines)
        self._vocab = ll.llama_model_get_vocab(self._model)
        self._adapters = []
        threads = o.threads or cpu.usable_count()
        try:
            self.geometry = self._geometry(o.kv_type)
            cparams = self._context_params(o, self._kv_tokens(o, ll.llama_model_n_ctx_train(self._model)), threads)
            with captured() as lines:
                self._ctx = ll.llama_init_from_model(self._model, cparams)
            self._kv_buffer_bytes = kv_buffer_bytes(lines)
            if not self._ctx:
                raise WorkbenchError(f"llama.cpp could not create a context of {cparams.n_ctx} tokens for {model.name}")
            self._mem = ll.llama_get_memory(self._ctx)
            adapter_digests = tuple(self._load_adapter(p) for p in o.adapters)
        except BaseException:
            self._free()
            raise
        self._closed = False
        self._threads = threads
        self._n_batch = cparams.n_batch
        self._n_ctx = ll.llama_n_ctx(self._ctx)
        self._n_ctx_seq = ll.llama_n_ctx_seq(self._ctx)
        self._slots = o.slots
        self._batch = ll.llama_batch_init(self._n_batch, 0, 1)
        self._seqs = [_Seq() for _ in range(o.slots)]
        self._logits_at: tuple[int, int] | None = None  # (slot, n tokens) the current logits belong to
        self._state_samples: dict[int, int] = {}  # cells -> sequence state bytes, from full reads
        self._state_size: tuple[int, int] | None = None  # (header bytes, bytes per cell), once calibrated
        self._embed_ctx = None
        self._eog: Any = None  # the vocabulary's end-of-generation ids, read once (greedy_gaps)
        self.manifest = Variant(model.sha256, tuple(AdapterSpec(path=os.fspath(p), digest=d, scale=1.0)
                                                    for p, d in zip(o.adapters, adapter_digests)))
        self._template = self._meta("tokenizer.chat_template")

    def _kv_tokens(self, o: LlamaCppOptions, train_ctx: int) -> int:
        """The KV cache's size in tokens: the budget (bytes read in this model's bytes per token), else the context,
        else the model's training context."""
        budget = o.kv_budget_tokens
        if o.kv_budget_bytes is not None:
            budget = o.kv_budget_bytes // self.geometry.bytes_per_token
            if budget < 1:
                raise ValueError(f"kv_budget_bytes={o.kv_budget_bytes} is below one token of KV "
                                 f"({self.geometry.bytes_per_token} bytes for this model)")
        if budget is not None and budget < 1:
            raise ValueError(f"kv_budget_tokens must be at least 1, got {budget}")
        n_ctx = budget or o.context_tokens or train_ctx
        if n_ctx <= 0:
            given = ("kv_budget_bytes/kv_budget_tokens" if budget else "context_tokens" if o.context_tokens
                     else "context_tokens (the model declares no training context)")
            raise ValueError(f"the KV cache would hold {n_ctx} tokens; raise {given}")
        need, memory = n_ctx * self.geometry.bytes_per_token, environment.cpu()["memory_bytes"]
        if memory and need > memory:  # said before llama.cpp allocates it (or, past 2**32 tokens, a wrapped size)
            raise WorkbenchError(f"a KV cache of {n_ctx} tokens needs {need / 2**30:.1f} GiB, more than this machine's "
                             f"{memory / 2**30:.1f} GiB; lower {'kv_budget_tokens' if budget else 'context_tokens'}")
        return n_ctx

    def _context_params(self, o: LlamaCppOptions, n_ctx: int, threads: int) -> Any:
        cparams = self._ll.llama_context_default_params()
        cparams.n_ctx = n_ctx
        cparams.n_batch = min(o.n_batch, n_ctx)
        cparams.n_ubatch = min(o.n_batch, n_ctx)
        cparams.n_seq_max = o.slots
        cparams.n_threads = threads
        cparams.n_threads_batch = threads
        cparams.kv_unified = True
        cparams.type_k = cparams.type_v = _GGML_TYPE[o.kv_type]
        cparams.no_perf = False
        return cparams

    def _load_adapter(self, path: str) -> str:
        ll = self._ll
        adapter = ll.llama_adapter_lora_init(self._model, os.fspath(path).encode())
        if not adapter:
            raise WorkbenchError(f"llama.cpp could not load LoRA adapter {path}")
        self._adapters.append(adapter)
        scales = (ctypes.c_float * len(self._adapters))(*([1.0] * len(self._adapters)))
        arr = (ll.llama_adapter_lora_p_ctypes * len(self._adapters))(*self._adapters)
        ll.llama_set_adapters_lora(self._ctx, arr, len(self._adapters), scales)
        return models.file_sha256(Path(path))

    def __enter__(self) -> "LlamaCppCell":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._ll.llama_batch_free(self._batch)
        self._free()

    def _free(self) -> None:
        ll = self._ll
        for attr, free in (("_embed_ctx", ll.llama_free), ("_ctx", ll.llama_free)):
            if getattr(self, attr, None):
                free(getattr(self, attr))
                setattr(self, attr, None)
        for a in getattr(self, "_adapters", []):
            ll.llama_adapter_lora_free(a)
        self._adapters = []
        if getattr(self, "_model", None):
            ll.llama_model_free(self._model)
            self._model = None

    def _check_open(self) -> None:
        if self._closed:
            raise WorkbenchError("this cell is closed")

    # ------------------------------------------------------------------ model facts

    def _meta(self, key: str) -> str | None:
        buf = ctypes.create_string_buffer(1 << 16)
        n = self._ll.llama_model_meta_val_str(self._model, key.encode(), buf, len(buf))
        return buf.value.decode(errors="replace") if n >= 0 else None

    def _geometry(self, kv_type: str) -> KvGeometry:
        ll = self._ll
        heads = ll.llama_model_n_head(self._model)
        arch = self._meta("general.architecture") or "llama"
        key_len = self._meta(f"{arch}.attention.key_length")
        head_dim = int(key_len) if key_len else ll.llama_model_n_embd(self._model) // heads
        return KvGeometry(layers=ll.llama_model_n_layer(self._model), kv_heads=ll.llama_model_n_head_kv(self._model),
                          head_dim=head_dim, dtype_bytes=_TYPE_BYTES[kv_type])

    # ------------------------------------------------------------------ tokens

    def tokenize(self, text: str, *, special: bool = True, add_bos: bool | None = None) -> list[int]:
        ll = self._ll
        raw = text.encode()
        add = ll.llama_vocab_get_add_bos(self._vocab) if add_bos is None else add_bos
        cap = len(raw) + 8
        buf = (ll.llama_token * cap)()
        n = ll.llama_tokenize(self._vocab, raw, len(raw), buf, cap, add, special)
        if n < 0:
            cap = -n
            buf = (ll.llama_token * cap)()
            n = ll.llama_tokenize(self._vocab, raw, len(raw), buf, cap, add, special)
        return list(buf[:n])

    def detokenize(self, tokens: Sequence[int]) -> str:
        return b"".join(self._piece(t) for t in tokens).decode(errors="replace")

    def _piece(self, token: int) -> bytes:
        buf = ctypes.create_string_buffer(64)
        n = self._ll.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, False)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = self._ll.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, False)
        return buf.raw[:n]

    def render(self, messages: Sequence[Mapping[str, Any]], *, add_generation_prompt: bool = True,
               **template: Any) -> str:
        """Render chat messages through the model's own template (:mod:`.llama_chat_format`); ``template``: more of
        its variables (``enable_thinking``, ``reasoning_effort``: llama.cpp's ``chat_template_kwargs``)."""
        if not self._template:
            raise UnsupportedFeature("chat messages", ENGINE, f"{self.model.name} has no chat template")
        bos = self.detokenize([self._ll.llama_vocab_bos(self._vocab)])
        eos = self.detokenize([self._ll.llama_vocab_eos(self._vocab)])
        return llama_chat_format.render(self._template, messages, add_generation_prompt=add_generation_prompt,
                                        bos_token=bos, eos_token=eos, **template)

    def _tokens_of(self, prompt: Prompt, *, continuation: bool = False) -> list[int]:
        kind, value = split_prompt(prompt, self._ll.llama_vocab_n_tokens(self._vocab))
        if kind == "tokens":
            return value
        if kind == "text":
            return self.tokenize(value, add_bos=False if continuation else None)
        text = self.render(value, add_generation_prompt=not continuation)
        bos = self.detokenize([self._ll.llama_vocab_bos(self._vocab)])
        return self.tokenize(text, add_bos=False if continuation or (bos and text.startswith(bos)) else None)

    # ------------------------------------------------------------------ evaluation

    def _slot(self, slot: int) -> _Seq:
        self._check_open()
        if not 0 <= slot < self._slots:
            raise ValueError(f"slot {slot} does not exist; this cell has slots 0..{self._slots - 1}")
        return self._seqs[slot]

    def used_tokens(self) -> int:
        """KV cells held by all sequences (the unified cache is shared)."""
        return sum(len(s.tokens) for s in self._seqs)

    def _check_fit(self, slot: int, new_len: int) -> None:
        """Refuse before dispatch: per-sequence context and the shared KV pool."""
        if new_len > self._n_ctx_seq:
            raise ContextOverflow(new_len, self._n_ctx_seq, "context")
        others = self.used_tokens() - len(self._seqs[slot].tokens)
        if others + new_len > self._n_ctx:
            raise ContextOverflow(others + new_len, self._n_ctx, "KV cache")

    def _eval(self, slot: int, tokens: Sequence[int], *, all_logits: bool = False) -> None:
        """Append ``tokens`` to sequence ``slot`` at the next positions; logits for the last one (or all)."""
        ll, seq, b = self._ll, self._seqs[slot], self._batch
        pos0 = seq.pos0 + len(seq.tokens)
        for start in range(0, len(tokens), self._n_batch):
            chunk = tokens[start:start + self._n_batch]
            fill_batch(b, chunk, pos0=pos0 + start, seq_id=slot, logits_all=all_logits,
                       logits_last=start + len(chunk) == len(tokens))
            rc = ll.llama_decode(self._ctx, b)
            if rc != 0:
                # Roll back what this call added so the bookkeeping stays exact.
                ll.llama_memory_seq_rm(self._mem, slot, pos0, -1)
                self._logits_at = None
                if rc == 1:
                    raise ContextOverflow(self.used_tokens() + len(tokens), self._n_ctx, "KV cache (engine)")
                raise WorkbenchError(f"llama_decode failed with code {rc}")
        ll.llama_synchronize(self._ctx)  # finish the work (and update perf counters) before timing stops
        seq.tokens.extend(tokens)
        self._logits_at = (slot, len(seq.tokens))

    def eval_greedy(self, tokens: Sequence[int], *, slot: int = 0) -> list[int]:
        """Append ``tokens`` in one batch and return the greedy (argmax) next token after each of them.

        What speculative decoding verifies a draft with: position i's prediction is what greedy
        decoding would sample after ``tokens[:i + 1]`` (first maximum, like llama.cpp's greedy sampler).
        """
        self._eval_batch(tokens, slot)
        return [int(self._logits_row(i).argmax()) for i in range(len(tokens))]

    def batch_gaps(self, tokens: Sequence[int], targets: Sequence[int], *, slot: int = 0) -> list[float]:
        """Append ``tokens`` in one batch, as :meth:`eval_greedy` does, and read how far ``targets[i]`` lies below
        the top logit after ``tokens[:i + 1]`` (σ of that row's logits, as :meth:`greedy_gaps` reads them): the
        loop's scorer reads a speculation arm's tokens in its own verification batches with it, to measure how far
        batch numerics part from sequential decode's (:mod:`workbench.loop.verify`)."""
        if len(targets) > len(tokens):
            raise ValueError(f"{len(targets)} targets for a batch of {len(tokens)} tokens")
        self._eval_batch(tokens, slot)
        return [_gap_sd(self._logits_row(i), t) for i, t in enumerate(targets)]

    def _eval_batch(self, tokens: Sequence[int], slot: int) -> None:
        seq = self._slot(slot)
        if not 0 < len(tokens) <= self._n_batch:
            raise ValueError(f"a verification batch takes 1..{self._n_batch} tokens, got {len(tokens)}")
        if seq.pending:
            raise WorkbenchError(f"slot {slot} has deferred tokens; decode or prefill them first")
        self._check_fit(slot, len(seq.tokens) + len(tokens))
        self._eval(slot, list(tokens), all_logits=True)

    def _logits_row(self, i: int) -> Any:
        """Row ``i`` of the last batch's logits, as a numpy view (no copy) over the engine's buffer."""
        import numpy as np

        n_vocab = self._ll.llama_vocab_n_tokens(self._vocab)
        return np.ctypeslib.as_array(self._ll.llama_get_logits_ith(self._ctx, i), shape=(n_vocab,))

    def greedy_gaps(self, tokens: Sequence[int], *, slot: int = 0) -> tuple[list[float], float]:
        """Read ``tokens`` as greedy decoding would have emitted them after the slot's prompt: before each, how far
        its logit lies below the top logit, in standard deviations of that position's logits (0: it is the argmax);
        after the last, the same for the best end-of-generation token. What the loop's scorer tells a greedy decode
        of this model by (:mod:`workbench.loop.verify`): a near-tie that another engine's arithmetic broke the
        other way is a small gap, a token greedy decoding would not pick is a large one.

        The logits are read as :meth:`decode` reads them (the prompt's, recomputed when stale), then each token is
        evaluated alone, as decode evaluates it: teacher forcing in one batch takes other kernels (on the CPU, a
        batch of 64 or more queries takes F32 attention tiles where one token takes F16 accumulation): on taubench
        with synthetic:tiny it read plain arms' own tokens up to 0.035 σ below its top, where this reads 0.000."""
        import numpy as np

        seq = self._slot(slot)
        if not seq.tokens and not seq.pending:
            raise WorkbenchError(f"slot {slot} is empty; call ensure_prefix first")
        self._check_fit(slot, len(seq.tokens) + len(seq.pending) + len(tokens))
        if self._eog is None:
            self._eog = np.array([t for t in range(self._ll.llama_vocab_n_tokens(self._vocab)) if self.is_eog(t)],
                                 dtype=int)
        self._fresh_logits(slot, seq)
        gaps: list[float] = []
        for tok in tokens:
            gaps.append(_gap_sd(self._logits_row(-1), tok))
            self._eval(slot, [tok])
        row = self._logits_row(-1)
        stop = _gap_sd(row, self._eog) if len(self._eog) else float("inf")
        return gaps, stop

    def is_eog(self, token: int) -> bool:
        """Whether ``token`` ends generation (the check decode stops on)."""
        return bool(self._ll.llama_vocab_is_eog(self._vocab, token))

    def prompt_tokens(self, prompt: Prompt) -> list[int]:
        """The token ids EnsurePrefix evaluates for ``prompt`` (messages rendered by the model's template)."""
        return self._tokens_of(prompt)

    def _perf(self) -> tuple[int, int]:
        """llama.cpp's own counts of prompt tokens evaluated and tokens generated. ``llama_perf_context`` reports
        each as at least 1 (``std::max(1, n_p_eval)`` in ``llama_context::perf_get_data``); a count whose time is
        still 0 is the clamp, not a token, so it reads 0 (a first call's delta would otherwise be one short)."""
        p = self._ll.llama_perf_context(self._ctx)
        return (p.n_p_eval if p.t_p_eval_ms > 0 else 0), (p.n_eval if p.t_eval_ms > 0 else 0)

    def _counters(self, before: tuple[int, int]) -> dict:
        p, e = self._perf()
        return {"n_p_eval": p - before[0], "n_eval": e - before[1]}

    def _truncate(self, slot: int, keep: int) -> int:
        seq = self._seqs[slot]
        dropped = len(seq.tokens) - keep
        if dropped > 0:
            self._ll.llama_memory_seq_rm(self._mem, slot, seq.pos0 + keep, -1)
            del seq.tokens[keep:]
        if keep == 0:
            seq.pos0 = 0
            if self._logits_at and self._logits_at[0] == slot:
                self._logits_at = None
        return max(dropped, 0)

    # ------------------------------------------------------------------ the contract

    def ensure_prefix(self, prompt: Prompt, *, slot: int = 0, salt: str | None = None,
                      retention: Retention | None = None) -> PrefixStatus:
        seq = self._slot(slot)
        tokens = self._tokens_of(prompt)
        if not tokens:
            raise ValueError("an empty prefix cannot be ensured")
        t0 = time.perf_counter()
        self._check_fit(slot, len(tokens))  # before anything is dropped: a refused request leaves the slot intact
        key = self.manifest.cache_key(salt)
        held = self.resident_tokens(slot=slot)
        lost = len(seq.tokens) - held
        if lost:  # KV removed inside the engine behind the cell's back: believe the engine
            self._ll.llama_memory_seq_rm(self._mem, slot, seq.pos0 + held, -1)  # cells past a hole too
            del seq.tokens[held:]
            if self._logits_at and self._logits_at[0] == slot:
                self._logits_at = None
        dropped = 0
        if seq.key != key:
            dropped = self._truncate(slot, 0)
            seq.key = key
        lcp = common_prefix(seq.tokens, tokens)
        before = self._perf()
        dropped += self._truncate(slot, lcp)
        dropped += len(seq.pending)
        seq.pending = []
        if lcp < len(tokens):
            self._eval(slot, tokens[lcp:])
        seq.retention = retention
        after = self.resident_tokens(slot=slot)
        return PrefixStatus(slot=slot, prompt_tokens=len(tokens), reused_tokens=lcp, computed_tokens=len(tokens) - lcp,
                            dropped_tokens=dropped, elapsed_s=time.perf_counter() - t0,
                            engine_counters=self._counters(before) | {
                                "engine_resident_before": held, "engine_resident_after": after,
                                "engine_lost_before": lost})

    def prefill_suffix(self, suffix: Prompt, *, slot: int = 0, defer: bool = False) -> PrefixStatus:
        seq = self._slot(slot)
        if seq.key is None:
            raise WorkbenchError(f"slot {slot} has no prefix; call ensure_prefix first")
        tokens = self._tokens_of(suffix, continuation=True)
        total = len(seq.tokens) + len(seq.pending) + len(tokens)
        self._check_fit(slot, total)
        t0 = time.perf_counter()
        if defer:
            seq.pending.extend(tokens)
            return PrefixStatus(slot=slot, prompt_tokens=total, reused_tokens=len(seq.tokens), computed_tokens=0,
                                deferred_tokens=len(seq.pending), elapsed_s=time.perf_counter() - t0)
        before = self._perf()
        reused = len(seq.tokens)
        todo, seq.pending = seq.pending + tokens, []
        self._eval(slot, todo)
        return PrefixStatus(slot=slot, prompt_tokens=total, reused_tokens=reused, computed_tokens=len(todo),
                            elapsed_s=time.perf_counter() - t0, engine_counters=self._counters(before))

    def decode(self, *, slot: int = 0, max_tokens: int = 16, temperature: float = 0.0, top_p: float = 1.0,
               top_k: int = 0, seed: int = 0, stop: Sequence[str] = (), json_schema: Mapping[str, Any] | None = None,
               on_token: TokenCallback | None = None) -> DecodeResult:
        seq = self._slot(slot)
        if max_tokens < 1:
            raise ValueError("max_tokens must be at least 1")
        if not seq.tokens and not seq.pending:
            raise WorkbenchError(f"slot {slot} is empty; call ensure_prefix first")
        prompt_len = len(seq.tokens) + len(seq.pending)
        self._check_fit(slot, prompt_len + max_tokens - 1)
        ll = self._ll
        smpl = self._sampler(temperature, top_p, top_k, seed, json_schema)
        t0 = time.perf_counter()
        before = self._perf()
        try:
            deferred, recomputed = self._fresh_logits(slot, seq)
            out, times, text, finish = self._sample(smpl, slot, max_tokens, stop, on_token, t0)
        finally:
            ll.llama_sampler_free(smpl)
        decoded = text.decode(errors="replace")
        if finish == "stop" and stop:
            cut = min((decoded.find(s) for s in stop if s in decoded), default=-1)
            decoded = decoded[:cut] if cut >= 0 else decoded
        return DecodeResult(slot=slot, tokens=out, text=decoded, finish_reason=finish,
                            ttft_s=times[0] if times else time.perf_counter() - t0, token_times_s=times,
                            prompt_tokens=prompt_len, deferred_prefill_tokens=deferred,
                            engine_counters=self._counters(before) | {"recomputed_last_token": recomputed})

    def _fresh_logits(self, slot: int, seq: _Seq) -> tuple[int, int]:
        """Make the logits the slot's last prompt token's: evaluate a deferred prefill, or recompute the last token
        when the logits belong to something else. (deferred tokens evaluated, tokens recomputed)"""
        deferred = len(seq.pending)
        if seq.pending:
            todo, seq.pending = seq.pending, []
            self._eval(slot, todo)
            return deferred, 0
        if self._logits_at != (slot, len(seq.tokens)):
            last = seq.tokens[-1]  # logits are stale: recompute the last prompt token
            self._truncate(slot, len(seq.tokens) - 1)
            self._eval(slot, [last])
            return 0, 1
        return 0, 0

    def _sample(self, smpl: Any, slot: int, max_tokens: int, stop: Sequence[str], on_token: TokenCallback | None,
                t0: float) -> tuple[list[int], list[float], bytes, str]:
        """Sample until end of generation, a stop string or ``max_tokens``: (tokens, seconds since ``t0`` of each,
        the text's bytes, finish reason)."""
        ll = self._ll
        out: list[int] = []
        times: list[float] = []
        text = b""
        while True:
            tok = ll.llama_sampler_sample(smpl, self._ctx, -1)
            now = time.perf_counter() - t0
            if ll.llama_vocab_is_eog(self._vocab, tok):
                return out, times, text, "stop"
            out.append(tok)
            times.append(now)
            piece = self._piece(tok)
            text += piece
            if on_token is not None:
                on_token(tok, piece.decode(errors="replace"), now)
            if stop and any(s.encode() in text for s in stop):
                return out, times, text, "stop"
            if len(out) >= max_tokens:
                return out, times, text, "length"
            self._eval(slot, [tok])

    def _sampler(self, temperature: float, top_p: float, top_k: int, seed: int,
                 json_schema: Mapping[str, Any] | None):
        ll = self._ll
        chain = ll.llama_sampler_chain_init(ll.llama_sampler_chain_default_params())
        if json_schema is not None:
            from llama_cpp.llama_grammar import json_schema_to_gbnf

            gbnf = json_schema_to_gbnf(json.dumps(json_schema))
            g = ll.llama_sampler_init_grammar(self._vocab, gbnf.encode(), b"root")
            if not g:
                ll.llama_sampler_free(chain)
                raise ValueError("llama.cpp rejected the grammar built from json_schema")
            ll.llama_sampler_chain_add(chain, g)
        if temperature <= 0:
            ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_greedy())
            return chain
        if top_k > 0:
            ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_top_k(top_k))
        if top_p < 1.0:
            ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_top_p(top_p, 1))
        ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_temp(temperature))
        ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_dist(seed))
        return chain

    def explain_context(self, *, slot: int = 0) -> ContextExplanation:
        seq = self._slot(slot)
        return ContextExplanation(slot=slot, tokens=len(seq.tokens), cache_key=seq.key or "",
                                  capabilities=self.capabilities(), pending_tokens=len(seq.pending),
                                  notes=("llama.cpp never evicts: KV stays until removed or overwritten",))

    def capabilities(self) -> Capabilities:
        shift = bool(self._ll.llama_memory_can_shift(self._mem))
        return Capabilities(remove_tail=True, remove_middle=shift, position_shift=shift, recompute_range=True)

    # context editing (ExplainContext's capabilities, really implemented)

    def remove_tail(self, n: int, *, slot: int = 0) -> int:
        seq = self._slot(slot)
        return self._truncate(slot, max(len(seq.tokens) - n, 0))

    def remove_middle(self, start: int, end: int, *, slot: int = 0) -> int:
        """Drop positions [start, end) and shift the rest left, keeping their KV (no recompute)."""
        seq = self._slot(slot)
        if not 0 <= start < end <= len(seq.tokens):
            raise ValueError(f"range [{start}, {end}) is not inside the {len(seq.tokens)} resident tokens")
        if not self.capabilities().position_shift:
            raise UnsupportedFeature("remove_middle", ENGINE, "this model's memory cannot shift positions")
        ll = self._ll
        ll.llama_memory_seq_rm(self._mem, slot, seq.pos0 + start, seq.pos0 + end)
        ll.llama_memory_seq_add(self._mem, slot, seq.pos0 + end, -1, -(end - start))
        del seq.tokens[start:end]
        if self._logits_at and self._logits_at[0] == slot:
            self._logits_at = None
        return end - start

    def recompute_range(self, start: int, end: int, *, slot: int = 0) -> int:
        """Recompute KV for positions [start, end) and everything after it (causal attention)."""
        seq = self._slot(slot)
        if not 0 <= start < end <= len(seq.tokens):
            raise ValueError(f"range [{start}, {end}) is not inside the {len(seq.tokens)} resident tokens")
        tail = seq.tokens[start:]
        self._truncate(slot, start)
        self._eval(slot, tail)
        return len(tail)

    def resident_tokens(self, *, slot: int = 0) -> int:
        """How many of the slot's tokens the engine itself still holds KV for, read from llama.cpp.

        The run of consecutive positions from the slot's first one among the cells the engine holds for
        the sequence (:meth:`engine_positions`): a hole in the middle ends the run there, so KV removed
        inside the engine anywhere is seen. Capped at the slot's own token count only because the cell
        cannot name tokens beyond it. Fast path: when ``llama_state_seq_get_size`` equals the size of one
        cell at every position from ``llama_memory_seq_pos_min`` to ``_max`` (sizes calibrated from earlier
        full reads), there is no hole and the blob is not copied.
        """
        seq = self._slot(slot)
        lo, hi = self.position_range(slot=slot)
        if hi < 0:
            return 0
        if self._state_size is not None and lo == seq.pos0:
            header, per_cell = self._state_size
            if self._ll.llama_state_seq_get_size(self._ctx, slot) == header + (hi - lo + 1) * per_cell:
                return min(hi - lo + 1, len(seq.tokens))
        held = self.engine_positions(slot=slot)
        run = 0
        while seq.pos0 + run in held:
            run += 1
        return min(run, len(seq.tokens))

    def engine_positions(self, *, slot: int = 0) -> set[int]:
        """The positions of every KV cell the engine holds for the sequence, read from its own state blob
        (:func:`.state.parse_state`)."""
        blob = self.export_state(slot=slot)
        state = parse_state(blob)
        if state.positions and not state.shared:
            self._calibrate(state.cells, len(blob))
        return set(state.positions)

    def _calibrate(self, cells: int, size: int) -> None:
        """Learn a sequence state's size as header + cells × per-cell bytes from two reads of different
        lengths whose cells belong to this sequence alone (a cell shared with another adds its seq id)."""
        seen = self._state_samples
        seen[cells] = size
        if self._state_size is None and len(seen) >= 2:
            (c1, s1), (c2, s2) = list(seen.items())[:2]
            per_cell, rest = divmod(s2 - s1, c2 - c1)
            if not rest and per_cell > 0:
                self._state_size = (s1 - c1 * per_cell, per_cell)

    def kv_memory(self) -> KvMemory:
        """The engine's own KV bytes per token (``capacity`` observer): the K and V row sizes llama.cpp writes into
        a sequence's state (:func:`.state.parse_state`), read from the first slot that holds KV; on an empty cell
        one scratch token is decoded into slot 0 and removed again. The pool is what ``measure_capacity`` counts:
        llama.h exposes no KV buffer size (the log's "KV buffer size" is rounded to 0.01 MiB)."""
        self._check_open()
        slot = next((s for s in range(self._slots) if self.position_range(slot=s)[1] >= 0), None)
        scratch = slot is None
        if scratch:
            slot = 0
            if self._seqs[0].tokens:
                raise WorkbenchError("kv_memory needs slot 0 empty or some slot holding KV in the engine")
            self._eval(0, [self._ll.llama_vocab_bos(self._vocab)])
        try:
            per_cell = parse_state(self.export_state(slot=slot)).row_bytes
        finally:
            if scratch:
                self._truncate(0, 0)
        if per_cell is None:  # the engine holds KV for the slot (pos_max ≥ 0) but its state lists no cell
            raise WorkbenchError(f"llama.cpp's sequence state for slot {slot} holds no K/V rows; cannot read their sizes")
        return KvMemory(bytes_per_token=per_cell, pool_bytes=None,
                        how="the K and V row sizes (k_size_row, v_size_row or v_size_el × n_embd_v_gqa, every "
                            "layer) llama_state_seq_get_data writes for a sequence")

    def state_bytes_per_token(self, *, slot: int) -> int:
        """KV bytes per token by the size llama.cpp gives a sequence's state (``llama_state_seq_get_size``) as one
        more cell is written to an empty ``slot``: the growth less the cell's own metadata
        (:data:`.state.CELL_META_BYTES`). A second path to :meth:`kv_memory`'s row sizes, read from no row header;
        the slot is emptied again."""
        seq = self._slot(slot)
        if seq.tokens or self.position_range(slot=slot)[1] >= 0:
            raise WorkbenchError(f"slot {slot} holds KV; state_bytes_per_token needs an empty slot")
        bos = self._ll.llama_vocab_bos(self._vocab)
        try:
            self._eval(slot, [bos])
            one = self._ll.llama_state_seq_get_size(self._ctx, slot)
            self._eval(slot, [bos])
            two = self._ll.llama_state_seq_get_size(self._ctx, slot)
        finally:
            self._truncate(slot, 0)
        return int(two - one - CELL_META_BYTES)

    def last_logits(self, *, slot: int = 0) -> list[float]:
        """The engine's logits after the slot's last token (``llama_get_logits_ith``). When the current
        logits belong to another request, the last token is recomputed on top of the cached KV."""
        seq = self._slot(slot)
        if not seq.tokens:
            raise WorkbenchError(f"slot {slot} is empty; call ensure_prefix first")
        if self._logits_at != (slot, len(seq.tokens)):
            last = seq.tokens[-1]
            self._truncate(slot, len(seq.tokens) - 1)
            self._eval(slot, [last])
        ll = self._ll
        row = ll.llama_get_logits_ith(self._ctx, -1)
        return [float(row[i]) for i in range(ll.llama_vocab_n_tokens(self._vocab))]

    def position_range(self, *, slot: int = 0) -> tuple[int, int]:
        """The engine's own (min, max) position for the sequence; (-1, -1) when empty."""
        self._slot(slot)
        return (self._ll.llama_memory_seq_pos_min(self._mem, slot), self._ll.llama_memory_seq_pos_max(self._mem, slot))

    # snapshot / restore / state export

    def export_state(self, *, slot: int = 0) -> bytes:
        self._slot(slot)
        ll = self._ll
        size = ll.llama_state_seq_get_size(self._ctx, slot)
        buf = ctypes.create_string_buffer(size)
        n = ll.llama_state_seq_get_data(self._ctx, ctypes.cast(buf, ctypes.POINTER(ctypes.c_uint8)), size, slot)
        return buf.raw[:n]

    def import_state(self, blob: bytes, tokens: Sequence[int], *, slot: int = 0, position_shift: int = 0) -> None:
        """Load a sequence's KV bytes into ``slot``; with ``position_shift`` move it to later positions."""
        seq = self._slot(slot)
        self._check_fit(slot, len(tokens) + max(position_shift, 0))
        self._truncate(slot, 0)
        ll = self._ll
        buf = (ctypes.c_uint8 * len(blob)).from_buffer_copy(blob)
        if ll.llama_state_seq_set_data(self._ctx, buf, len(blob), slot) == 0:
            raise WorkbenchError("llama.cpp refused the sequence state (wrong model or context too small)")
        if position_shift:
            if not self.capabilities().position_shift:
                raise UnsupportedFeature("position_shift", ENGINE, "this model's memory cannot shift positions")
            ll.llama_memory_seq_add(self._mem, slot, 0, -1, position_shift)
        seq.tokens = list(tokens)
        seq.pos0 = position_shift
        self._logits_at = None

    def snapshot(self, *, slot: int = 0) -> Snapshot:
        seq = self._slot(slot)
        if seq.pending:
            raise WorkbenchError(f"slot {slot} has {len(seq.pending)} deferred tokens; decode or prefill them first")
        return Snapshot(manifest_digest=self.manifest.digest, cache_key=seq.key or "", tokens=tuple(seq.tokens),
                        kind="kv", payload=self.export_state(slot=slot), engine=ENGINE)

    def restore(self, snap: Snapshot, *, slot: int = 0) -> PrefixStatus:
        seq = self._slot(slot)
        if snap.manifest_digest != self.manifest.digest:
            raise ManifestMismatch(self.manifest.digest, snap.manifest_digest)
        if snap.kind != "kv" or snap.engine != ENGINE:
            raise WorkbenchError(f"cannot restore a {snap.engine or '?'} {snap.kind} snapshot into a llama.cpp cell")
        t0 = time.perf_counter()
        self.import_state(snap.payload, snap.tokens, slot=slot)
        seq.key = snap.cache_key
        return PrefixStatus(slot=slot, prompt_tokens=len(snap.tokens), reused_tokens=len(snap.tokens),
                            computed_tokens=0, source="restore", elapsed_s=time.perf_counter() - t0)

    # capacity (observer): measured by filling a scratch sequence until the engine refuses

    def measure_capacity(self, *, step: int | None = None, slot: int = 0) -> int:
        """Tokens the engine still takes: fill sequence ``slot`` through ``llama_decode`` until it refuses.

        Needs that slot empty (others may hold KV: then this is the free room beside them). Bypasses
        the cell's own pre-dispatch check on purpose, so this measures llama.cpp, not the cell's
        arithmetic; the scratch KV is removed again before it returns.
        """
        if self._slot(slot).tokens:
            raise WorkbenchError(f"measure_capacity needs slot {slot} empty")
        ll, b = self._ll, self._batch
        step = step or self._n_batch
        held = 0
        scratch = [ll.llama_vocab_bos(self._vocab)] * step
        try:
            while True:
                n = min(step, self._n_batch)
                fill_batch(b, scratch[:n], pos0=held, seq_id=slot)
                if ll.llama_decode(self._ctx, b) != 0:
                    if step == 1:
                        return held
                    step = max(step // 2, 1)
                    continue
                held += n
        finally:
            ll.llama_memory_seq_rm(self._mem, slot, -1, -1)
            self._logits_at = None

    # ------------------------------------------------------------------ describe / embed

    def _weights(self) -> str:
        """The model's weight type, in llama.cpp's words (``llama_model_desc``: "llama 135M Q4_1" → "Q4_1")."""
        buf = ctypes.create_string_buffer(256)
        self._ll.llama_model_desc(self._model, buf, len(buf))
        return buf.value.decode(errors="replace").split(" ", 2)[-1]

    def describe(self) -> Description:
        self._check_open()
        g = self.geometry
        return Description(
            engine=ENGINE, engine_version=self._ll.__version__, model=self.model.name,
            manifest_digest=self.manifest.digest, geometry=g, context_tokens=self._n_ctx_seq,
            kv_capacity_tokens=self._n_ctx, kv_capacity_bytes=self._n_ctx * g.bytes_per_token,
            block_tokens=1, slots=self._slots,
            observers=("request_counters", "state_export", "capacity", "kv_readback"),
            extra={"vocab_size": self._ll.llama_vocab_n_tokens(self._vocab), "weights": self._weights(),
                   "n_threads": self._threads,
                   "kv_buffer_bytes": self._kv_buffer_bytes, "n_batch": self._n_batch, "kv_unified": True,
                   "gpu_offload": bool(self._ll.llama_supports_gpu_offload()),
                   "offloaded_layers": list(self._offloaded) if self._offloaded else None,  # its load log's N/M
                   "extra_buffers": self.extra_buffers.use, "extra_buffers_reason": self.extra_buffers.reason,
                   "retention": "not applicable: llama.cpp never evicts; overflow is refused"},
            absent=ABSENT,
        )

    def embed(self, texts: Iterable[str]) -> list[list[float]]:
        self._check_open()
        ll = self._ll
        if self._embed_ctx is None:
            p = ll.llama_context_default_params()
            p.n_ctx = min(self._n_ctx_seq, 4096)
            p.n_batch = p.n_ubatch = p.n_ctx
            p.n_threads = p.n_threads_batch = self._threads
            p.embeddings = True
            p.pooling_type = ll.LLAMA_POOLING_TYPE_MEAN
            self._embed_ctx = ll.llama_init_from_model(self._model, p)
            if not self._embed_ctx:
                raise WorkbenchError("llama.cpp could not create an embedding context")
        n_embd = ll.llama_model_n_embd(self._model)
        mem = ll.llama_get_memory(self._embed_ctx)
        out = []
        for text in texts:
            toks = self.tokenize(text)
            if len(toks) > ll.llama_n_ctx(self._embed_ctx):
                raise ContextOverflow(len(toks), ll.llama_n_ctx(self._embed_ctx), "embedding context")
            batch = ll.llama_batch_init(len(toks), 0, 1)
            try:
                fill_batch(batch, toks, pos0=0, seq_id=0, logits_all=True)
                ll.llama_memory_clear(mem, True)
                if ll.llama_decode(self._embed_ctx, batch) != 0:
                    raise WorkbenchError("llama_decode failed while embedding")
                vec = ll.llama_get_embeddings_seq(self._embed_ctx, 0)
                out.append([float(vec[i]) for i in range(n_embd)])
            finally:
                ll.llama_batch_free(batch)
        return out


__all__ = ["LlamaCppCell", "LlamaCppOptions"]
