"""The contract session adapter the request-based engines share (TensorRT-LLM, vLLM), over a
:class:`~workbench.cells.request.RequestCell`: the TensorRT-LLM mapping table's rows, which vLLM follows where it has
the mechanism (``cache_salt``, a per-request reuse counter, a ``max_tokens=1`` warm-up). Each engine's wing subclasses
it with what is its own (the reuse counter's name, the fault lever, ``Describe``'s sources).

* **Manifest-keyed reuse validity**: every request carries ``cache_salt`` derived from the caller's manifest and the
  session's adapters (:func:`workbench.transport.manifest.cache_salt`), never a caller's choice.
* **EnsurePrefix**: render with the tokenizer's ``apply_chat_template``, tokenize, one ``max_tokens=1`` warm-up; the
  reuse counters are the engine's own for that request (block-granular); a divergent tail is bookkeeping (stale
  blocks age out of the engine's pool).
* **PrefillSuffix**: deferred by default, riding the next decode's prefill, reported by ``DeferredPrefill*``; the
  opt-out (``--no-defer-prefill``) sends it as a warm-up at once (``PhysicalPrefill*``).
* **ExplainContext**: ``RemoveTail``, ``RemoveMiddle``, ``PositionShift`` false (a shared block pool: nothing is
  removed or shifted in place), ``RecomputeRange`` true (the adapter keeps every token and re-prefills a range).
* **Snapshot/Restore**: text-level (the tokens, texts and manifest); restore re-prefills them by warm-up.
* **Embed**: ``ErrUnsupportedFeature`` (a generate runner exposes no embeddings).
"""

from __future__ import annotations

import json
from typing import Any, ClassVar, Sequence

from ..transport.contract import ResidencyCapabilities
from ..transport.manifest import ChatMessage
from ..transport.session import CellSession


class RequestSession(CellSession):
    backend: ClassVar[str] = "llama"  # what the modeld-era runtime knows (docs/transport.md: the backend word)
    can_defer: ClassVar[bool] = True
    defers_by_default: ClassVar[bool] = True
    embeds: ClassVar[bool] = False
    engine_salt: ClassVar[bool] = True
    reuse_counter: ClassVar[str] = ""  # the key of the engine's own per-request reuse count in a result's counters

    @classmethod
    def capabilities_of(cls, cell: Any) -> ResidencyCapabilities:
        c = cell.capabilities()
        return ResidencyCapabilities(remove_tail=c.remove_tail, remove_middle=c.remove_middle,
                                     position_shift=c.position_shift, cold_store=False,
                                     recompute_range=c.recompute_range)

    def render(self, messages: Sequence[ChatMessage], tools: str, *, add_generation_prompt: bool,
               **template: Any) -> str:
        kw: dict[str, Any] = {"tokenize": False, "add_generation_prompt": add_generation_prompt, **template}
        if tools:
            kw["tools"] = json.loads(tools)
        return self.cell._apply_template([m.as_dict() for m in messages], **kw)

    def tokenize(self, text: str, *, add_bos: bool) -> list[int]:
        tok = self.cell._need_tokenizer("text")
        bos = getattr(tok, "bos_token", None)
        special = add_bos and not (bos and text.startswith(bos))  # the template may have written the BOS itself
        return list(tok.encode(text, add_special_tokens=special))

    def detokenize(self, tokens: Sequence[int]) -> str:
        return self.cell._need_tokenizer("text").decode(list(tokens))

    def engine_tokens(self, status: Any) -> tuple[int | None, int | None]:
        """(computed, reused) as the engine counted them: its reuse counter, and the prompt less it."""
        counters = getattr(status, "engine_counters", None) or {}
        reused = counters.get(self.reuse_counter) if self.reuse_counter else None
        if reused is None:
            reused = getattr(status, "engine_reused_tokens", None) if hasattr(status, "source") else None
        prompt = counters.get("prompt_tokens", getattr(status, "prompt_tokens", None))
        if reused is None or prompt is None:
            return None, None
        return int(prompt) - int(reused), int(reused)

    @classmethod
    def write_adapter(cls, cell: Any, folder: str, seed: int) -> str:
        """A PEFT LoRA directory for this model, from its ``config.json`` (:func:`workbench.adapters.write_lora`)."""
        from pathlib import Path

        from .. import adapters, models

        return str(adapters.write_lora(models.hf_directory(cell.model), Path(folder) / "lora", seed=seed))

    def _prefill_engine(self, stoks: list[int]) -> Any:
        """Deferred, or where the cell sends a suffix itself, the cell's PrefillSuffix; otherwise (TensorRT-LLM has
        no prefill-only request, so its cell only defers) the opt-out warms prefix and suffix with one
        ``max_tokens=1`` request under the session's salt, as EnsurePrefix does."""
        if self.defer_prefill or self.cell.prefill_now:
            return super()._prefill_engine(stoks)
        st = self.cell._slots[self.slot]
        return self.cell.ensure_prefix(list(st.tokens) + list(st.pending) + list(stoks), slot=self.slot, salt=self.key)

    def release(self) -> None:
        self.cell.clear_slot(self.slot)

    def slot_tokens(self) -> list[int]:
        st = self.cell._slots[self.slot]
        return list(st.tokens) + list(st.pending)


__all__ = ["RequestSession"]
