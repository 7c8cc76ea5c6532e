"""What the TensorRT-LLM double models of 1.2 and 1.4, one behaviour per row, each with the file it mirrors.

The cell relies on every row. When a release changes one, update its row (and the double) here:
the tables are the one place that says what the double claims about TensorRT-LLM. :data:`BEHAVIOURS` was
read at 1.2-era versions of NVIDIA/TensorRT-LLM (see ``/work/shared/reference`` facts §0 for the markers) and
runs on the 1.2.1 profile; :data:`BEHAVIOURS_1_4` holds what the 1.4 line does differently (release v1.4.0rc1 and
the 1.4-era files each row names; ``tensorrt-llm-after-1.2.md`` §1b) and runs on the 1.4.0rc1 profile. The double
never produces a finding that settles anything (its fingerprint names it: ``settle``'s "double" row).
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from pathlib import Path
from typing import Callable

import pytest
from doubles.trtllm_fixture import fake_trt, fake_trt14, model_dir  # noqa: F401 - the fixtures

ROOT = Path(__file__).resolve().parents[2]
_MODELS = tempfile.TemporaryDirectory(prefix="trtllm-double-")  # config.json: the engine sizes its pool from it


def _llm(trt, **kw):
    kv = trt.llmapi.KvCacheConfig(**{"max_tokens": 256, "event_buffer_max_size": 64} | kw.pop("kv", {}))
    model = Path(_MODELS.name) / "tiny-llama"
    if not model.exists():
        model_dir(Path(_MODELS.name), tokenizer=False)
    return trt.LLM(model=str(model), skip_tokenizer_init=True, kv_cache_config=kv,
                   enable_iter_perf_stats=kw.pop("stats", True), **kw)


def _submit(llm, tokens=(5,) * 40, retention=None, **kw):
    return llm.generate_async(list(tokens), sampling_params=llm_sampling(llm, **kw),
                              kv_cache_retention_config=retention)


def _pin(trt, n_tokens, priority=100, duration_ms=None):
    from datetime import timedelta

    cfg = trt.llmapi.KvCacheRetentionConfig
    duration = None if duration_ms is None else timedelta(milliseconds=duration_ms)
    return cfg([cfg.TokenRangeRetentionConfig(0, n_tokens, priority, duration)])


def _kinds(llm):
    return [e["data"]["type"] for e in llm.get_kv_cache_events(timeout=0.2)]


def _fill_and_ask(trt, llm, pinned, retention, fillers=6):
    """Pin ``pinned`` under ``retention``, push default-priority fillers through a pool of 8 blocks, ask again:
    the prefix's reused blocks."""
    _submit(llm, pinned, retention=retention).result()
    for k in range(fillers):
        _submit(llm, [20 + k] * 64 + [3]).result()
    return _submit(llm, pinned, retention=retention).result().outputs[0].request_perf_metrics.kv_cache_metrics.num_reused_blocks


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


def iteration_stats_count_computed_context_tokens_and_cumulative_blocks(trt):
    llm = _llm(trt)
    _submit(llm, max_tokens=3).result()
    first = llm.get_stats(timeout=0.2)
    assert len(first) == 3  # the context step, then one iteration per further token
    ctx = [s["inflightBatchingStats"]["numCtxTokens"] for s in first]
    assert ctx == [40, 0, 0] and [s["numCompletedRequests"] for s in first] == [0, 0, 1]
    out = _submit(llm).result()  # the same 40 tokens: one block of 32 reused
    again = llm.get_stats(timeout=0.2)
    reused = out.outputs[0].request_perf_metrics.kv_cache_metrics.num_reused_blocks
    assert reused == 1 and again[0]["inflightBatchingStats"]["numCtxTokens"] == 40 - 32
    kv0, kv1 = first[-1]["kvCacheStats"], again[-1]["kvCacheStats"]
    assert kv1["reusedBlocks"] - kv0["reusedBlocks"] == reused  # cumulative: the request's count is their delta


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


def a_priority_100_prefix_outlives_default_fillers_until_its_duration_passes(trt):
    """V1 (1.2's one manager): the pinned prefix survives default-priority pressure; once its duration_ms has
    passed it counts at the default priority and is evicted as LRU would."""
    prefix = list(range(10, 75))  # two full blocks reusable
    kept = _fill_and_ask(trt, _llm(trt, kv={"max_tokens": 8 * 32}), prefix, _pin(trt, 65))
    assert kept == 2
    expired = _llm(trt, kv={"max_tokens": 8 * 32})
    _submit(expired, prefix, retention=_pin(trt, 65, duration_ms=20)).result()
    time.sleep(0.05)
    for k in range(6):
        _submit(expired, [20 + k] * 64 + [3]).result()
    assert _submit(expired, prefix).result().outputs[0].request_perf_metrics.kv_cache_metrics.num_reused_blocks == 0


# --------------------------------------------------------------------------------- the 1.4 rows


def v2_is_the_default_kv_manager(trt):
    assert trt.llmapi.KvCacheConfig().use_kv_cache_manager_v2 is True
    assert _llm(trt).v2 and not _llm(trt, kv={"use_kv_cache_manager_v2": False}).v2


def v2_ignores_retention_and_v1_pinned_honours_it(trt):
    prefix = list(range(10, 75))
    v2 = _fill_and_ask(trt, _llm(trt, kv={"max_tokens": 8 * 32}), prefix, _pin(trt, 65))
    v1 = _fill_and_ask(trt, _llm(trt, kv={"max_tokens": 8 * 32, "use_kv_cache_manager_v2": False}), prefix, _pin(trt, 65))
    assert (v2, v1) == (0, 2)  # V2: evicted like the fillers; V1: held


def every_event_states_its_hash_algo(trt):
    for kv, algo in (({}, "v2_sha256"), ({"use_kv_cache_manager_v2": False}, "v1_block_key")):
        llm = _llm(trt, kv=kv)
        _submit(llm).result()
        events = llm.get_kv_cache_events(timeout=0.2)
        assert events and {e["hash_algo"] for e in events} == {algo}
        assert ("layer_group_id" in events[0]) == (algo == "v2_sha256")


def v1_and_v2_hash_the_same_block_differently(trt):
    hashes = []
    for kv in ({}, {"use_kv_cache_manager_v2": False}):
        llm = _llm(trt, kv=kv)
        _submit(llm).result()
        hashes.append([b["block_hash"] for e in llm.get_kv_cache_events(timeout=0.2) if e["data"]["type"] == "stored"
                       for b in e["data"]["blocks"]])
    assert hashes[0] and hashes[1] and not set(hashes[0]) & set(hashes[1])


def the_result_carries_exact_cached_tokens_beside_the_blocks(trt):
    llm = _llm(trt, kv={"use_kv_cache_manager_v2": False})
    head = list(range(10, 74))
    _submit(llm, head + [7] * 40).result()
    out = _submit(llm, head + [7] * 10 + [8] * 30).result()  # 10 tokens into the stored third block
    assert out.cached_tokens == 64 + 10  # exact: the partial match counts
    assert out.outputs[0].request_perf_metrics.kv_cache_metrics.num_reused_blocks == 2  # blocks: whole ones only


def the_connector_bases_moved_under_connectors(trt):
    import importlib

    new = importlib.import_module("tensorrt_llm._torch.pyexecutor.connectors.kv_cache_connector")
    assert new.KvCacheConnectorWorker and new.KvCacheConnectorScheduler
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("tensorrt_llm._torch.pyexecutor.kv_cache_connector")


def kv_cache_config_takes_the_push_path(trt):
    push = trt.llmapi.KVEventsConfig(enable_kv_cache_events=True, endpoint="tcp://127.0.0.1:5557")
    assert trt.llmapi.KvCacheConfig(kv_events_config=push).kv_events_config.publisher == "zmq"


def _blocks_of(events):
    """The drained events' stored blocks (their tokens → hash) and the hashes removed, in order."""
    stored = {tuple(t["token_id"] for t in b["tokens"]): b["block_hash"]
              for e in events if e["data"]["type"] == "stored" for b in e["data"]["blocks"]}
    removed = [h for e in events if e["data"]["type"] == "removed" for h in e["data"]["block_hashes"]]
    return stored, removed


def a_request_releases_its_last_block_first_so_the_leaf_goes_before_the_head(trt):
    llm = _llm(trt, kv={"max_tokens": 96})  # 3 blocks
    chain = list(range(10, 106)) + [3]  # 3 full blocks
    _submit(llm, chain).result()
    _submit(llm, [120] * 32 + [3]).result()  # one new block: one of the chain's goes
    stored, removed = _blocks_of(llm.get_kv_cache_events(timeout=0.2))
    assert removed == [stored[tuple(chain[64:96])]]  # its leaf, not its head


def an_ancestor_evicted_first_leaves_its_descendants_in_the_pool_until_their_own_reclaim(trt, monkeypatch):
    head = list(range(10, 74))  # two blocks
    for bug in (False, True):
        monkeypatch.setattr(trt.llmapi.llm.LLM, "detach_without_removed", bug)
        llm = _llm(trt, kv={"max_tokens": 128})  # 4 blocks
        high, low = head + [80] * 32 + [3], head + [90] * 32 + [3]
        _submit(llm, high, retention=_pin(trt, len(high), 90)).result()
        _submit(llm, low, retention=_pin(trt, len(low), 10)).result()  # claims the head at 10: below high's suffix
        for k in range(3):  # three new default blocks evict the priority-10 ones: low's suffix, then the head, tail first
            _submit(llm, [100 + k] * 32 + [3]).result()
        stored, removed = _blocks_of(llm.get_kv_cache_events(timeout=0.2))
        suffix = stored[tuple([80] * 32)]
        assert {stored[tuple(head[:32])], stored[tuple(head[32:])]} <= set(removed)  # both ancestors went, announced
        assert suffix in llm.stored and len(llm.stored) == llm.capacity_blocks  # detached, still occupying the pool
        _submit(llm, [120] * 128 + [3], retention=_pin(trt, 129, 100)).result()  # four new blocks: all others go
        _, removed = _blocks_of(llm.get_kv_cache_events(timeout=0.2))
        assert suffix not in llm.stored and (suffix in removed) is (not bug)  # PR #16335: reclaimed unannounced


@dataclasses.dataclass(frozen=True)
class Behaviour:
    name: str
    source: str  # the TensorRT-LLM file (1.2 line) the double mirrors
    check: Callable
    unverified: str = ""  # what of the row the reference does not say, or marks UNVERIFIED (empty: all of it said)


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
    Behaviour("one iteration stats entry per engine iteration: numCtxTokens counts the context tokens computed "
              "(reused ones not), numCompletedRequests the requests finished, and kvCacheStats' block counters are "
              "cumulative over the KV manager's life", "tensorrt_llm/_torch/pyexecutor/py_executor.py "
              "(_process_iter_stats, _update_iter_stats: kv_cache_manager.get_kv_cache_stats(), "
              "model_engine.iter_states['num_ctx_tokens']); tensorrt_llm/_torch/pyexecutor/model_engine.py "
              "(_prepare_tp_inputs: prompt tokens from context_current_position); "
              "cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp (getKvCacheStats; addSequence's per-request deltas)",
              iteration_stats_count_computed_context_tokens_and_cumulative_blocks),
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
    Behaviour("a retention priority holds its blocks against lower priorities; past its duration_ms it counts at the "
              "default priority (35) and is evicted as LRU", "cpp/tensorrt_llm/batch_manager/evictionPolicy.cpp "
              "(LRUEvictionPolicy::refresh, getFreeBlock); cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp "
              "(loadOrAllocateBlocks, claimBlock)", a_priority_100_prefix_outlives_default_fillers_until_its_duration_passes),
    Behaviour("with enable_partial_reuse (default) the device-matched length handed to the connector "
              "(prepopulatedPromptLen) adds the leading tokens of the next block a stored block shares: not "
              "block-aligned", "cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp (WindowBlockManager::addSequence, "
              "loadOrAllocateBlocks, KVCacheBlock::findMatchingBlock); cpp/include/tensorrt_llm/batch_manager/"
              "kvCacheManager.h (BlockKey::partialMatch)", partial_reuse_hands_the_connector_a_match_inside_a_block),
    Behaviour("a finished request's blocks join the free queue last block first: under one priority a chain's leaf "
              "is evicted before its head", "cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp "
              "(WindowBlockManager::releaseBlocks walks allocatedBlocks from rbegin()); "
              "cpp/tensorrt_llm/batch_manager/evictionPolicy.cpp (LRUEvictionPolicy::releaseBlock appends, "
              "getFreeBlock takes the front of the lowest priority)",
              a_request_releases_its_last_block_first_so_the_leaf_goes_before_the_head),
    Behaviour("a reused block takes the claiming request's priority, so an ancestor can go before its descendants; "
              "they stay in the pool, occupying it, until their own reclaim, which announces them (removed) unless "
              "detach_without_removed reproduces PR #16335", "cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp "
              "(WindowBlockManager::loadOrAllocateBlocks, claimBlock; getFreeBlock guards enqueueRemovedEvent with "
              "blockInRadixTree, which checks getPrevBlock() != nullptr: PR #16335, open)",
              an_ancestor_evicted_first_leaves_its_descendants_in_the_pool_until_their_own_reclaim,
              unverified="the descendants staying until their own reclaim is PR #16335's account of the file it "
                         "fixes; 1.2-era kvCacheManager.cpp frees them from the tree at the ancestor's eviction "
                         "(freeChildren), so on 1.2.1 which wins is not read from its source"),
)


BEHAVIOURS_1_4 = (
    Behaviour("KvCacheConfig() picks the V2 KV manager (use_kv_cache_manager_v2 defaults to True)",
              "tensorrt_llm/llmapi/llm_args.py (KvCacheConfig.use_kv_cache_manager_v2; release v1.4.0rc1: "
              "'Default to KV cache manager V2 ... (BREAKING) #17495')", v2_is_the_default_kv_manager,
              unverified="the default from 1.4.0rc1 on, by its release page; which one 1.4.0rc4 ships is UNVERIFIED "
                         "in the reference (tensorrt-llm-after-1.2.md §1b)"),
    Behaviour("V2 ignores KvCacheRetentionConfig (a priority-100 prefix goes as default blocks do); with "
              "use_kv_cache_manager_v2=False the V1 manager honours it",
              "tensorrt_llm/runtime/kv_cache_manager_v2/ (no per-request retention: issue #16251); "
              "tests/integration/defs/llmapi/test_llm_api_connector.py (test_connector_priorities: KNOWN GAP)",
              v2_ignores_retention_and_v1_pinned_honours_it),
    Behaviour("every KV event states hash_algo: v1_block_key under V1, v2_sha256 (and layer_group_id) under V2",
              "tensorrt_llm/_utils.py (KVCacheEventSerializer; PR #13589); "
              "tensorrt_llm/runtime/kv_cache_manager_v2/ (V2's events)", every_event_states_its_hash_algo,
              unverified="the reference has hash_algo on V2's events only (PR #13589): V1's v1_block_key on 1.4 is not "
                         "said; nor whether V2's events name v2_sha256 or v2_sha256_64 (event-plane.md §A3), and the "
                         "double's V2 hashes are integers under the name v2_sha256"),
    Behaviour("V2's block hash is not V1's: one block, two hashes",
              "tensorrt_llm/runtime/kv_cache_manager_v2/ (SHA-256 block keys; PR #13589: consumers hash with the "
              "advertised algorithm)", v1_and_v2_hash_the_same_block_differently),
    Behaviour("the request's result carries cached_tokens, exact (a partial match counted), beside the perf "
              "metrics' whole blocks", "tensorrt_llm/executor/result.py (cached_tokens; ai-dynamo/dynamo#13567, "
              "checked on 1.3.0rc23)", the_result_carries_exact_cached_tokens_beside_the_blocks),
    Behaviour("the KV connector bases live in _torch/pyexecutor/connectors/; the 1.2 module is gone",
              "tensorrt_llm/_torch/pyexecutor/connectors/kv_cache_connector.py",
              the_connector_bases_moved_under_connectors),
    Behaviour("KvCacheConfig takes kv_events_config=KVEventsConfig(publisher='zmq', endpoint=…), exported from "
              "tensorrt_llm.llmapi", "tensorrt_llm/llmapi/llm_args.py (KVEventsConfig; PR #17023)",
              kv_cache_config_takes_the_push_path),
)


def _check(behaviour, trt, monkeypatch):
    params = behaviour.check.__code__.co_varnames[:behaviour.check.__code__.co_argcount]
    behaviour.check(trt, monkeypatch) if "monkeypatch" in params else behaviour.check(trt)


@pytest.mark.parametrize("behaviour", BEHAVIOURS, ids=[b.check.__name__ for b in BEHAVIOURS])
def test_the_double_models_1_2(behaviour, fake_trt, monkeypatch):
    _check(behaviour, fake_trt, monkeypatch)


@pytest.mark.parametrize("behaviour", BEHAVIOURS_1_4, ids=[b.check.__name__ for b in BEHAVIOURS_1_4])
def test_the_double_models_1_4(behaviour, fake_trt14, monkeypatch):
    _check(behaviour, fake_trt14, monkeypatch)


@pytest.mark.parametrize("behaviour", BEHAVIOURS_1_4, ids=[b.check.__name__ for b in BEHAVIOURS_1_4])
def test_each_1_4_row_is_a_difference_the_1_2_profile_does_not_show(behaviour, fake_trt, monkeypatch):
    """A 1.4 row that also held on the 1.2 profile would be no difference: each fails there."""
    with pytest.raises((AssertionError, AttributeError, KeyError, ModuleNotFoundError, TypeError)):
        _check(behaviour, fake_trt, monkeypatch)


def test_a_row_the_reference_does_not_back_says_so():
    """The reference marks 1.4.0rc4's default KV manager UNVERIFIED and has hash_algo on V2's events only; the
    ancestor-first path is PR #16335's account, not 1.2.1's read source. Each such row says what is unverified."""
    marked = {b.check.__name__: b.unverified for b in (*BEHAVIOURS, *BEHAVIOURS_1_4) if b.unverified}
    assert set(marked) == {"v2_is_the_default_kv_manager", "every_event_states_its_hash_algo",
                           "an_ancestor_evicted_first_leaves_its_descendants_in_the_pool_until_their_own_reclaim"}
    assert "1.4.0rc4" in marked["v2_is_the_default_kv_manager"] and "v2_sha256_64" in marked[
        "every_event_states_its_hash_algo"]


def test_every_behaviour_names_its_source():
    for table in (BEHAVIOURS, BEHAVIOURS_1_4):
        assert all(b.source.startswith(("tensorrt_llm/", "cpp/", "tests/")) for b in table)
        assert len({b.check for b in table}) == len(table)
    assert not {b.check for b in BEHAVIOURS} & {b.check for b in BEHAVIOURS_1_4}


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
