"""The ``fake_trt`` fixtures: the TensorRT-LLM double loaded as ``tensorrt_llm`` for one test.

Import one into a test module (``from doubles.trtllm_fixture import fake_trt``): ``fake_trt`` is the 1.2.1 profile,
``fake_trt14`` the 1.4.0rc1 one, ``fake_trt_any`` each in turn (a test of both profiles). Each hands the double to
the workbench through the guard's one import (``trtllm_guard.import_trtllm``), reports a GPU, and shuts every LLM
the test left open (their dispatch threads) down afterwards.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from workbench import environment
from workbench.cells.trtllm import cell as trtllm_cell
from workbench.cells.trtllm import guard as trtllm_guard
from workbench.cells.trtllm import connector as trtllm_connector

FAKE = Path(__file__).parent / "fake_tensorrt_llm"
GPU = {"available": True, "source": "nvml",
       "devices": [{"index": 0, "name": "Fake H100", "memory_total_bytes": 80 << 30, "memory_free_bytes": 79 << 30}],
       "driver": "580.00", "cuda": "13.0", "reason": None}
CONFIG = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2, "num_attention_heads": 4,
          "num_key_value_heads": 2, "hidden_size": 64, "max_position_embeddings": 512, "vocab_size": 128,
          "torch_dtype": "bfloat16", "eos_token_id": 2}


RELEASES = ("1.2.1", "1.4.0rc1")
RELEASE_ENV = "FAKE_TENSORRT_LLM_RELEASE"  # what fake_tensorrt_llm/_profile.py reads at import
SITE = Path(__file__).parent / "site"  # a folder whose tensorrt_llm is the double, for a subprocess's PYTHONPATH


@pytest.fixture
def fake_trt(monkeypatch):
    """Load the double (1.2.1) as ``tensorrt_llm`` and hand it to the workbench; a GPU is reported present."""
    yield from _load(monkeypatch, "1.2.1")


@pytest.fixture
def fake_trt14(monkeypatch):
    """The double as tensorrt_llm 1.4.0rc1 (V2 by default, connectors moved, exact cached_tokens, hash_algo)."""
    yield from _load(monkeypatch, "1.4.0rc1")


@pytest.fixture(params=RELEASES)
def fake_trt_any(monkeypatch, request):
    """The double as each known release in turn: a test that must hold on both profiles."""
    yield from _load(monkeypatch, request.param)


def _load(monkeypatch, release: str):
    monkeypatch.setenv(RELEASE_ENV, release)
    for name in [n for n in sys.modules if n == "tensorrt_llm" or n.startswith("tensorrt_llm.")]:
        monkeypatch.delitem(sys.modules, name)
    spec = importlib.util.spec_from_file_location("tensorrt_llm", FAKE / "__init__.py",
                                                  submodule_search_locations=[str(FAKE)])
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "tensorrt_llm", module)
    spec.loader.exec_module(module)
    llm_cls = module.llmapi.llm.LLM
    llm_cls.instances = []
    # time runs ten times faster than in 1.2, the ratio of drain timeout to dispatch sleep kept (5:1)
    monkeypatch.setattr(module.executor.executor, "DISPATCH_SLEEP_S", 0.02)
    monkeypatch.setattr(trtllm_cell, "MIN_DRAIN_TIMEOUT_S", 0.1)
    monkeypatch.setattr(trtllm_guard, "import_trtllm", lambda: module)
    monkeypatch.setattr(environment, "gpus", lambda: GPU)
    monkeypatch.delenv(trtllm_connector.LOG_ENV, raising=False)
    yield module
    for llm in llm_cls.instances:
        if not llm.shut_down:
            llm.shutdown()
    for name in [n for n in sys.modules if n.startswith("tensorrt_llm.")]:
        del sys.modules[name]


def model_dir(root: Path, name: str = "tiny-llama", tokenizer: bool = True, **overrides) -> Path:
    """A Hugging Face model directory: ``config.json`` (and a tokenizer file unless ``tokenizer=False``)."""
    d = root / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(CONFIG | overrides))
    if tokenizer:
        (d / "tokenizer_config.json").write_text("{}")
    return d
