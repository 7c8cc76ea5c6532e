"""A recording KV Cache Connector for TensorRT-LLM: every call the engine makes, with its arguments.

TensorRT-LLM (PyTorch backend) builds connector classes itself, inside its executor worker
processes: ``LLM(kv_connector_config=KvCacheConnectorConfig(connector_module=…,
connector_scheduler_class=…, connector_worker_class=…))`` and ``importlib.import_module`` in the
worker, then ``cls(llm_args)``. So the classes must be importable by name from this module, and the
log must cross processes: each call appends one JSON line to the file named by
:data:`LOG_ENV`, which workers inherit from the process that created the ``LLM`` (the pattern of
NVIDIA's ``examples/llm-api/llm_kv_cache_connector.py``). The name carries the ``TLLM_`` prefix
because launchers that do not pass the whole environment to their workers still pass
``TRTLLM*``/``TLLM*`` variables; whether a given launcher does is not verified for 1.2, so a
worker that sees no log path records nothing, and an empty log is reported as "the connector did
not record", never read as an engine answer.

The recording connector never loads or saves anything: ``get_num_new_matched_tokens`` answers
``(0, False)`` and ``request_finished`` answers ``False``, so the engine behaves as without a
connector while the log shows block ids, token counts and computed positions as the engine saw them.

A log line is ``{"seq", "pid", "t", "side", "method", "args": {...}}`` with the call's arguments
flattened: ``request_id``, ``tokens`` (prompt length), ``block_ids`` / ``cache_block_ids``,
``num_computed_tokens``, ``layer_idx``…. ``build_connector_meta`` writes one line per scheduled
request (``new_block_ids``, ``new_tokens`` count, ``computed_position``, ``num_scheduled_tokens``,
``new``), or one line with ``request_id`` None when nothing was scheduled.

Base classes (1.2 line): ``tensorrt_llm._torch.pyexecutor.kv_cache_connector``
``KvCacheConnectorScheduler`` / ``KvCacheConnectorWorker`` (1.3+ moves them to
``_torch.pyexecutor.connectors.kv_cache_connector``); the config class is
``tensorrt_llm.llmapi.llm_args.KvCacheConnectorConfig``.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from ...observe import calllog

LOG_ENV = "TLLM_WORKBENCH_CONNECTOR_LOG"
BASE_MODULE = "_torch.pyexecutor.kv_cache_connector"  # tensorrt_llm/_torch/pyexecutor/kv_cache_connector.py (1.2)
LATER_BASE_MODULE = "_torch.pyexecutor.connectors.kv_cache_connector"  # the 1.3+ location (the 1.4 profile's)
SCHEDULER_CLASS = "RecordingConnectorScheduler"
WORKER_CLASS = "RecordingConnectorWorker"

_built: dict[int, tuple[type, type]] = {}


def record(side: str, method: str, **args: Any) -> None:
    """Append one call to the log named by :data:`LOG_ENV`; without it there is nowhere to record."""
    calllog.append(os.environ.get(LOG_ENV), side, method, **args)


read_log = calllog.read


def _request(request: Any) -> dict:
    """What the log keeps of an ``LlmRequest``: its id and prompt length (not its tokens)."""
    tokens = request.get_tokens(0) if hasattr(request, "get_tokens") else None
    return {"request_id": getattr(request, "request_id", None), "tokens": None if tokens is None else len(tokens)}


def _request_data(rd: Any, new: bool) -> dict:
    """One ``RequestData`` of a ``SchedulerOutput``: block ids, token count, computed position."""
    return {"request_id": rd.request_id, "new": new, "new_tokens": len(rd.new_tokens),
            "new_block_ids": list(rd.new_block_ids), "computed_position": rd.computed_position,
            "num_scheduled_tokens": rd.num_scheduled_tokens}


class _SchedulerRecording:
    """The scheduler side's methods, recording each call (mixed in before the installed base class)."""

    def build_connector_meta(self, scheduler_output: Any) -> dict:
        rows = ([_request_data(r, True) for r in scheduler_output.new_requests]
                + [_request_data(r, False) for r in scheduler_output.cached_requests])
        for row in rows or [{"request_id": None}]:
            record("scheduler", "build_connector_meta", **row)
        return {"new_requests": [r["request_id"] for r in rows if r["new"]]}

    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> tuple[int, bool]:
        record("scheduler", "get_num_new_matched_tokens", num_computed_tokens=num_computed_tokens,
               **_request(request))
        return 0, False

    def update_state_after_alloc(self, request: Any, block_ids: Any) -> None:
        record("scheduler", "update_state_after_alloc", block_ids=list(block_ids), **_request(request))

    def request_finished(self, request: Any, cache_block_ids: Any) -> bool:
        record("scheduler", "request_finished", cache_block_ids=list(cache_block_ids), **_request(request))
        return False


class _WorkerRecording:
    """The worker side's methods, recording each call (mixed in before the installed base class)."""

    _metadata: Any  # set by the base class

    def register_kv_caches(self, kv_cache_tensor: Any) -> None:
        # the unique primary pool (``kv_cache_manager.get_unique_primary_pool()``): its bytes as torch counts them
        size = (int(kv_cache_tensor.numel() * kv_cache_tensor.element_size())
                if hasattr(kv_cache_tensor, "numel") and hasattr(kv_cache_tensor, "element_size") else None)
        record("worker", "register_kv_caches", shape=list(getattr(kv_cache_tensor, "shape", ())),
               dtype=str(getattr(kv_cache_tensor, "dtype", "")), bytes=size)

    def start_load_kv(self, stream: Any) -> None:
        record("worker", "start_load_kv", metadata=self._metadata)

    def wait_for_layer_load(self, layer_idx: int, stream: Any) -> None:
        record("worker", "wait_for_layer_load", layer_idx=layer_idx)

    def save_kv_layer(self, layer_idx: int, stream: Any) -> None:
        record("worker", "save_kv_layer", layer_idx=layer_idx)

    def wait_for_save(self, stream: Any) -> None:
        record("worker", "wait_for_save")

    def get_finished(self, finished_gen_req_ids: Any, started_loading_req_ids: Any) -> tuple[list, list]:
        record("worker", "get_finished", finished_gen_req_ids=list(finished_gen_req_ids),
               started_loading_req_ids=list(started_loading_req_ids))
        return [], []


def recording_classes(base: ModuleType) -> tuple[type, type]:
    """Subclasses of ``base.KvCacheConnectorScheduler`` / ``KvCacheConnectorWorker`` that record every call."""
    key = id(base)
    if key not in _built:
        _built[key] = (
            type(SCHEDULER_CLASS, (_SchedulerRecording, base.KvCacheConnectorScheduler), {"__module__": __name__}),
            type(WORKER_CLASS, (_WorkerRecording, base.KvCacheConnectorWorker), {"__module__": __name__}))
    return _built[key]


def base_module(package: str = "tensorrt_llm") -> ModuleType:
    """The installed connector base module: the 1.2 location, else the 1.4 one (``connectors/``)."""
    try:
        return importlib.import_module(f"{package}.{BASE_MODULE}")
    except ImportError:
        return importlib.import_module(f"{package}.{LATER_BASE_MODULE}")


def __getattr__(name: str) -> type:
    """How TensorRT-LLM's worker finds the classes: built on first access from the installed base module."""
    if name in (SCHEDULER_CLASS, WORKER_CLASS):
        scheduler, worker = recording_classes(base_module())
        return scheduler if name == SCHEDULER_CLASS else worker
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class RecordingConnector:
    """The config to pass as ``LLM(kv_connector_config=…)``, the classes it names, and their log."""

    config: Any
    scheduler_class: type
    worker_class: type
    log_path: Path

    def read(self) -> list[dict]:
        return read_log(self.log_path)


def build_recording_connector(trtllm: ModuleType, log_path: Path) -> RecordingConnector:
    """Point the log at ``log_path`` (via :data:`LOG_ENV`, inherited by the workers) and build the config."""
    scheduler, worker = recording_classes(base_module(trtllm.__name__))
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.touch()
    os.environ[LOG_ENV] = str(log_path)
    llm_args = importlib.import_module(f"{trtllm.__name__}.llmapi.llm_args")
    config = llm_args.KvCacheConnectorConfig(
        connector_module=__name__, connector_scheduler_class=SCHEDULER_CLASS, connector_worker_class=WORKER_CLASS)
    return RecordingConnector(config, scheduler, worker, log_path)


__all__ = [
    "BASE_MODULE",
    "LATER_BASE_MODULE",
    "LOG_ENV",
    "RecordingConnector",
    "base_module",
    "build_recording_connector",
    "read_log",
    "record",
    "recording_classes",
]
