"""The TensorRT-LLM version guard (``workbench.cells.trtllm.guard``): the one import and the symbol table."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
from doubles.trtllm_fixture import fake_trt, fake_trt14, model_dir  # noqa: F401 - the fixtures

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
    assert all(r.ok and not r.missing for r in rows)
    # 1.4's push path is not a 1.2 fault: absent, as expected, named so
    assert {r.name: r.status for r in rows if r.status != "ok"} == {"llmapi.KVEventsConfig": "not yet"}
    install = trtllm_guard.load()
    assert install.version == "1.2.1" and install.refusal(trtllm_guard.FEATURES) is None
    assert install.release.name == "1.2" and install.double.endswith("as tensorrt_llm 1.2.1")


def test_the_1_4_profile_takes_the_1_4_layout(fake_trt14):
    """1.4.0rc1: the connector bases under connectors/ are its layout (ok, said where), V2 is the declared default,
    the push path and the exact cached_tokens are found; nothing is refused."""
    rows = {r.name: r for r in trtllm_guard.check_guard(fake_trt14)}
    assert all(r.ok and r.status == "ok" for r in rows.values()), [r for r in rows.values() if not r.ok]
    worker = rows["_torch.pyexecutor.kv_cache_connector.KvCacheConnectorWorker"]
    assert "connectors.kv_cache_connector.KvCacheConnectorWorker (the 1.4 layout)" in worker.detail
    assert "use_kv_cache_manager_v2 defaults to True here (False in 1.2)" in rows["llmapi.KvCacheConfig"].detail
    assert "optional cached_tokens absent" not in rows["executor.result.GenerationResult"].detail
    install = trtllm_guard.load()
    assert install.release.name == "1.4" and install.refusal(trtllm_guard.FEATURES) is None


def test_a_1_2_profile_with_the_1_4_layout_is_refused_by_name(fake_trt14, monkeypatch):
    """The same install read as 1.2.1: its connector layout is a move the 1.2 profile does not expect."""
    monkeypatch.setattr(fake_trt14, "__version__", "1.2.1")
    rows = {r.name: r for r in trtllm_guard.check_guard(fake_trt14)}
    worker = rows["_torch.pyexecutor.kv_cache_connector.KvCacheConnectorWorker"]
    assert worker.status == "moved" and not worker.ok and "the 1.2 profile does not expect" in worker.detail
    assert rows["llmapi.KVEventsConfig"].status == "ok"  # present early: no fault


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
    assert trtllm_guard.version_supported("1.4.0rc1") and trtllm_guard.version_supported("1.4.0rc4")
    assert not trtllm_guard.version_supported("1.3.0rc27") and not trtllm_guard.version_supported("unknown")
    assert not trtllm_guard.version_supported("1.5.0") and not trtllm_guard.version_supported("1.1.0")


@pytest.mark.parametrize("version, why", [
    ("1.3.0rc27", "the 1.3 line was never finalised"),
    ("1.5.0", "a release the workbench does not know yet"),
    ("2.0.0rc1", "a release the workbench does not know yet"),
    ("1.1.0", "older than every profile"),
    ("unknown", "not a tensorrt_llm release version"),
])
def test_a_release_it_does_not_know_is_refused_by_name_with_what_to_do(version, why):
    reason = trtllm_guard.version_reason(version)
    assert reason.startswith(f"tensorrt_llm {version} is installed: {why}")
    assert "1.2.x, 1.4.x" in reason and "pip install tensorrt_llm==1.2.*" in reason
    assert "add its profile to workbench.cells.trtllm.guard.RELEASES" in reason


def test_an_unknown_release_refuses_open_and_availability(fake_trt14, monkeypatch, tmp_path):
    monkeypatch.setattr(fake_trt14, "__version__", "1.5.0")
    a = trtllm_cell.TrtLlmCell.availability()
    assert not a.available and "1.5.0 is installed: a release the workbench does not know yet" in a.reason
    with pytest.raises(EngineUnavailable, match="1.5.0 is installed: a release the workbench does not know yet"):
        trtllm_cell.TrtLlmCell.open(str(model_dir(tmp_path)))


def test_the_releases_are_data_each_with_its_sources():
    """What a reader of findings (a version belongs to its engine) and doctor take from the guard."""
    assert [r.name for r in trtllm_guard.RELEASES] == ["1.2", "1.4"]
    assert all(r.sources and r.install.startswith("pip install") for r in trtllm_guard.RELEASES)
    diff = {f: (a, b) for f, a, b in trtllm_guard.differences(*trtllm_guard.RELEASES)}
    assert diff["kv_manager_default"] == ("V1", "V2") and "connectors" in diff["connector_module"][1]
    assert set(diff) == set(trtllm_guard.PROFILE_FIELDS)  # 1.4 changed every behaviour the profile records
    assert trtllm_guard.release_of("1.4.0rc1").name == "1.4" and trtllm_guard.release_of("1.3.0rc1") is None
