"""``tensorrt_llm.LLM`` (1.2 and 1.4 lines) as a recording toy engine.

Signatures are the documented ones (``tensorrt_llm/llmapi/llm.py``); every call is appended to
``self.calls`` as ``(name, arguments)``. What the LLM API does around the engine is modelled as
1.2 does it, each with its source file (the table in ``tests/cells/test_trtllm_double.py``):

* ``LLM(**kwargs)`` rejects an unknown keyword with ``ValueError("LLM got invalid argument: …")``
  (``BaseLLM.__init__``, ``tensorrt_llm/llmapi/llm.py``);
* KV events and iteration stats reach the caller only through the executor's reporting queues
  (``executor/executor.py``): nothing before the first request, ``get_kv_cache_events`` asserts
  there, ``get_stats`` returns ``[]``; entries are dicts; reads latch (``executor/result.py``);
* ``generate_async`` raises ``RuntimeError("LLM is shutting down")`` after ``shutdown`` and
  ``ValueError`` for a prompt over ``max_num_tokens`` (``llmapi/llm.py``).

The engine itself is a toy with the documented observable shapes:

* reuse: full blocks of ``prompt[:-1]`` whose hash chain (salt, LoRA id, parent, tokens) is stored
  are reused; ``kv_cache_metrics`` counts blocks; the V1 hash is TensorRT-LLM's own block key (``_block_key.py``);
* partial reuse (``enable_partial_reuse``, on by default): the device-matched length handed to a KV connector
  (``prepopulatedPromptLen``) adds, after the matched full blocks, the leading tokens the next block of
  ``prompt[:-1]`` shares with a stored block of the same parent, salt and LoRA id (``loadOrAllocateBlocks`` and
  ``KVCacheBlock::findMatchingBlock`` in ``cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp``,
  ``BlockKey::partialMatch`` in ``cpp/include/tensorrt_llm/batch_manager/kvCacheManager.h``), so it need not be
  block-aligned. Not modelled: the partly filled last block 1.2 stores on release, and the +1 a partial match
  adds to ``num_reused_blocks``;
* KV events: ``created`` when the pool is allocated (at construction, so it waits in the engine
  until the first request starts the dispatch), ``stored`` for blocks new to the tree, ``removed``
  on eviction; priority-only ``updated`` events are not modelled (1.2's serializer reads ``.new_value``
  of a ``cache_level`` diff that a priority-only update leaves ``None``: ``_updated_to_json`` in
  ``tensorrt_llm/_utils.py``);
* eviction: the lowest priority first, then the front of the free queue. A finished request's blocks join the
  back of the queue last block first (``WindowBlockManager::releaseBlocks`` walks ``allocatedBlocks`` from
  ``rbegin()``, ``cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp``; ``LRUEvictionPolicy::releaseBlock``
  appends, ``getFreeBlock`` takes the front, ``cpp/tensorrt_llm/batch_manager/evictionPolicy.cpp``), so within one
  priority a chain's leaf goes before its ancestors; blocks a running request holds are not in the queue. An
  ancestor evicted before its descendants (a shared prefix that a later request claimed at a lower priority:
  ``claimBlock`` overwrites it) leaves them in the pool, occupying it, unreachable until the ancestor is stored
  again, until their own reclaim (as PR #16335 describes ``getFreeBlock`` on main);
* pool: ``ceil(min(memory_tokens, max_tokens) / tokens_per_block)`` blocks, ``memory_tokens``
  standing for what the free-memory fraction leaves (``calculateMaxNumBlocks``,
  ``cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp``);
* retention expiry: a block given a ``duration_ms`` falls back to the default priority (35) once it has passed
  (``LRUEvictionPolicy::refresh``, ``cpp/tensorrt_llm/batch_manager/evictionPolicy.cpp``);
* iteration stats (``enable_iter_perf_stats=True`` only): one entry per engine iteration, a request's context
  step then one per further generated token (``PyExecutor._process_iter_stats`` → ``_update_iter_stats``,
  ``tensorrt_llm/_torch/pyexecutor/py_executor.py``): ``numCompletedRequests`` on the iteration that finishes it;
  ``inflightBatchingStats.numCtxTokens``, the context tokens that iteration computed, reused ones not among them
  (``model_engine.iter_states['num_ctx_tokens']``: the prompt from ``context_current_position``, which block reuse
  advances, ``tensorrt_llm/_torch/pyexecutor/model_engine.py`` ``_prepare_tp_inputs``); ``kvCacheStats`` from the
  KV manager, its block counters cumulative over the manager's life (``KVCacheManager::getKvCacheStats``; a
  request's ``kv_cache_metrics`` are the deltas of the same counters around its ``addSequence``);
* tokens: deterministic from the prompt; text is one letter per token.

What 1.4 (``_profile.V14``) does differently, each a row of the table with its 1.4 source:

* the KV manager is V2 unless ``KvCacheConfig(use_kv_cache_manager_v2=False)``; V2 ignores
  ``KvCacheRetentionConfig`` (every block at the default priority, plain LRU: issue #16251), and hashes its blocks
  with SHA-256 (``v2_sha256``, PR #13589);
* every event names its ``hash_algo`` (``v1_block_key`` under V1, ``v2_sha256`` under V2; V2 also ``layer_group_id``):
  the reference has it on V2's events only (PR #13589); V1's ``hash_algo`` on 1.4 is UNVERIFIED there, and
  ``GET /server_info`` may also name ``v2_sha256_64``, which the double never emits;
* the request's result carries ``cached_tokens`` (exact, partial matches included; ``executor/result.py``).

``detach_without_removed`` (off by default, both lines) reproduces TensorRT-LLM PR #16335 (open): a block whose
parent's slot no longer holds a block (its ancestor was evicted first) is reclaimed, at its own eviction, with no
``removed`` event (``getFreeBlock`` guards ``enqueueRemovedEvent`` with ``WindowBlockManager::blockInRadixTree``,
which checks ``getPrevBlock() != nullptr``, ``cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp``), so a mirror
leaks it. Until then it occupies the pool like any block. Whether a given release carries the bug is what the
ledger probe answers on a GPU; the double only lets the probe's rule be seen to refute. (The ancestor-first path
differs across versions of ``kvCacheManager.cpp``: 1.2-era files free the descendants from the tree at the
ancestor's eviction, ``freeChildren``; the double follows the PR's account of the file it fixes.)
"""

import dataclasses
import hashlib
import importlib
import json
import math
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any, List, Optional

from .. import _profile
from .._block_key import block_key
from ..bindings import KvCacheMetrics, RequestPerfMetrics, TimingMetrics
from ..executor import CompletionOutput, GenerationExecutor, GenerationResult
from ..sampling_params import SamplingParams
from .llm_args import TorchLlmArgs

LAYERS = 2
BOS, EOS = 1, 2
DEFAULT_PRIORITY = 35  # kDefaultRetentionPriority (cpp/include/tensorrt_llm/executor/executor.h)
CONNECTOR_MODULE = ("_torch.pyexecutor.connectors.kv_cache_connector" if _profile.V14
                    else "_torch.pyexecutor.kv_cache_connector")


class FakeTokenizer:
    """The LLM's ``tokenizer`` (a ``TransformersTokenizer``): encode/decode/apply_chat_template."""

    bos_token_id = BOS
    eos_token_id = EOS

    def __init__(self):
        self.calls: List[tuple] = []

    def encode(self, text: str, add_special_tokens: bool = True) -> List[int]:
        self.calls.append(("encode", {"text": text, "add_special_tokens": add_special_tokens}))
        return ([BOS] if add_special_tokens else []) + [10 + ord(c) % 90 for c in text]

    def decode(self, token_ids: List[int]) -> str:
        return "".join(chr(ord("a") + t % 26) for t in token_ids)

    def apply_chat_template(self, conversation, tokenize: bool = True, add_generation_prompt: bool = False):
        self.calls.append(("apply_chat_template", {"conversation": list(conversation), "tokenize": tokenize,
                                                   "add_generation_prompt": add_generation_prompt}))
        text = "".join(f"<|{m['role']}|>{m['content']}\n" for m in conversation)
        text += "<|assistant|>" if add_generation_prompt else ""
        return [BOS] + self.encode(text, add_special_tokens=False) if tokenize else text


class _Request:
    """What the connector sees of an ``LlmRequest``."""

    def __init__(self, request_id: int, tokens: List[int]):
        self.request_id = request_id
        self._tokens = tokens

    def get_tokens(self, beam: int) -> List[int]:
        return list(self._tokens)


class _Tensor:
    """What the connector is handed of the primary pool: a ``torch.Tensor``'s shape, dtype and byte count."""

    _SIZES = {"bfloat16": 2, "float16": 2, "float32": 4}

    def __init__(self, shape, dtype):
        self.shape, self.dtype = shape, dtype

    def numel(self) -> int:
        return math.prod(self.shape)

    def element_size(self) -> int:
        return self._SIZES[self.dtype]


class LLM:
    instances: List["LLM"] = []
    memory_tokens: Optional[int] = None  # tokens the free-memory fraction leaves for KV (None: unlimited)
    detach_without_removed: bool = False  # PR #16335: descendants of an evicted block detach silently

    def __init__(self, model, tokenizer=None, tokenizer_mode="auto", skip_tokenizer_init=False,
                 trust_remote_code=False, tensor_parallel_size=1, dtype="auto", revision=None,
                 tokenizer_revision=None, **kwargs: Any) -> None:
        self.calls: List[tuple] = [("__init__", {"model": model, "skip_tokenizer_init": skip_tokenizer_init,
                                                 **kwargs})]
        valid = {f.name for f in dataclasses.fields(TorchLlmArgs)} | {"_mpi_session", "backend"}
        for key in kwargs:
            if key not in valid:
                raise ValueError(f"{self.__class__.__name__} got invalid argument: {key}")
        self.args = TorchLlmArgs(model=model, tokenizer=tokenizer, skip_tokenizer_init=skip_tokenizer_init, **kwargs)
        self._tokenizer = None if skip_tokenizer_init else FakeTokenizer()
        kv = self.args.kv_cache_config
        self.tpb = kv.tokens_per_block
        limits = [t for t in (kv.max_tokens, self.memory_tokens) if t]
        self.capacity_blocks = math.ceil(min(limits or [4096]) / self.tpb)
        self.v2 = bool(getattr(kv, "use_kv_cache_manager_v2", False))  # 1.4: the default; 1.2: a prototype flag
        self.hash_algo = "v2_sha256" if self.v2 else "v1_block_key"
        self.stored: dict = {}  # block hash -> [priority, place in the free queue, expires at (monotonic s) or None]
        self._released = 0  # the free queue's back: each released block takes the next place
        self._held: set = set()  # blocks the running request holds (not in the free queue)
        self.block_keys: dict = {}  # block hash -> (parent key, tokens): what partial matching compares
        self._lock = threading.Lock()
        self.engine_events: List[Optional[dict]] = []  # the C++ event manager's buffer
        self.engine_stats: List[dict] = []  # the executor's iteration stats buffer
        self.kv_counters = dict.fromkeys(("allocTotalBlocks", "allocNewBlocks", "reusedBlocks", "missedBlocks"), 0)
        self._executor = GenerationExecutor(self._take_events, self._take_stats)
        self.next_event = 0
        self.next_request = 0
        self.iteration = 0
        self.shut_down = False
        self._events_on = kv.enable_block_reuse and kv.event_buffer_max_size > 0
        self._emit({"type": "created", "num_blocks_per_cache_level": [self.capacity_blocks, 0]})
        self.scheduler = self.worker = None
        cfg = self.args.kv_connector_config
        if cfg is not None:  # built by name in the worker, as py_executor_creator does
            mod = importlib.import_module(cfg.connector_module)
            self.scheduler = getattr(mod, cfg.connector_scheduler_class)(self.args)
            self.worker = getattr(mod, cfg.connector_worker_class)(self.args)
            self.worker.register_kv_caches(_Tensor((self.capacity_blocks, LAYERS, 2, self._kv_width() * self.tpb),
                                                   "bfloat16"))
        LLM.instances.append(self)

    def _kv_width(self) -> int:
        """K (or V) elements per token of one layer, from the model's config.json: the primary pool is
        [blocks, layers, kv_factor 2, kv_heads · head_dim · tokens_per_block] (``get_unique_primary_pool``,
        ``tensorrt_llm/_torch/pyexecutor/resource_manager.py``; the shape from ``WindowBlockManager::allocatePools``)."""
        cfg = json.loads((Path(self.args.model) / "config.json").read_text())
        heads = cfg["num_attention_heads"]
        return cfg.get("num_key_value_heads", heads) * cfg.get("head_dim", cfg["hidden_size"] // heads)

    # ----------------------------------------------------------------- the documented API

    @property
    def tokenizer(self) -> Optional[FakeTokenizer]:
        return self._tokenizer

    def generate_async(self, inputs, sampling_params: Optional[SamplingParams] = None, lora_request=None,
                       prompt_adapter_request=None, streaming: bool = False, kv_cache_retention_config=None,
                       disaggregated_params=None, _postproc_params=None, scheduling_params=None,
                       cache_salt: Optional[str] = None) -> GenerationResult:
        self.calls.append(("generate_async", {
            "inputs": inputs, "sampling_params": sampling_params, "lora_request": lora_request,
            "streaming": streaming, "kv_cache_retention_config": kv_cache_retention_config,
            "cache_salt": cache_salt}))
        if self.shut_down:
            raise RuntimeError("LLM is shutting down")
        self._executor.on_submit()
        sp = sampling_params or SamplingParams()
        if sp.end_id is None and self.tokenizer is None:
            raise ValueError("tokenizer is required to reset end_id if it is None, or you can explicitly "
                             "specify the end_id for sampling_params")
        prompt = self.tokenizer.encode(inputs) if isinstance(inputs, str) else list(inputs)
        if len(prompt) > self.args.max_num_tokens:
            raise ValueError("The sum of prompt length and query length should not exceed max_num_tokens")
        request_id = self.next_request
        self.next_request += 1
        self.iteration += 1
        lora_id = lora_request.lora_int_id if lora_request is not None else None
        reused, block_ids, matched = self._admit(prompt, cache_salt, lora_id, kv_cache_retention_config, request_id)
        out = [10 + (sum(prompt) + 7 * k) % 90 for k in range(sp.max_tokens)]
        n_blocks = math.ceil(len(prompt) / self.tpb)
        perf = RequestPerfMetrics(
            timing_metrics=TimingMetrics(arrival_time=timedelta(seconds=10),
                                         first_scheduled_time=timedelta(seconds=10.001),
                                         first_token_time=timedelta(seconds=10.01),
                                         last_token_time=timedelta(seconds=10.01 + 0.002 * (len(out) - 1))),
            kv_cache_metrics=KvCacheMetrics(num_total_allocated_blocks=n_blocks - reused,
                                            num_new_allocated_blocks=n_blocks - reused, num_reused_blocks=reused,
                                            num_missed_blocks=n_blocks - reused,
                                            kv_cache_hit_rate=reused / n_blocks if reused else 0.0),
            first_iter=self.iteration, last_iter=self.iteration + len(out) - 1, iter=self.iteration + len(out) - 1)
        self.iteration += len(out) - 1
        for name, n in (("allocTotalBlocks", n_blocks - reused), ("allocNewBlocks", n_blocks - reused),
                        ("reusedBlocks", reused), ("missedBlocks", n_blocks - reused)):
            self.kv_counters[name] += n
        if self.args.enable_iter_perf_stats:
            self._iteration_stats(len(prompt) - matched, len(out))
        if self.scheduler is not None:
            self.scheduler.request_finished(_Request(request_id, prompt), block_ids)
        return GenerationResult(request_id, prompt, self._steps(out, sp, perf, streaming), prepopulated=matched)

    def _iteration_stats(self, ctx_tokens: int, steps: int) -> None:
        """The request's iterations: its context step, then one per further token; the last one completes it."""
        kv = {"maxNumBlocks": self.capacity_blocks, "freeNumBlocks": self.capacity_blocks - len(self.stored),
              "usedNumBlocks": len(self.stored), "tokensPerBlock": self.tpb, **self.kv_counters}
        first = self.iteration - steps + 1
        with self._lock:
            for k in range(steps):
                ctx = k == 0
                self.engine_stats.append({
                    "iter": first + k, "numActiveRequests": 1, "numCompletedRequests": int(k == steps - 1),
                    "inflightBatchingStats": {"numScheduledRequests": 1, "numContextRequests": int(ctx),
                                              "numGenRequests": int(not ctx), "numCtxTokens": ctx_tokens if ctx else 0},
                    "kvCacheStats": dict(kv)})

    def get_kv_cache_events(self, timeout: Optional[float] = 2) -> List[dict]:
        self.calls.append(("get_kv_cache_events", {"timeout": timeout}))
        return self._executor.get_kv_events(timeout=timeout)

    def get_stats(self, timeout: Optional[float] = 2) -> List[dict]:
        self.calls.append(("get_stats", {"timeout": timeout}))
        return self._executor.get_stats(timeout=timeout)

    def shutdown(self) -> None:
        self.calls.append(("shutdown", {}))
        self.shut_down = True
        self._executor.shutdown()

    # ----------------------------------------------------------------- the toy engine

    def _emit(self, data: dict) -> None:
        if self._events_on:
            event = {"event_id": self.next_event, "data": data, "window_size": self.args.max_seq_len}
            if _profile.V14:  # PR #13589: events state the algorithm their block hashes were made with
                event["hash_algo"] = self.hash_algo
                if self.v2:
                    event["layer_group_id"] = 0
            with self._lock:
                self.engine_events.append(event)
            self.next_event += 1

    def _take_events(self) -> list:
        with self._lock:
            events, self.engine_events = self.engine_events, []
        return events

    def _take_stats(self) -> List[dict]:
        with self._lock:
            stats, self.engine_stats = self.engine_stats, []
        return stats

    def _hash(self, salt, lora_id, parent, block) -> int:
        """V1: ``BlockKeyHasher::hash`` (``_block_key.py``); V2: SHA-256 of the key, 64 bits (its byte layout is the
        double's own: what a client must not do is recompute it as V1's)."""
        if self.v2:
            key = json.dumps([salt, lora_id, parent, list(block)]).encode()
            return int.from_bytes(hashlib.sha256(key).digest()[:8], "little")
        return block_key(block, parent or 0, salt, lora_id)

    def _admit(self, prompt, salt, lora_id, retention, request_id):
        """Match, allocate and store the prompt's full blocks; returns (reused blocks, block ids, matched tokens)."""
        full = [prompt[i:i + self.tpb] for i in range(0, len(prompt) - self.tpb + 1, self.tpb)]
        hashes, parent = [], None
        for block in full:
            parent = self._hash(salt, lora_id, parent, block)
            hashes.append(parent)
        reusable = (len(prompt) - 1) // self.tpb  # the last prompt token is never reused
        reused = 0
        while reused < reusable and hashes[reused] in self.stored:
            reused += 1
        block_ids = list(range(request_id * 1000, request_id * 1000 + math.ceil(len(prompt) / self.tpb)))
        root = ("root", salt, lora_id)  # a first block's parent: partialMatch compares salt and LoRA id too
        parents = [root] + hashes
        matched = reused * self.tpb + self._partial_match(parents[reused], prompt[reused * self.tpb:len(prompt) - 1])
        if self.scheduler is not None:
            req = _Request(request_id, prompt)
            self.scheduler.get_num_new_matched_tokens(req, matched)
            self.scheduler.update_state_after_alloc(req, block_ids)
            rd = importlib.import_module(f"{__package__.rsplit('.', 1)[0]}.{CONNECTOR_MODULE}")
            meta = self.scheduler.build_connector_meta(rd.SchedulerOutput(new_requests=[rd.RequestData(
                request_id, list(prompt), block_ids, matched, len(prompt) - matched)]))
            self.worker.bind_connector_meta(meta)
            self.worker.start_load_kv(None)
            for layer in range(LAYERS):
                self.worker.wait_for_layer_load(layer, None)
                self.worker.save_kv_layer(layer, None)
            self.worker.wait_for_save(None)
            self.worker.get_finished([], [])
        # V2 has no per-request retention (issue #16251): whatever the request names, its blocks sit at the default
        ranges = retention.token_range_retention_configs if retention is not None and not self.v2 else []
        now = time.monotonic()
        new_blocks, new_parent = [], None
        self._held = set(hashes[:reused])  # claimed: out of the free queue while the request runs
        for i, (h, block) in enumerate(zip(hashes, full)):
            start = i * self.tpb
            # the range covering the block's first token, else nullopt (getPerBlockRetentionPriorityDuration)
            rng = next((r for r in ranges if r.token_start <= start < (r.token_end or 1 << 62)), None)
            expires = now + rng.duration_ms.total_seconds() if rng is not None and rng.duration_ms else None
            if h in self.stored:
                self._held.add(h)
                if rng is not None:  # claimBlock overwrites only when the request gave a value, 35 included
                    self.stored[h][0] = rng.priority  # (kvCacheManager.cpp, WindowBlockManager::loadOrAllocateBlocks)
                    self.stored[h][2] = expires
                continue
            prio = DEFAULT_PRIORITY if rng is None else rng.priority  # a new context block: its range's, or the default
            self._evict_for_one()
            self.stored[h] = [prio, 0, expires]
            self._held.add(h)
            self.block_keys[h] = (parents[i], tuple(block))
            if not new_blocks:
                new_parent = hashes[i - 1] if i else None
            new_blocks.append({"type": "stored_block", "block_hash": h, "cache_level": 0, "priority": prio,
                               "tokens": [{"type": "unique_token", "token_id": t, "token_extra_id": 0} for t in block]})
        if new_blocks:
            self._emit({"type": "stored", "parent_hash": new_parent, "blocks": new_blocks})
        self._release(hashes)
        return reused, block_ids, matched

    def _release(self, hashes) -> None:
        """The finished request's blocks join the back of the free queue last block first (``releaseBlocks``
        iterates ``allocatedBlocks.rbegin()``): its leaf is evicted before its head."""
        for h in reversed(hashes):
            if h in self.stored:
                self._released += 1
                self.stored[h][1] = self._released
        self._held = set()

    def _partial_match(self, parent, tokens) -> int:
        """Leading tokens of the next block (at most one block of ``tokens``) that a stored child of ``parent``
        shares: the best ``partialMatch`` over its children, 0 with partial reuse off (``findMatchingBlock``)."""
        if not self.args.kv_cache_config.enable_partial_reuse:
            return 0
        block = tuple(tokens[:self.tpb])
        best = 0
        for par, stored in self.block_keys.values():
            if par == parent and stored != block:  # an exact match is a full-block match, counted already
                n = 0
                while n < min(len(stored), len(block)) and stored[n] == block[n]:
                    n += 1
                best = max(best, n)
        return best

    def _eviction_key(self, h, now: float) -> tuple:
        """Lowest priority first, then the free queue's front; a block past its ``duration_ms`` counts at the
        default priority (``LRUEvictionPolicy::refresh``)."""
        prio, place, expires = self.stored[h]
        return (DEFAULT_PRIORITY if expires is not None and expires <= now else prio), place

    def _in_tree(self, h) -> bool:
        """``blockInRadixTree`` as 1.2 to main have it: the parent's slot holds a block (a first block's parent is
        the root block), not whether ``h`` itself is in the tree."""
        parent = self.block_keys[h][0]
        return (isinstance(parent, tuple) and parent[0] == "root") or parent in self.stored

    def _evict_for_one(self) -> None:
        if len(self.stored) < self.capacity_blocks:
            return
        now = time.monotonic()
        free = [h for h in self.stored if h not in self._held] or list(self.stored)
        victim = min(free, key=lambda h: self._eviction_key(h, now))
        announced = not self.detach_without_removed or self._in_tree(victim)
        del self.stored[victim]
        self.block_keys.pop(victim, None)
        if announced:  # PR #16335: a block whose ancestor went first is reclaimed with no event
            self._emit({"type": "removed", "block_hashes": [victim]})

    def _steps(self, out, sp, perf, streaming) -> List[CompletionOutput]:
        text = self.tokenizer.decode(out) if (self.tokenizer is not None and sp.detokenize) else ""
        finish = "length"
        if sp.stop and any(s in text for s in ([sp.stop] if isinstance(sp.stop, str) else sp.stop)):
            finish = "stop"
        if not streaming:
            return [CompletionOutput(0, text, out, finish, perf)]
        steps = []
        for k in range(1, len(out) + 1):
            done = k == len(out)
            steps.append(CompletionOutput(0, text[:k] if text else "", out[:k], finish if done else None,
                                          perf if done else dataclasses.replace(perf), k - 1 if text else 0, k - 1))
        return steps
