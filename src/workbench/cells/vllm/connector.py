"""A recording KV connector for vLLM (KV connector API v1): every call the engine makes, with its arguments.

vLLM builds the connector itself, twice: a scheduler-side instance in the engine-core process and a
worker-side instance in each worker process (``KVConnectorFactory.create_connector``, from
``KVTransferConfig(kv_connector=NAME, kv_connector_module_path=MODULE)``: it imports MODULE and
takes attribute NAME). So the class must be importable by name from this module, and the log must
cross processes: each call appends one JSON line to the file named in
``kv_connector_extra_config["log_path"]``, which travels inside the engine's own config.

Base class: ``vllm.distributed.kv_transfer.kv_connector.v1.base.KVConnectorBase_V1`` (0.32).
The recording connector never loads anything: ``get_num_new_matched_tokens`` answers ``(0, False)``
and ``request_finished`` answers ``(False, None)``, so the engine behaves as without a connector.
On the worker side it *measures* what an export would move: ``register_kv_caches`` records each
layer's KV tensor shape and bytes, and ``save_kv_layer`` records the slots the step wrote, so the
export unit (tokens and bytes per block) comes from the engine's own tensors, not from the config.

A log line is ``{"seq", "pid", "t", "side", "method", "args": {...}}``; argument names follow the
TensorRT-LLM recorder where the meaning is the same (``request_id``, ``tokens``, ``block_ids``,
``num_computed_tokens``, ``layer_idx``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...observe import calllog

CLASS_NAME = "RecordingKVConnector"
BASE_MODULE = "vllm.distributed.kv_transfer.kv_connector.v1.base"

_built: type | None = None


read_log = calllog.read


def _ids(block_ids: Any) -> list[int]:
    """The first KV-cache group's block ids (a tuple of lists, one per group)."""
    if block_ids and isinstance(block_ids[0], (list, tuple)):
        return list(block_ids[0])
    return list(block_ids or [])


def _layer_index(name: str) -> int | None:
    digits = [p for p in name.split(".") if p.isdigit()]
    return int(digits[0]) if digits else None


def _slots(attn_metadata: Any, layer_name: str) -> Any:
    """The slot mapping of one layer's attention metadata (one metadata per layer in some runners)."""
    if isinstance(attn_metadata, dict):
        attn_metadata = attn_metadata.get(layer_name)
    return getattr(attn_metadata, "slot_mapping", None)


class _Recording:
    """The connector's methods, recording each call (mixed in before the installed ``KVConnectorBase_V1``);
    ``_base`` is the installed base module, set by :func:`recording_class`."""

    _base: Any

    def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any = None) -> None:
        super().__init__(vllm_config, role, kv_cache_config)
        extra = vllm_config.kv_transfer_config.kv_connector_extra_config or {}
        self._log = extra.get("log_path")
        self._side = "scheduler" if role == self._base.KVConnectorRole.SCHEDULER else "worker"
        self._block_size = vllm_config.cache_config.block_size
        self._save_calls = 0

    def _record(self, method: str, **args: Any) -> None:
        calllog.append(self._log, self._side, method, **args)

    # ---------------------------------------------------------- scheduler side

    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> tuple[int, bool]:
        self._record("get_num_new_matched_tokens", request_id=request.request_id,
                     tokens=request.num_prompt_tokens, num_computed_tokens=num_computed_tokens)
        return 0, False

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        self._record("update_state_after_alloc", request_id=request.request_id, tokens=request.num_prompt_tokens,
                     block_ids=_ids(blocks.get_block_ids()), num_external_tokens=num_external_tokens)

    def build_connector_meta(self, scheduler_output: Any) -> Any:
        for r in scheduler_output.scheduled_new_reqs:
            self._record("build_connector_meta", request_id=r.req_id, new=True, block_ids=_ids(r.block_ids),
                         num_computed_tokens=r.num_computed_tokens,
                         num_scheduled_tokens=scheduler_output.num_scheduled_tokens.get(r.req_id))
        return self._base.KVConnectorMetadata()

    def request_finished(self, request: Any, block_ids: list[int]) -> tuple[bool, dict | None]:
        self._record("request_finished", request_id=request.request_id, tokens=request.num_prompt_tokens,
                     block_ids=_ids(block_ids), num_computed_tokens=request.num_computed_tokens)
        return False, None

    # ---------------------------------------------------------- worker side

    def register_kv_caches(self, kv_caches: dict[str, Any]) -> None:
        for name, t in kv_caches.items():
            self._record("register_kv_caches", layer=name, layer_idx=_layer_index(name), shape=list(t.shape),
                         dtype=str(t.dtype), bytes=int(t.numel() * t.element_size()),
                         block_tokens=self._block_size)

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        self._record("start_load_kv")

    def wait_for_layer_load(self, layer_name: str) -> None:
        self._record("wait_for_layer_load", layer=layer_name, layer_idx=_layer_index(layer_name))

    def save_kv_layer(self, layer_name: str, kv_layer: Any, attn_metadata: Any, **kwargs: Any) -> None:
        slots = _slots(attn_metadata, layer_name)
        self._record("save_kv_layer", layer=layer_name, layer_idx=_layer_index(layer_name),
                     shape=list(kv_layer.shape), tokens_written=None if slots is None else int(slots.numel()))

    def wait_for_save(self) -> None:
        self._record("wait_for_save")


def recording_class() -> type:
    """The recording connector, a subclass of the installed ``KVConnectorBase_V1``."""
    global _built
    if _built is None:
        import importlib

        base = importlib.import_module(BASE_MODULE)
        _built = type(CLASS_NAME, (_Recording, base.KVConnectorBase_V1), {"__module__": __name__, "_base": base})
    return _built


def __getattr__(name: str) -> type:
    """How vLLM's factory finds the class: built on first access from the installed base module."""
    if name == CLASS_NAME:
        return recording_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class RecordingConnector:
    """The ``kv_transfer_config`` to pass to ``LLM`` and the log it fills."""

    config: dict
    log_path: Path

    def read(self) -> list[dict]:
        return read_log(self.log_path)


def build_recording_connector(log_path: Path) -> RecordingConnector:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.touch()
    config = {"kv_connector": CLASS_NAME, "kv_connector_module_path": __name__, "kv_role": "kv_both",
              "kv_connector_extra_config": {"log_path": str(log_path)}}
    return RecordingConnector(config, log_path)


__all__ = ["CLASS_NAME", "RecordingConnector", "build_recording_connector", "read_log", "recording_class"]
