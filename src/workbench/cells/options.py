"""What every cell's options share, so a caller (a loop arm, a probe) sets them by one name on any engine.

Each engine's options dataclass extends :class:`CellOptions` with its own keywords (``VllmOptions``,
``TrtLlmOptions``, ``ServedOptions``, ``LlamaCppOptions``); ``open_cell(engine, model, **options)`` takes
them as keywords and refuses an unknown one with the valid names (:func:`workbench.cells.known_options`).
"""

from __future__ import annotations

from dataclasses import dataclass

#: llama.cpp's GGML_MAX_N_THREADS (ggml/include/ggml.h): more threads abort its thread pool (std::bad_alloc).
LLAMA_MAX_THREADS = 512
#: llama.cpp's LLAMA_MAX_SEQ (src/llama-cparams.h): its context refuses more sequences, llama-server more slots.
LLAMA_MAX_SEQ = 256


def check_llama_counts(slots: int, threads: int | None) -> None:
    """llama.cpp's own ceilings on slots and threads, said before it starts (it aborts or allocates past them)."""
    if not 1 <= slots <= LLAMA_MAX_SEQ:
        raise ValueError(f"slots must be 1 to {LLAMA_MAX_SEQ} (llama.cpp's LLAMA_MAX_SEQ), got {slots}")
    if threads is not None and not 1 <= threads <= LLAMA_MAX_THREADS:
        raise ValueError(f"threads must be 1 to {LLAMA_MAX_THREADS} (llama.cpp's GGML_MAX_N_THREADS), got {threads}")


@dataclass(frozen=True)
class CellOptions:
    context_tokens: int | None = None  # tokens one sequence may hold; None: the engine's default for the model
    kv_budget_tokens: int | None = None  # the KV pool, in tokens; None: context_tokens × slots
    slots: int = 1  # the cell's sequences
    threads: int | None = None  # CPU threads of the engine (a GPU engine computes elsewhere and ignores it)
    adapters: tuple[str, ...] = ()  # LoRA adapter files or directories, loaded at open
    connector: bool | str = False  # True or "record": the recording KV connector, where the engine has one


__all__ = ["LLAMA_MAX_SEQ", "LLAMA_MAX_THREADS", "CellOptions", "check_llama_counts"]
