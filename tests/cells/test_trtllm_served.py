"""trtllm-serve's typed options and launch line (``cells/trtllm/served.py``), written against the 1.2-era
``tensorrt_llm/commands/serve.py`` (the ``serve`` click command's options) and ``llmapi/llm_args.py``
(``KvCacheConfig``, the YAML of ``--extra_llm_api_options``). Nothing here starts a server: tensorrt_llm needs an
NVIDIA GPU; an option is refused before any server is looked for."""

from __future__ import annotations

import pytest
import yaml

from conftest import TINY
from workbench import cells, serve
from workbench.cells.trtllm import served as trtllm_served
from workbench.cells.trtllm.served import TrtllmServeCell, TrtllmServeOptions


def test_trtllm_serve_declares_its_own_options_class_at_registration():
    assert cells.options_class("trtllm-serve") is TrtllmServeOptions
    assert cells.takes("trtllm-serve", {"tokens_per_block", "max_num_tokens", "endpoint"})
    assert not cells.takes("vllm-server", {"tokens_per_block"})


def test_an_option_trtllm_serve_does_not_take_is_refused_by_name_before_any_server_is_asked():
    with pytest.raises(TypeError, match=r"unknown trtllm-serve cell option\(s\) gpu_layers; valid: .*tokens_per_block"):
        TrtllmServeCell.open(TINY, endpoint="http://127.0.0.1:9", gpu_layers=10)


@pytest.mark.parametrize("options, words", [
    ({"backend": "onnx"}, "trtllm-serve 1.2 takes pytorch, tensorrt, _autodeploy"),
    ({"kv_budget_bytes": 1 << 20}, "a KV budget in tokens"),
    ({"tensor_parallel_size": 0}, "tensor_parallel_size 0"),
    ({"event_buffer_max_size": -1}, "event_buffer_max_size -1"),
    ({"free_gpu_memory_fraction": 1.5}, "fraction in (0, 1]"),
])
def test_a_value_trtllm_serve_would_refuse_is_refused_at_open(options, words):
    with pytest.raises(ValueError) as e:
        TrtllmServeCell.open(TINY, endpoint="http://127.0.0.1:9", **options)
    assert words in str(e.value)


def _launch(tmp_path, **options):
    opts = TrtllmServeOptions(**options)
    req = serve.ServerRequest("trtllm-serve", str(tmp_path), slots=opts.slots, options=opts.server_options())
    launch = trtllm_served.launch(req, 8000, tmp_path)
    return launch.argv, yaml.safe_load(launch.files[trtllm_served.TRTLLM_OPTIONS])


def test_the_default_launch_turns_on_block_reuse_events_and_perf_metrics(tmp_path):
    argv, options = _launch(tmp_path)
    assert options["kv_cache_config"] == {"enable_block_reuse": True, "event_buffer_max_size": 1024,
                                          "use_kv_cache_manager_v2": False, "tokens_per_block": 32}
    assert options["return_perf_metrics"] is True and options["perf_metrics_max_requests"] == 1000
    assert argv[argv.index("--extra_llm_api_options") + 1] == str(tmp_path / trtllm_served.TRTLLM_OPTIONS)
    assert argv[argv.index("--backend") + 1] == "pytorch" and "--trust_remote_code" not in argv


def test_each_option_reaches_the_flag_or_yaml_field_serve_py_reads(tmp_path):
    argv, options = _launch(tmp_path, max_num_tokens=2048, tensor_parallel_size=2, trust_remote_code=True,
                            enable_chunked_prefill=True, tokens_per_block=64, kv_budget_tokens=8192,
                            free_gpu_memory_fraction=0.5, event_buffer_max_size=0, perf_metrics_max_requests=10)
    assert argv[argv.index("--max_num_tokens") + 1] == "2048" and argv[argv.index("--tp_size") + 1] == "2"
    assert {"--trust_remote_code", "--enable_chunked_prefill"} <= set(argv)
    assert options["kv_cache_config"] == {"enable_block_reuse": True, "event_buffer_max_size": 0, "tokens_per_block": 64,
                                          "use_kv_cache_manager_v2": False, "max_tokens": 8192,
                                          "free_gpu_memory_fraction": 0.5}
    assert options["perf_metrics_max_requests"] == 10


def test_v1_is_pinned_unless_the_release_default_is_asked_for(tmp_path):
    """``use_kv_cache_manager_v2`` exists on 1.2 (False) and 1.4 (V2 by default): the pin is valid on both."""
    _, default = _launch(tmp_path, kv_manager="default")
    assert "use_kv_cache_manager_v2" not in default["kv_cache_config"]
    with pytest.raises(ValueError, match="kv_manager 'v2'"):
        TrtllmServeOptions(kv_manager="v2")


@pytest.mark.parametrize("doc, cached", [
    ({"usage": {"prompt_tokens": 96, "prompt_tokens_details": {"cached_tokens": 64}}}, 64),  # 1.3+ (exact)
    ({"usage": {"prompt_tokens": 96, "prompt_tokens_details": {"cached_tokens": 0}}}, 0),
    ({"usage": {"prompt_tokens": 96}}, None),  # 1.2: no details, the perf metrics' blocks answer
    ({"usage": {"prompt_tokens": 96, "prompt_tokens_details": None}}, None),
    ({}, None),
])
def test_the_completions_exact_cached_tokens_are_read_where_the_server_gives_them(doc, cached):
    assert trtllm_served.usage_cached_tokens(doc) == cached
