"""What the TensorRT-LLM double models of 1.2, one behaviour per row, each with the file it mirrors.

The cell relies on every row. When a release changes one, update its row (and the double) here:
the table is the one place that says what the double claims about TensorRT-LLM. The sources were
read at 1.2-era versions of NVIDIA/TensorRT-LLM (see ``/work/shared/reference`` facts §0 for
the markers); the double never produces a finding.
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from pathlib import Path
from typing import Callable

import pytest
from doubles.trtllm_fixture import fake_trt, model_dir  # noqa: F401 - the fixture

ROOT = Path(__file__).resolve().parents[2]
_MODELS = tempfile.TemporaryDirectory(prefix="trtllm-double-")  # config.json: the engine sizes its pool from it


def _llm(trt, **kw):
    kv = trt.llmapi.KvCacheConfig(max_tokens=256, event_buffer_max_size=64, **kw.pop("kv", {}))
    model = Path(_MODELS.name) / "tiny-llama"
    if not model.exists():
        model_dir(Path(_MODELS.name), tokenizer=False)
    return trt.LLM(model=str(model), skip_tokenizer_init=True, kv_cache_config=kv,
                   enable_iter_perf_stats=kw.pop("stats", True), **kw)


def _submit(llm, tokens=(5,) * 40, **kw):
    return llm.generate_async(list(tokens), sampling_params=llm_sampling(llm, **kw))


def llm_sampling(llm, max_tokens=1):
    from tensorrt_llm import SamplingParams  # the double, loaded by the fixture

    return SamplingParams(max_tokens=max_tokens, end_id=2)


# ------------------------------------------------------------------------------------------ the rows


def kv_events_assert_before_the_first_request(trt):
    llm = _llm(trt)
    with pytest.raises(AssertionError, match="not properly instantiated"):
        llm.get_kv_cache_events(timeout=0.05)


def stats_are_empty_before_the_first_request(trt):
    assert _llm(trt).get_stats(timeout=0.05) == []


def created_arrives_only_after_the_first_request(trt):
    llm = _llm(trt)
    time.sleep(0.1)  # no dispatch thread yet: nothing moves however long one waits
    _submit(llm).result()
    kinds = [e["data"]["type"] for e in llm.get_kv_cache_events(timeout=0.2)]
    assert kinds[0] == "created" and "stored" in kinds


def events_and_stats_are_dicts(trt):
    llm = _llm(trt)
    _submit(llm).result()
    assert all(isinstance(e, dict) for e in llm.get_kv_cache_events(timeout=0.2))
    stats = llm.get_stats(timeout=0.2)
    assert stats and all(isinstance(s, dict) for s in stats) and "kvCacheStats" in stats[0]


def a_dry_read_latches_until_the_next_submit(trt):
    llm = _llm(trt)
    _submit(llm).result()
    assert llm.get_kv_cache_events(timeout=0.2)
    _submit(llm, tokens=(6,) * 40)  # results reach the queue ...
    llm._executor._iter_kv_events_result._done = True  # ... after a dry read (what a short timeout leaves)
    time.sleep(0.1)
    assert llm.get_kv_cache_events(timeout=0.2) == []  # latched: the events wait in the queue
    _submit(llm, tokens=(7,) * 40).result()  # the next submit marks the result undone
    assert len([e for e in llm.get_kv_cache_events(timeout=0.2) if e["data"]["type"] == "stored"]) == 2


def reading_drains(trt):
    llm = _llm(trt)
    _submit(llm).result()
    assert llm.get_kv_cache_events(timeout=0.2)
    _submit(llm).result()  # the same prompt again: nothing new is stored
    assert llm.get_kv_cache_events(timeout=0.2) == []


def a_none_event_carries_nothing(trt):
    from tensorrt_llm._utils import KVCacheEventSerializer

    llm = _llm(trt)
    _submit(llm).result()
    llm.engine_events.append(None)
    assert None in llm.get_kv_cache_events(timeout=0.2)  # one event per queue entry: serialize(None) is None
    assert KVCacheEventSerializer.serialize([None]) == [{}]  # inside a list: to_json_str(None) is {}


def no_stats_without_enable_iter_perf_stats(trt):
    llm = _llm(trt, stats=False)
    _submit(llm).result()
    assert llm.get_stats(timeout=0.2) == []


def unknown_llm_keywords_raise_value_error(trt):
    with pytest.raises(ValueError, match="LLM got invalid argument: free_gpu_memory_fractionn"):
        trt.LLM(model="/nowhere", free_gpu_memory_fractionn=0.5)


def generate_async_refuses_after_shutdown(trt):
    llm = _llm(trt)
    llm.shutdown()
    with pytest.raises(RuntimeError, match="shutting down"):
        _submit(llm)


def the_pool_is_the_smaller_of_memory_and_max_tokens(trt, monkeypatch):
    monkeypatch.setattr(trt.llmapi.llm.LLM, "memory_tokens", 100)
    llm = _llm(trt)
    _submit(llm).result()
    created = llm.get_kv_cache_events(timeout=0.2)[0]["data"]
    assert created == {"type": "created", "num_blocks_per_cache_level": [4, 0]}  # ceil(100 / 32)


def updated_events_carry_both_diffs(trt):
    """The double emits no ``updated`` event; 1.2's serializer would need both diffs to write one."""
    llm = _llm(trt)
    _submit(llm).result()
    from tensorrt_llm.llmapi import KvCacheRetentionConfig

    rng = KvCacheRetentionConfig.TokenRangeRetentionConfig(0, 40, 90)
    llm.generate_async([5] * 40, sampling_params=llm_sampling(llm),
                       kv_cache_retention_config=KvCacheRetentionConfig([rng])).result()
    kinds = {e["data"]["type"] for e in llm.get_kv_cache_events(timeout=0.2)}
    assert "updated" not in kinds


def the_last_prompt_token_is_never_reused(trt):
    llm = _llm(trt)
    _submit(llm, tokens=(5,) * 64).result()
    out = _submit(llm, tokens=(5,) * 64).result()
    assert out.outputs[0].request_perf_metrics.kv_cache_metrics.num_reused_blocks == 1  # not 2


def partial_reuse_hands_the_connector_a_match_inside_a_block(trt, monkeypatch):
    import tempfile

    from workbench.cells.trtllm import connector as trtllm_connector

    cfg = trt.llmapi.llm_args.KvCacheConnectorConfig(connector_module="workbench.cells.trtllm.connector",
                                                     connector_scheduler_class=trtllm_connector.SCHEDULER_CLASS,
                                                     connector_worker_class=trtllm_connector.WORKER_CLASS)
    head = list(range(10, 74))  # two full blocks of 32
    for partial, want in ((True, [0, 64 + 10, 63]), (False, [0, 64, 32])):
        log = Path(tempfile.mkdtemp()) / "connector.jsonl"
        monkeypatch.setenv(trtllm_connector.LOG_ENV, str(log))
        llm = _llm(trt, kv={"enable_partial_reuse": partial}, kv_connector_config=cfg)
        _submit(llm, tokens=head + [7] * 40).result()
        _submit(llm, tokens=head + [7] * 10 + [8] * 30).result()  # 10 tokens into the stored third block
        _submit(llm, tokens=head).result()  # k·B tokens: (k−1) full blocks and B−1 tokens of the last
        matched = [c["args"]["num_computed_tokens"] for c in trtllm_connector.read_log(log)
                   if c["method"] == "get_num_new_matched_tokens"]
        assert matched == want, (partial, matched)


@dataclasses.dataclass(frozen=True)
class Behaviour:
    name: str
    source: str  # the TensorRT-LLM file (1.2 line) the double mirrors
    check: Callable


BEHAVIOURS = (
    Behaviour("get_kv_cache_events asserts before the first generate_async",
              "tensorrt_llm/executor/executor.py (GenerationExecutor.get_kv_events, "
              "_maybe_initialize_iteration_results)", kv_events_assert_before_the_first_request),
    Behaviour("get_stats returns [] before the first generate_async",
              "tensorrt_llm/executor/executor.py (GenerationExecutor.get_stats)", stats_are_empty_before_the_first_request),
    Behaviour("created (and every event) reaches the caller only after the first request starts the dispatch",
              "tensorrt_llm/executor/proxy.py (_start_dispatch_threads in submit); tensorrt_llm/executor/worker.py "
              "(submit -> start)", created_arrives_only_after_the_first_request),
    Behaviour("events and stats are lists of dicts (json.loads per entry)",
              "tensorrt_llm/executor/result.py (IterationResult.get_results)", events_and_stats_are_dicts),
    Behaviour("after one dry read, get_results returns [] until the next submit",
              "tensorrt_llm/executor/result.py (IterationResult.get_results, mark_undone)",
              a_dry_read_latches_until_the_next_submit),
    Behaviour("reading drains the engine's buffer",
              "cpp/tensorrt_llm/batch_manager/kvCacheEventManager.cpp (getEvents: std::exchange); "
              "tests/unittest/llmapi/test_llm_kv_cache_events.py", reading_drains),
    Behaviour("a None event reaches the caller as null, or {} inside a list",
              "tensorrt_llm/_utils.py (KVCacheEventSerializer.serialize, to_json_str); "
              "tensorrt_llm/executor/worker.py (one serialize call per event)", a_none_event_carries_nothing),
    Behaviour("no iteration stats without enable_iter_perf_stats",
              "tensorrt_llm/_torch/pyexecutor/py_executor.py (get_latest_iteration_stats)",
              no_stats_without_enable_iter_perf_stats),
    Behaviour("an unknown LLM keyword raises ValueError('LLM got invalid argument: …')",
              "tensorrt_llm/llmapi/llm.py (BaseLLM.__init__)", unknown_llm_keywords_raise_value_error),
    Behaviour("generate_async after shutdown raises RuntimeError('LLM is shutting down')",
              "tensorrt_llm/llmapi/llm.py (BaseLLM.generate_async)", generate_async_refuses_after_shutdown),
    Behaviour("primary pool = ceil(min(memory tokens, max_tokens) / tokens_per_block) blocks",
              "cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp (calculateMaxNumBlocks)",
              the_pool_is_the_smaller_of_memory_and_max_tokens),
    Behaviour("no updated event with a None diff (priority-only updates are not modelled)",
              "tensorrt_llm/_utils.py (KVCacheEventSerializer._updated_to_json)", updated_events_carry_both_diffs),
    Behaviour("the last prompt token is never reused (addSequence matches inputLength - 1 tokens)",
              "cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp (KVCacheManager::addSequence)",
              the_last_prompt_token_is_never_reused),
    Behaviour("with enable_partial_reuse (default) the device-matched length handed to the connector "
              "(prepopulatedPromptLen) adds the leading tokens of the next block a stored block shares: not "
              "block-aligned", "cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp (WindowBlockManager::addSequence, "
              "loadOrAllocateBlocks, KVCacheBlock::findMatchingBlock); cpp/include/tensorrt_llm/batch_manager/"
              "kvCacheManager.h (BlockKey::partialMatch)", partial_reuse_hands_the_connector_a_match_inside_a_block),
)


@pytest.mark.parametrize("behaviour", BEHAVIOURS, ids=[b.check.__name__ for b in BEHAVIOURS])
def test_the_double_models_1_2(behaviour, fake_trt, monkeypatch):
    params = behaviour.check.__code__.co_varnames[:behaviour.check.__code__.co_argcount]
    behaviour.check(fake_trt, monkeypatch) if "monkeypatch" in params else behaviour.check(fake_trt)


def test_every_behaviour_names_its_source():
    assert all(b.source.startswith(("tensorrt_llm/", "cpp/", "tests/")) for b in BEHAVIOURS)
    assert len({b.check for b in BEHAVIOURS}) == len(BEHAVIOURS)


def test_no_double_outside_tests():
    for path in (ROOT / "src").rglob("*.py"):
        text = path.read_text()
        assert "fake_tensorrt_llm" not in text and "doubles" not in text, path


def test_the_double_says_what_it_mirrors():
    """Every module of the double names the TensorRT-LLM file or module it stands for."""
    for path in (ROOT / "tests" / "doubles" / "fake_tensorrt_llm").rglob("*.py"):
        text = path.read_text()
        if text.strip() and path.name != "__init__.py":
            assert "tensorrt_llm" in text.split('"""')[1], path
