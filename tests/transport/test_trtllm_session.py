"""TensorRT-LLM's session adapter through the daemon, against the double of the tensorrt_llm 1.2 LLM API
(``tests/doubles/fake_tensorrt_llm``): the mapping rows as calls into ``LLM``, with their arguments. The double stands
for the engine's API only; nothing here is a finding (the rows are settled on a GPU: docs/transport.md)."""

from __future__ import annotations

import pytest
from doubles.trtllm_fixture import fake_trt, model_dir  # noqa: F401 - the fixture

from workbench.transport import errors as e
from workbench.transport.contract import (Config, DecodeConfig, EmbedRequest, OpenSessionRequest, PrefixInput,
                                          SuffixInput)
from workbench.transport.daemon import Daemon
from workbench.transport.manifest import ManifestIdentity, cache_salt, chat_turn


@pytest.fixture
def daemon(fake_trt, tmp_path):
    with Daemon("trtllm", str(model_dir(tmp_path)), options={"context_tokens": 256}) as d:
        yield d, fake_trt


def _generate(fake_trt):
    llm = fake_trt.llmapi.llm.LLM.instances[-1]
    return [kw for n, kw in llm.calls if n == "generate_async"]


def test_the_rows_as_tensorrt_llm_calls(daemon):
    d, fake_trt = daemon
    client = d.client()
    assert client.health().backend == "llama"
    sess = client.open_session(OpenSessionRequest(config=Config(num_ctx=128)))
    s, v, m = chat_turn([("system", "be brief"), ("user", "hello there")], 1, ManifestIdentity(backend="x", add_bos=True))
    before = len(_generate(fake_trt))
    st = sess.ensure_prefix(PrefixInput(text=s, manifest=m))
    warm = _generate(fake_trt)[before:]
    assert len(warm) == 1 and warm[0]["sampling_params"].max_tokens == 1  # the warm-up, generate_async(max_tokens=1)
    assert warm[0]["cache_salt"] == cache_salt(m)  # manifest digest ⊕ adapter digests (none), never the caller's
    assert warm[0]["kv_cache_retention_config"] is not None  # KvCacheRetentionConfig over the prefix
    assert st.prefix_tokens == len(warm[0]["inputs"])
    ss = sess.prefill_suffix(SuffixInput(text=v, manifest=m))
    assert len(_generate(fake_trt)) == before + 1  # deferred: no engine call
    report = sess.explain_context()
    assert (report.deferred_prefill_calls, report.deferred_prefill_tokens) == (1, ss.suffix_tokens)
    caps = report.residency.capabilities
    assert (caps.remove_tail, caps.remove_middle, caps.position_shift, caps.recompute_range) == (False, False, False, True)
    chunks = list(sess.decode(DecodeConfig(max_tokens=3, temperature=0.0)))
    streamed = _generate(fake_trt)[-1]
    assert streamed["streaming"] is True and len(streamed["inputs"]) == st.prefix_tokens + ss.suffix_tokens
    assert all(c.error is None for c in chunks) and sess.explain_context().decode_prompt_tokens == ss.suffix_tokens
    with pytest.raises(e.ErrUnsupportedFeature):
        client.embed(EmbedRequest(text="x"))
    small = client.open_session(OpenSessionRequest(config=Config(num_ctx=4)))
    n = len(_generate(fake_trt))
    with pytest.raises(e.ContextOverflowError):
        small.ensure_prefix(PrefixInput(text=s, manifest=m))
    assert len(_generate(fake_trt)) == n  # refused before dispatch
