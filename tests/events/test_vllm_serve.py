"""The vLLM event source from a real ``vllm serve`` (started by workbench.serve): SUB on the publisher's ipc
endpoint, the replay ROUTER, hash parity over HTTP, and the inventory against ``cached_tokens``."""

from __future__ import annotations

import httpx
import pytest

from conftest import require_engine
from workbench import models, serve
from workbench.events.consumer import Consumer
from workbench.cells.vllm.hashing import VllmHasher
from workbench.events.inventory import Inventory

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def test_events_from_vllm_serve_replay_and_predict_cached_tokens(tmp_path):
    require_engine("vllm")
    from workbench.cells.vllm import events as vllm_events
    from workbench.cells.vllm.served import launch

    hf = models.hf_directory(models.resolve("synthetic:cpu"))
    pub, rep = f"ipc://{tmp_path}/pub", f"ipc://{tmp_path}/replay"
    per_token = models.hf_geometry(models.hf_config(hf))[0].bytes_per_token  # a byte budget, as the served cell sets
    req = serve.ServerRequest("vllm-server", str(hf), context_tokens=128, options={
        "block_size": 32, "num_gpu_blocks": 16, "kv_cache_memory_bytes": 16 * 32 * per_token,
        "dtype": "float32", "hash_seed": "7", "kv_events_endpoint": pub,
        "kv_events_config": {"replay_endpoint": rep, "buffer_steps": 100}})
    with serve.start(req, tmp_path / "logs", build=launch) as server:
        sub = vllm_events.Subscriber(connect=pub, replay=rep)
        consumer = Consumer(sub, Inventory(VllmHasher(32, "sha256", "7")))
        prompt = list(range(20, 120))  # 3 full blocks of 32
        model = httpx.get(f"{server.url}/v1/models").json()["data"][0]["id"]
        rows = []
        for _ in range(2):
            consumer.pump(0.3)
            predicted = consumer.inventory.predict(prompt)
            r = httpx.post(f"{server.url}/v1/completions", timeout=120, json={
                "model": model, "prompt": prompt, "max_tokens": 1, "temperature": 0.0})
            rows.append((predicted, r.json()["usage"]["prompt_tokens_details"]["cached_tokens"]))
        consumer.pump(0.5)
        assert rows == [(0, 0), (96, 96)]
        stored = [h for e in sub.replay(0) if e.kind == "stored" for h in e.block_hashes]
        assert stored == VllmHasher(32, "sha256", "7").chain(prompt)  # replay from 0 returns the first batch
        assert stored != VllmHasher(32, "sha256", "0").chain(prompt)
        consumer.close()
