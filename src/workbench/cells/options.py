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


#: The cell options that say how an engine runs the measurement (its size, its threads, its precision, where its server
#: listens), on any engine: a run that moves them still measures the engine's own behaviour. Any other option given
#: (a cache or its events turned off, a KV connector, speculation, a hash seed, flags passed to a server as they are)
#: can build the outcome instead of measuring it, so a finding of a run that set it is exploratory
#: (:mod:`workbench.settle`), unless its probe declares it measurement (``Probe.measures``).
MEASURED = frozenset({
    "context_tokens", "kv_budget_tokens", "kv_budget_bytes", "slots", "threads", "tokens_per_block", "block_size",
    "n_batch", "kv_type", "gpu_layers", "extra_buffers", "dummy_weights", "tokenizer", "multiprocess", "dtype", "seed",
    "max_num_tokens", "tensor_parallel_size", "free_gpu_memory_fraction", "trust_remote_code", "backend",
    "perf_metrics_max_requests", "max_lora_rank", "guided_decoding_backend", "endpoint", "host", "port", "api_key",
    "log_dir", "ready_timeout_s", "request_timeout_s",
})


__all__ = ["CellOptions", "MEASURED"]
