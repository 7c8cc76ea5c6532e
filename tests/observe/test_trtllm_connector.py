"""The recording KV connector (``workbench.cells.trtllm.connector``) against the double's connector bases."""

from __future__ import annotations

import importlib
import os

import pytest
from doubles.trtllm_fixture import fake_trt  # noqa: F401 - the fixture

from workbench.cells.trtllm import connector as trtllm_connector


def test_connector_classes_resolve_by_name(fake_trt):
    mod = importlib.import_module("workbench.cells.trtllm.connector")
    base = importlib.import_module("tensorrt_llm._torch.pyexecutor.kv_cache_connector")
    assert issubclass(mod.RecordingConnectorScheduler, base.KvCacheConnectorScheduler)
    assert issubclass(mod.RecordingConnectorWorker, base.KvCacheConnectorWorker)
    with pytest.raises(AttributeError):
        mod.NoSuchClass  # noqa: B018


def test_a_call_without_the_log_path_records_nothing(tmp_path, monkeypatch):
    log = tmp_path / "c.jsonl"
    monkeypatch.delenv(trtllm_connector.LOG_ENV, raising=False)
    trtllm_connector.record("worker", "wait_for_save")
    assert not log.exists()
    monkeypatch.setenv(trtllm_connector.LOG_ENV, str(log))
    trtllm_connector.record("worker", "save_kv_layer", layer_idx=3)
    (entry,) = trtllm_connector.read_log(log)
    assert (entry["side"], entry["method"], entry["args"], entry["pid"]) == ("worker", "save_kv_layer",
                                                                            {"layer_idx": 3}, os.getpid())
