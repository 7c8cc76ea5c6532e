"""vLLM's side of the gateway's P/D shape: its KV connector config, its wire, its store and its own counts.

Measured here on the CPU build (0.32): the one connector that runs without extra packages or CUDA is
``ExampleConnector`` (vllm/distributed/kv_transfer/kv_connector/factory.py; the former SharedStorageConnector).
It saves a prompt's KV layer by layer into ``<shared_storage_path>/<hash of the prompt's aligned token ids>/
<layer>.safetensors`` (one ``kv_cache`` tensor per layer) and, on another engine, loads it when the same prompt
arrives (v1/example_connector.py: ``get_num_new_matched_tokens`` logs "External Cache Hit!", the worker "Inject KV
cache of N tokens"). It keys a whole prompt, not blocks: N = ``align_to_block_size(len - 1)``, ``(len - 2) // B
* B``. It returns no ``kv_transfer_params`` (its ``request_finished`` is the base class's): the state the context
leg hands over *is* the store entry, and the OpenAI answer's ``kv_transfer_params`` is null, relayed as it is.
"""

from __future__ import annotations

import hashlib
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ...gateway.pd import Counts
from ..served_id import prometheus_sum

CONNECTOR = "ExampleConnector"
EXTERNAL_HITS = "vllm:external_prefix_cache_hits_total"
"""Prompt tokens the scheduler took from the KV connector (vllm/v1/metrics/loggers.py, the connector's prefix-cache
stats); its ``…_queries_total`` twin counts the tokens asked for."""


def transfer_config(role: str, store: str | Path) -> dict[str, Any]:
    """``--kv-transfer-config`` for one side: ``kv_producer`` (prefill), ``kv_consumer`` (decode) or ``kv_both``."""
    if role not in ("kv_producer", "kv_consumer", "kv_both"):
        raise ValueError(f"kv_role must be kv_producer, kv_consumer or kv_both, got {role!r}")
    return {"kv_connector": CONNECTOR, "kv_role": role, "kv_connector_extra_config": {"shared_storage_path": str(store)}}


def aligned_prefix(prompt_tokens: int, block_size: int) -> int:
    """The tokens ExampleConnector stores and loads for a prompt: whole blocks of all but its last token."""
    n = prompt_tokens - 1
    return 0 if n <= 0 else (n - 1) // block_size * block_size


class VllmWire:
    """vLLM's OpenAI server (vllm/entrypoints/openai/completion/protocol.py): ``kv_transfer_params`` in the
    request, copied into the sampling params' ``extra_args`` for the connector, and returned top-level in the
    answer. The context leg is the request with ``max_tokens: 1`` and ``do_remote_decode`` (as vLLM's own
    disaggregated proxies send it: examples/online_serving/disaggregated_serving/); the generation leg is the
    original request with the context answer's ``kv_transfer_params``, where it carried any."""

    def cell_options(self, role: str, store: str) -> dict:
        """The prefill side produces, the decode side consumes; KV events off (the P/D leg reads none)."""
        kv_role = {"context": "kv_producer", "generation": "kv_consumer"}[role]
        return {"kv_transfer_config": transfer_config(kv_role, store), "kv_events": False}

    def request(self, served_model: str, tokens: list[int], max_tokens: int, salt: str | None, **more: Any) -> dict:
        return request(served_model, tokens, max_tokens, salt, **more)

    def counts(self, metrics_text: str) -> Counts:
        return Counts(external_hits(metrics_text), prometheus_sum(metrics_text, "vllm:request_success_total"))

    def transferable(self, prompt_tokens: int, block_size: int) -> int:
        return aligned_prefix(prompt_tokens, block_size)

    def store(self, root: str) -> "Store":
        return Store(Path(root))

    def context_body(self, body: Mapping[str, Any]) -> dict:
        return dict(body, max_tokens=1, stream=False, kv_transfer_params={"do_remote_decode": True})

    def state(self, doc: Mapping[str, Any]) -> Any:
        return doc.get("kv_transfer_params")

    def generation_body(self, body: Mapping[str, Any], state: Any) -> dict:
        return dict(body) if state is None else dict(body, kv_transfer_params=state)


def request(served_model: str, tokens: list[int], max_tokens: int, salt: str | None, **more: Any) -> dict:
    """A greedy completion on token ids that returns the engine's token ids (``return_token_ids``)."""
    body = {"model": served_model, "prompt": list(tokens), "max_tokens": max_tokens, "temperature": 0.0,
            "return_token_ids": True} | more
    return body if salt is None else body | {"cache_salt": salt}


def external_hits(metrics_text: str) -> float:
    """The engine's own count of prompt tokens loaded through its connector so far (``/metrics``)."""
    return prometheus_sum(metrics_text, EXTERNAL_HITS)


@dataclass(frozen=True)
class Store:
    """ExampleConnector's shared folder: one entry (a folder) per stored prompt, one file per layer."""

    root: Path

    def entry(self, tokens: list[int], block_size: int) -> Path:
        """The folder the connector stores ``tokens`` under: the hash of the int64 bytes of the prompt's whole
        blocks (``ReqMeta.make_meta`` aligns ``len``, the lookup ``len - 1``: they agree unless ``len`` is one past
        a block) (``_generate_foldername_debug``: ``safe_hash``, md5 unless the platform refuses it, then sha256)."""
        stored = (len(tokens) - 1) // block_size * block_size
        data = np.asarray(tokens[:stored], dtype=np.int64).tobytes()
        try:
            digest = hashlib.md5(data, usedforsecurity=False).hexdigest()
        except ValueError:
            digest = hashlib.sha256(data).hexdigest()
        return self.root / digest

    def files(self, entry: Path) -> list[Path]:
        return sorted(entry.glob("*.safetensors"))

    def zero(self, entry: Path) -> int:
        """Zero every stored tensor of ``entry`` in place, through the files the connector reads (the zeroed-store
        control); the number of tensors zeroed."""
        from safetensors.torch import load_file, save_file

        n = 0
        for f in self.files(entry):
            tensors = load_file(str(f))
            save_file({k: v.zero_() for k, v in tensors.items()}, str(f))
            n += len(tensors)
        return n

    def remove(self, entry: Path) -> None:
        shutil.rmtree(entry, ignore_errors=True)
