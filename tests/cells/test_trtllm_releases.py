"""The TensorRT-LLM cell on each release profile (1.2.1 and 1.4.0rc1 of the double): the KV manager it ran, the hash
algorithm it read before any hash is recomputed, the reuse channels it prefers, and what doctor says of the profile.

Each 1.4 behaviour the cell meets is a row of ``tests/cells/test_trtllm_double.py`` (``BEHAVIOURS_1_4``) with its
source; here the cell is driven through them.
"""

from __future__ import annotations

from dataclasses import asdict

import pytest
from doubles.trtllm_fixture import fake_trt, fake_trt14, fake_trt_any, model_dir  # noqa: F401 - the fixtures

from workbench import cells, doctor
from workbench.cells.trtllm import cell as trtllm_cell
from workbench.cells.trtllm import guard as trtllm_guard
from workbench.probes import NotRunnable
from workbench.probes.events_common import hasher_for


def _init(trt):
    return trt.llmapi.llm.LLM.instances[-1].calls[0][1]


def test_the_cell_pins_v1_on_both_profiles_and_records_it(fake_trt_any, tmp_path):
    with trtllm_cell.TrtLlmCell.open(str(model_dir(tmp_path))) as c:
        assert _init(fake_trt_any)["kv_cache_config"].use_kv_cache_manager_v2 is False
        extra = c.describe().extra
    manager = extra["kv_cache_manager"]
    assert manager["used"] == "V1" and manager["how"].startswith("pinned")
    assert extra["release"] == fake_trt_any.__version__[:3]
    assert manager["release_default"] == {"1.2": "V1", "1.4": "V2"}[extra["release"]]
    assert extra["kv_cache_hash_algo"] == "v1_block_key"
    assert extra["test_double"].startswith("tests/doubles/fake_tensorrt_llm")


def test_on_1_4_the_hash_algo_is_read_from_the_events_and_v2_is_never_rehashed_as_v1(fake_trt14, tmp_path):
    with trtllm_cell.TrtLlmCell.open(str(model_dir(tmp_path))) as c:
        d = c.describe()
        assert (d.extra["kv_cache_hash_algo"], d.extra["kv_cache_hash_algo_source"]) == (
            "v1_block_key", "the engine's KV events (hash_algo)")
        hasher_for(d, seed=None)  # V1's key: the workbench recomputes it
    with trtllm_cell.TrtLlmCell.open(str(model_dir(tmp_path, "other")), kv_manager="default") as c:
        assert _init(fake_trt14)["kv_cache_config"].use_kv_cache_manager_v2 is True  # the release default, not set
        d = c.describe()
        assert d.extra["kv_cache_manager"]["used"] == "V2" and "default" in d.extra["kv_cache_manager"]["how"]
        assert d.extra["kv_cache_hash_algo"] == "v2_sha256"
        with pytest.raises(NotRunnable, match="hashes with 'v2_sha256'.*kv_manager='v1'"):
            hasher_for(d, seed=None)


def test_on_1_2_the_hash_algo_is_the_v1_key_no_event_names(fake_trt, tmp_path):
    with trtllm_cell.TrtLlmCell.open(str(model_dir(tmp_path)), kv_manager="default") as c:
        d = c.describe()  # 1.2's default is V1 too: nothing changes but how it was chosen
    assert d.extra["kv_cache_manager"]["used"] == "V1" and d.extra["kv_cache_hash_algo"] == "v1_block_key"
    assert "no event stated one" in d.extra["kv_cache_hash_algo_source"]


def test_cached_tokens_is_preferred_where_exact_and_the_blocks_kept_beside(fake_trt14, tmp_path):
    head = list(range(10, 74))
    with trtllm_cell.TrtLlmCell.open(str(model_dir(tmp_path)), tokenizer=False) as c:
        c.ensure_prefix(head + [7] * 40)
        st = c.ensure_prefix(head + [7] * 10 + [8] * 30)  # 10 tokens into the stored third block
    assert (st.source, st.exact, st.reused_tokens) == ("cached_tokens", True, 74)
    counters = st.engine_counters
    assert counters["block_reused_tokens"] == 64 and counters["num_reused_blocks"] == 2
    assert counters["reuse_channels_differ"] is True  # the difference is kept, not hidden


def test_on_1_2_reuse_stays_the_block_estimate(fake_trt, tmp_path):
    head = list(range(10, 74))
    with trtllm_cell.TrtLlmCell.open(str(model_dir(tmp_path)), tokenizer=False) as c:
        c.ensure_prefix(head + [7] * 40)
        st = c.ensure_prefix(head + [7] * 10 + [8] * 30)
    assert (st.source, st.exact, st.reused_tokens) == ("perf_metrics", False, 64)
    assert "cached_tokens" not in st.engine_counters


def test_a_kv_manager_it_does_not_know_is_refused_before_anything_opens():
    with pytest.raises(ValueError, match="kv_manager must be one of v1, default, got 'v3'"):
        trtllm_cell.TrtLlmOptions(kv_manager="v3")


def test_doctor_on_the_1_4_double_lists_the_profile_and_its_differences(fake_trt14):
    lines = doctor.engine_lines("trtllm", asdict(cells.availability("trtllm")))
    text = "\n".join(lines)
    assert lines[0] == "engine      trtllm: available, version 1.4.0rc1"
    assert "  double    tests/doubles/fake_tensorrt_llm as tensorrt_llm 1.4.0rc1" in text
    assert "  release   1.4 profile (written against 1.4.0rc1 (docs to 1.4.0rc4)); default KV manager V2" in text
    assert "  differs   from 1.2: 7 behaviour(s)" in text
    assert "    kv_manager_default: V1 → V2" in text
    assert "    connector_module: _torch.pyexecutor.kv_cache_connector → _torch.pyexecutor.connectors" in text
    assert "KvEventFanout" in text and "cached_tokens on the request result" in text
    assert "MISSING/CHANGED" not in text


def test_what_the_reference_leaves_unverified_the_1_4_profile_marks_so(fake_trt14):
    """The reference: 1.4.0rc4's default KV manager is UNVERIFIED; hash_algo is on V2's events (PR #13589), V1's is
    not said; /server_info may name v2_sha256_64 too. The profile neither states these as facts nor leaves them out."""
    r14 = trtllm_guard.RELEASES[-1]
    assert dict(r14.unverified).keys() == {"kv_manager_default", "hash_algo"} and not trtllm_guard.RELEASES[0].unverified
    assert "v2_sha256_64" in r14.hash_algo and "v1_block_key on V1" not in r14.hash_algo
    text = "\n".join(doctor.engine_lines("trtllm", asdict(cells.availability("trtllm"))))
    assert "  unverified kv_manager_default: V2 is release v1.4.0rc1's word" in text and "1.4.0rc4" in text
    assert "  unverified hash_algo: the reference has hash_algo on V2's events only" in text


def test_doctor_on_the_1_2_double_lists_its_profile_with_nothing_older(fake_trt):
    text = "\n".join(doctor.engine_lines("trtllm", asdict(cells.availability("trtllm"))))
    assert "  release   1.2 profile (written against 1.2.0 and 1.2.1); default KV manager V1" in text
    assert "differs" not in text


def test_the_reuse_probe_reports_where_the_two_channels_differ():
    from workbench.probes.reuse import _second_channel

    row = {"case": "shared 3·B−1", "repeat": 0,
           "engine_counters": {"cached_tokens": 47, "block_reused_tokens": 32, "reuse_channels_differ": True}}
    same = dict(row, engine_counters={"cached_tokens": 32, "block_reused_tokens": 32, "reuse_channels_differ": False})
    assert _second_channel([row, same]) == ["second channel: the engine's block counts agreed with its exact "
                                            "cached_tokens on 1 of 2 requests; shared 3·B−1 (repeat 0): cached_tokens "
                                            "47, blocks 32"]
    assert _second_channel([dict(row, engine_counters={"num_reused_blocks": 2})]) == []  # one channel (1.2): nothing


def test_on_1_4_the_reuse_probe_reads_the_exact_channel_and_keeps_the_blocks_beside(fake_trt14, tmp_path):
    from workbench import probes

    f = probes.run("reuse.per_request_metrics", engine="trtllm", isolated=False,
                   model=str(model_dir(tmp_path, vocab_size=32000)), params={"repeats": 1},
                   cell_options={"dummy_weights": True, "tokens_per_block": 16})
    assert {r["reuse_source"] for r in f.evidence["rows"]} == {"cached_tokens"}
    assert all(r["reported_exact"] and r["granularity"] == 1 for r in f.evidence["rows"])
    assert any(n.startswith("second channel: ") and "cached_tokens 47, blocks 32" in n for n in f.evidence["notes"])
