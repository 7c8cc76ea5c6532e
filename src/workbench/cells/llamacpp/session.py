"""llama.cpp's contract session adapter: modeld's own llama cell (``modeld/llama/llamasession``, contenox/runtime
7d0a257f) over this wing's :class:`~workbench.cells.llamacpp.llama.LlamaCppCell`.

What follows modeld's cell, with its source:

* one session is one llama.cpp sequence (a slot of the cell's unified KV); messages are rebuilt from the manifest's
  segments, rendered with the GGUF's own chat template and tokenized; reuse is the token longest common prefix and
  the divergent tail is removed from the engine (``llama.go`` 301-420, the cell's ``ensure_prefix``);
* capabilities (``capabilities.go``): ``RemoveTail`` always, ``RemoveMiddle``/``PositionShift`` (modeld sets them
  always; here exactly when llama.cpp's ``llama_memory_can_shift`` says this model's memory can shift, so the report
  is what the engine can execute), ``SparseAttention``/``SlidingWindowAttentionTokens`` from the GGUF's sliding
  window, ``ColdStore`` only with a cold budget (this adapter keeps none), ``RecomputeRange`` **unreported**
  ("evicted tokens survive only inside cold blocks"), and so ``Restore`` takes the engine's state blob only, a
  snapshot of tokens without it refused (``llama.go`` 798-828);
* no deferred-prefill mode: ``DeferredPrefill*`` stay a truthful zero (``llama.go`` lines 60-66), so the daemon
  refuses to defer on this backend;
* ``Embed`` answers a vector (``embed.go``), ``Snapshot`` carries the engine's own state blob
  (``llama_state_seq_get_data``; the daemon keeps it under ``state_id``).

What the engine itself says: ``llama_perf_context``'s ``n_p_eval`` (prompt tokens it evaluated) for each stage, and
the KV it holds for the sequence read back from its state (``resident_tokens``).
"""

from __future__ import annotations

from typing import Any, ClassVar, Sequence

from ...transport.contract import ResidencyCapabilities
from ...transport.manifest import ChatMessage
from ...transport.session import CellSession


class LlamaSession(CellSession):
    backend: ClassVar[str] = "llama"
    can_defer: ClassVar[bool] = False
    defers_by_default: ClassVar[bool] = False
    embeds: ClassVar[bool] = True
    engine_salt: ClassVar[bool] = False  # llama.h keys nothing on a salt: a sequence is the session's own KV

    @classmethod
    def capabilities_of(cls, cell: Any) -> ResidencyCapabilities:
        shift = bool(cell.capabilities().position_shift)
        swa = int(cell._meta(f"{cell._meta('general.architecture') or 'llama'}.attention.sliding_window") or 0)
        return ResidencyCapabilities(remove_tail=True, remove_middle=shift, position_shift=shift,
                                     sparse_attention=swa > 0, sliding_window_attention_tokens=swa,
                                     cold_store=False, recompute_range=False)

    def render(self, messages: Sequence[ChatMessage], tools: str, *, add_generation_prompt: bool,
               **template: Any) -> str:
        from ...transport.errors import ErrUnsupportedFeature

        if tools:
            raise ErrUnsupportedFeature("tools: this adapter renders no tool definitions into the template")
        return self.cell.render([m.as_dict() for m in messages], add_generation_prompt=add_generation_prompt,
                                **template)

    def tokenize(self, text: str, *, add_bos: bool) -> list[int]:
        bos = self.cell.detokenize([self.cell._ll.llama_vocab_bos(self.cell._vocab)])
        written = bool(bos) and text.startswith(bos)  # the template wrote the BOS itself
        return self.cell.tokenize(text, add_bos=None if add_bos and not written else False)

    def detokenize(self, tokens: Sequence[int]) -> str:
        return self.cell.detokenize(tokens)

    def engine_tokens(self, status: Any) -> tuple[int | None, int | None]:
        n = (getattr(status, "engine_counters", None) or {}).get("n_p_eval")
        if n is None:
            return None, None
        prompt = getattr(status, "prompt_tokens", None)
        return int(n), (int(prompt) - int(n) if prompt is not None and hasattr(status, "reused_tokens") else None)

    @classmethod
    def work_of(cls, cell: Any) -> dict | None:
        """``llama_perf_context``: the prompt tokens llama.cpp evaluated (``n_p_eval``) and the tokens it generated
        (``n_eval``). llama.h counts no cache hits: a sequence's reuse is the KV it holds (:meth:`engine_resident`)
        less what it computed."""
        p, e = cell._perf()
        return {"prompt_tokens_computed": int(p), "tokens_generated": int(e)}

    def _restore_engine(self, snap: Any, ids: list[int], key: str) -> Any:
        """modeld's llama cell restores the engine's state blob only (``llama.go`` Restore, line 828): a snapshot
        whose tokens come without it is refused, as there."""
        if not snap.state:
            raise ValueError("restore invalid snapshot: non-empty resident token set has empty state")
        return super()._restore_engine(snap, ids, key)

    @classmethod
    def kv_bytes_read(cls, cell: Any, free_slot: int | None) -> int | None:
        """The growth of a sequence's state size per cell, less the cell's metadata
        (:meth:`~workbench.cells.llamacpp.llama.LlamaCppCell.state_bytes_per_token`), on a slot no session holds."""
        return None if free_slot is None else cell.state_bytes_per_token(slot=free_slot)

    def engine_resident(self) -> int | None:
        return int(self.cell.resident_tokens(slot=self.slot))

    def release(self) -> None:
        self.cell.remove_tail(10**9, slot=self.slot)

    def slot_tokens(self) -> list[int]:
        return list(self.cell._seqs[self.slot].tokens)

    @classmethod
    def inject_fault(cls, cell: Any, sess: CellSession) -> str:
        """An abort callback on the engine's context (``llama_set_abort_callback``) that always aborts: every later
        ``llama_decode`` fails inside llama.cpp (it returns 2), as a broken context would. The context is the slot's,
        so only a reload (LoadModel) serves again."""
        ll = cell._ll
        cb = ll.ggml_abort_callback(lambda _data: True)
        cell._fault_abort = cb  # kept alive as long as the context that calls it
        ll.llama_set_abort_callback(cell._ctx, cb, None)
        return "llama_set_abort_callback(always abort): the engine's next llama_decode fails with 2"

    @classmethod
    def heal_fault(cls, cell: Any) -> str:
        """The abort callback taken off the context again (``llama_set_abort_callback`` with none): llama_decode
        computes again."""
        none = cell._ll.ggml_abort_callback(0)  # a NULL callback: llama.cpp checks it before calling it
        cell._ll.llama_set_abort_callback(cell._ctx, none, None)
        cell._fault_abort = none
        return "llama_set_abort_callback(none): the engine's llama_decode computes again"

    @classmethod
    def write_adapter(cls, cell: Any, folder: str, seed: int) -> str:
        """A LoRA GGUF for this model, shaped from what llama.cpp reports of it (``llama_model_n_embd``,
        ``llama_model_n_head``, the cell's KV geometry): :func:`workbench.adapters.write_gguf_lora`."""
        from pathlib import Path

        from ... import adapters

        ll, g = cell._ll, cell.geometry
        shapes = adapters.gguf_projection_shapes(ll.llama_model_n_embd(cell._model), ll.llama_model_n_head(cell._model),
                                                 g.kv_heads, g.head_dim)
        arch = cell._meta("general.architecture") or "llama"
        return str(adapters.write_gguf_lora(Path(folder) / "lora.gguf", arch=arch, layers=g.layers, shapes=shapes,
                                            seed=seed))


__all__ = ["LlamaSession"]
