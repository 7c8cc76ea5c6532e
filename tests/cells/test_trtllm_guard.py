"""The TensorRT-LLM version guard (``workbench.cells.trtllm.guard``): the one import and the symbol table."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
from doubles.trtllm_fixture import fake_trt, model_dir  # noqa: F401 - the fixture

from workbench.cells.trtllm import cell as trtllm_cell
from workbench.cells.trtllm import guard as trtllm_guard
from workbench.engine import EngineUnavailable

SRC = Path(trtllm_guard.__file__).resolve().parents[3]


def _adapter(root: Path) -> str:
    d = root / "adapter-a"
    d.mkdir()
    (d / "adapter_config.json").write_text(json.dumps({"r": 8}))
    return str(d)


def test_the_guard_module_does_not_import_tensorrt_llm():
    code = "import sys, workbench.cells.trtllm.guard; assert 'tensorrt_llm' not in sys.modules, 'imported'"
    subprocess.run([sys.executable, "-c", code], check=True, env={"PYTHONPATH": str(SRC)})


def test_guard_all_present(fake_trt):
    rows = trtllm_guard.check_guard(fake_trt)
    assert len(rows) == len(trtllm_guard.GUARD)
    assert all(r.ok and r.status == "ok" and not r.missing for r in rows)
    install = trtllm_guard.load()
    assert install.version == "1.2.1" and install.refusal(trtllm_guard.FEATURES) is None


def test_guard_names_missing_and_changed_symbols(fake_trt, tmp_path, monkeypatch):
    base = fake_trt.LLM

    class OldLLM(base):
        def generate_async(self, inputs, sampling_params=None, lora_request=None, streaming=False):
            raise AssertionError("never called")

    monkeypatch.setattr(fake_trt, "LLM", OldLLM)
    monkeypatch.delattr(fake_trt.llmapi, "LoRARequest")
    rows = {r.symbol: r for r in trtllm_guard.check_guard(fake_trt)}
    changed = rows["tensorrt_llm.LLM.generate_async"]
    assert changed.status == "changed" and set(changed.missing) == {"kv_cache_retention_config", "cache_salt"}
    missing = rows["tensorrt_llm.llmapi.LoRARequest"]
    assert missing.status == "missing" and missing.feature == "lora"
    hf_dir = model_dir(tmp_path)
    with pytest.raises(EngineUnavailable) as e:
        trtllm_cell.TrtLlmCell.open(str(hf_dir), adapters=[_adapter(tmp_path)])
    assert "tensorrt_llm.LLM.generate_async changed: lacks kv_cache_retention_config, cache_salt" in e.value.reason
    assert "tensorrt_llm.llmapi.LoRARequest not found" in e.value.reason
    a = trtllm_cell.TrtLlmCell.availability()
    assert not a.available and "cache_salt" in a.reason and "LoRARequest" not in a.reason  # LoRA is optional


def test_later_release_differences_are_named(fake_trt, monkeypatch):
    """1.3+: connector bases under ``connectors/``, ``use_kv_cache_manager_v2`` defaulting to ``'auto'``."""
    import importlib
    import types

    old = importlib.import_module("tensorrt_llm._torch.pyexecutor.kv_cache_connector")
    connectors = types.ModuleType("tensorrt_llm._torch.pyexecutor.connectors")
    connectors.kv_cache_connector = types.ModuleType(f"{connectors.__name__}.kv_cache_connector")
    connectors.kv_cache_connector.KvCacheConnectorScheduler = old.KvCacheConnectorScheduler
    connectors.kv_cache_connector.KvCacheConnectorWorker = old.KvCacheConnectorWorker
    monkeypatch.setitem(sys.modules, old.__name__, None)  # the 1.2 module no longer imports
    monkeypatch.delattr(fake_trt._torch.pyexecutor, "kv_cache_connector")
    monkeypatch.setattr(fake_trt._torch.pyexecutor, "connectors", connectors, raising=False)

    @dataclasses.dataclass(kw_only=True)
    class KvCacheConfig13(fake_trt.llmapi.KvCacheConfig):
        use_kv_cache_manager_v2: bool | str = "auto"

    monkeypatch.setattr(fake_trt.llmapi, "KvCacheConfig", KvCacheConfig13)
    monkeypatch.setattr(fake_trt.llmapi.llm_args, "KvCacheConfig", KvCacheConfig13)
    rows = {r.name: r for r in trtllm_guard.check_guard(fake_trt)}
    worker = rows["_torch.pyexecutor.kv_cache_connector.KvCacheConnectorWorker"]
    assert worker.status == "moved" and not worker.ok and "connectors.kv_cache_connector" in worker.detail
    kv = rows["llmapi.KvCacheConfig"]
    assert kv.ok and "use_kv_cache_manager_v2 defaults to 'auto' here (False in 1.2)" in kv.detail
    refusal = trtllm_guard.load().refusal(("core", "connector"))
    assert refusal and "moved to tensorrt_llm._torch.pyexecutor.connectors" in refusal


def test_a_missing_optional_feature_does_not_block_open(fake_trt, tmp_path, monkeypatch):
    hf_dir = model_dir(tmp_path)
    monkeypatch.delattr(fake_trt.llmapi, "LoRARequest")
    monkeypatch.delattr(fake_trt.llmapi.llm_args, "KvCacheConnectorConfig")
    with trtllm_cell.TrtLlmCell.open(str(hf_dir)) as c:
        assert not c.describe().offers("connector")  # neither announced nor switchable where it cannot be had
    with pytest.raises(EngineUnavailable, match="KvCacheConnectorConfig not found"):
        trtllm_cell.TrtLlmCell.open(str(hf_dir), connector=True)


def test_broken_install_is_not_reported_as_missing(monkeypatch):
    def broken():
        raise OSError("libcudart.so.13: cannot open shared object file")

    monkeypatch.setattr(trtllm_guard, "import_trtllm", broken)
    with pytest.raises(EngineUnavailable) as e:
        trtllm_guard.load()
    assert "failed to import" in e.value.reason and "libcudart" in e.value.reason


def test_version_pin():
    assert trtllm_guard.version_supported("1.2.1") and trtllm_guard.version_supported("1.2.0rc8")
    assert not trtllm_guard.version_supported("1.3.0rc27") and not trtllm_guard.version_supported("unknown")
