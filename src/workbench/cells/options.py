"""What every cell's options share, so a caller (a loop arm, a probe) sets them by one name on any engine.

Each engine's options dataclass extends :class:`CellOptions` with its own keywords (``VllmOptions``,
``TrtLlmOptions``, ``ServedOptions``, ``LlamaCppOptions``); ``open_cell(engine, model, **options)`` takes
them as keywords and refuses an unknown one with the valid names (:func:`workbench.cells.known_options`).
"""

from __future__ import annotations

from dataclasses import dataclass

@dataclass(frozen=True)
class CellOptions:
    context_tokens: int | None = None  # tokens one sequence may hold; None: the engine's default for the model
    kv_budget_tokens: int | None = None  # the KV pool, in tokens; None: context_tokens × slots
    slots: int = 1  # the cell's sequences
    threads: int | None = None  # CPU threads of the engine (a GPU engine computes elsewhere and ignores it)
    adapters: tuple[str, ...] = ()  # LoRA adapter files or directories, loaded at open
    connector: bool | str = False  # True or "record": the recording KV connector, where the engine has one


__all__ = ["CellOptions"]
