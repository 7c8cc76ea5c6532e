"""What a gates run may vary before its verdicts stop being the claims': the reviewer's constructions (review of
issue 50, items 2, 3, 4 and 13), each driven to "settles nothing" or "not comparable" from the rows and identities a
run records (no engine runs here; the same checks on real engines' rows: test_gates_vllm.py)."""

from __future__ import annotations

import pytest

from workbench import claims, settle, standing
from workbench.certify import gates
from workbench.certify import long_context as lc

from .helpers import gates_finding

G1, G2, G3 = gates.G1, gates.G2, gates.G3


def test_the_claims_run_as_recorded_settles():
    f = gates_finding()
    assert {c: f.verdict_on(c) for c in (G1, G3)} == {G1: "confirmed", G3: "confirmed"}
    assert settle.unsettled(f, G1) == () and settle.unsettled(f, G3) == ()


def entry(found):
    (st,) = [s for s in standing.claim_states(found, "entry") if s.claim.id == standing.STEP_FUNCTION]
    return [s.verdict for s in st.subject]


def test_off_target_on_a_gpu_machine_settles_nothing():
    """Item 2: ``on_target=False`` on an H200 confirmed G1 and G3 with nothing unsettled, and the entry read kept."""
    f = gates_finding(on_target=False)
    assert "exploratory: on_target=False" in " ".join(settle.unsettled(f, G3))
    assert entry([(None, f)]) == ["inconclusive"]
    forged = gates_finding(on_target=False)
    forged.params["on_target"] = True  # said on target, but no verified target (NVML GPU, certified model) recorded
    assert "no verified target" in " ".join(settle.unsettled(forged, G3))


@pytest.mark.parametrize("field, value", [
    ("device", "CPU: Intel(R) Xeon(R)"),  # llama.cpp left its layers on the CPU of the GPU machine
    ("runtime_profile", "threads=default; batch=the engine's default; gpu_layers=20/30"),  # part offloaded
])
def test_a_baseline_not_on_the_gpu_is_not_comparable(field, value):
    """Item 2: what the same-model rule compared of the device was the machine's summary, shared by every arm."""
    f = gates_finding(identity={field: value})
    for c in (G1, G2, G3):
        assert f.verdict_on(c) == "inconclusive" and "not comparable" in f.reason_on(c), f.reason_on(c)
    assert entry([(None, f)]) == ["inconclusive"]


def test_a_g1_serve_cell_off_the_gpu_is_not_comparable():
    f = gates_finding()
    rows = [r | {"device": "CPU: Xeon", "gpu_layers": "none"} if r["kind"] == "serve" and r["role"] == "baseline"
            else r for r in f.evidence["rows"]]
    ids = f.environment["gates"]["identities"]
    got = lc.decide(G1, lc.rules_of(f.params), rows, f.params["ladder"], lc.context(rows, ids))
    assert got.verdict == "inconclusive" and "(under the budget): device: GPU: NVIDIA H200 vs CPU: Xeon" in got.summary


@pytest.mark.parametrize("shape", [
    "layers=16 heads=32 kv_heads=8 head_dim=64 hidden=2048 vocab=128256",  # Llama-3.2-1B against a larger model
    "layers=1 heads=1 kv_heads=1 head_dim=64 hidden=64 vocab=1024",
])
def test_another_checkpoint_in_another_format_is_not_comparable(shape):
    """Item 3: with ``--subject-model`` the rule compared only the dtype, so a smaller model confirmed G1 and G3."""
    f = gates_finding(identity={"architecture": shape, "model": "Llama-3.1-8B", "digest": "b" * 64})
    f.params["subject_model"] = "HF_DIR"
    ids = f.environment["gates"]["identities"]
    said = lc.same_model(ids, f.evidence["rows"], formats=True)
    assert said and "architecture: layers=1" in said and "model:" not in said, said  # name and digest: the user's word
    assert "not comparable" in lc.decide(G3, lc.rules_of(f.params), f.evidence["rows"], f.params["ladder"],
                                         lc.context(f.evidence["rows"], ids, True)).summary


def test_another_greedy_reply_on_the_shared_prompt_is_not_comparable():
    f = gates_finding()
    rows = [r | {"cold_tokens": [5, 6, 9, 9]} if r["kind"] == "a2" and r["role"] == "baseline" else r
            for r in f.evidence["rows"]]
    said = lc.same_model(f.environment["gates"]["identities"], rows)
    assert said == "llamacpp:f16: greedy output on the shared prompt differs: [5, 6, 9, 9] vs the candidate's [5, 6, 7, 8]"
    f.evidence["rows"] = rows  # the finding's verdicts were decided on equal replies: re-derived, they do not hold
    assert "decided again" in " ".join(settle.unsettled(f, G3))


@pytest.mark.parametrize("param, value", [
    ("serve_kv", ["f16"]), ("serve_kv", ["f16", "q8_0"]), ("tiers", [16384, 16400]), ("memory_budget_bytes", 12345),
    ("timed_kv", ["f16"]), ("baseline", []),
])
def test_a_baseline_ladder_or_budget_picked_by_hand_settles_nothing(param, value):
    """Item 4: ``--serve-kv f16`` or a hand-picked budget or ladder still settled."""
    f = gates_finding()
    f.params[param] = value
    assert f"exploratory: {param}=" in " ".join(settle.unsettled(f, G1))


def test_the_baseline_tries_every_kv_type_modeld_offers_and_a_given_budget_is_the_rules_too():
    assert lc.SERVE_KV == ("f16", "q8_0", "q4_0")
    _, serve, _ = lc.arms(lc.Plan("vllm"), False)
    assert [a.kv for a in serve] == ["f16", "q8_0", "q4_0"]
    assert lc.Plan("vllm", memory_budget_bytes=1 << 20).rules(1 << 20)[G1].exploratory
    assert lc.Plan("vllm").rules(1 << 20)[G1].exploratory is None
    with pytest.raises(ValueError, match="llama.cpp KV precisions"):
        lc.Plan("vllm", serve_kv=("f8",))


@pytest.mark.parametrize("field, value", [
    ("kv_precision", "fp8"),  # an fp8-KV candidate against f16 llama.cpp
    ("runtime_profile", "threads=default; batch=1; gpu_layers=all"),  # a baseline held to one token a pass
])
def test_kv_precision_and_batch_are_compared_for_g2_and_g3_and_only_g1_varies_kv(field, value):
    """Item 13: the runtime profile was only the threads; KV and batch stood outside the identity."""
    f = gates_finding(identity={field: value})
    assert f.verdict_on(G3) == "inconclusive" and "not comparable" in f.reason_on(G3)
    assert f.verdict_on(G1) == ("confirmed" if field == "kv_precision" else "inconclusive"), f.reason_on(G1)


def test_the_kv_precision_compared_is_its_width_and_kind():
    assert lc.KV_CLASS["bf16"] == lc.KV_CLASS["f16"] != lc.KV_CLASS["q8_0"] != lc.KV_CLASS["fp8"]
    assert (lc.MATCH_KV["bf16"], lc.MATCH_KV["f32"], lc.MATCH_KV.get("fp8")) == ("f16", "f32", None)


def test_timed_llamacpp_runs_at_the_candidates_kv_precision():
    _, _, timed = lc.arms(lc.Plan("vllm"), False, "f32")
    assert [(a.name, a.kv) for a in timed] == [("llamacpp:f32", "f32")]
    _, _, timed = lc.arms(lc.Plan("vllm", speculation="always"), True, "bf16")
    spec = timed[-1]
    assert spec.name == lc.SPEC_ARM and spec.options["server_args"][-4:] == ("--cache-type-k", "bf16",
                                                                              "--cache-type-v", "bf16")


def test_on_target_needs_an_nvml_gpu_and_every_model_certified(tmp_path, monkeypatch):
    """Item 2: G1–G3 took on target on the word of a flag; G4 checks a GPU and a certified model."""
    from workbench import environment
    from workbench.engine import WorkbenchError

    plan = lc.Plan("trtllm", "synthetic:tiny", on_target=True)
    with pytest.raises(WorkbenchError, match="NVML reports no GPU"):
        monkeypatch.setattr(environment, "hardware", lambda: {"gpu": {"available": False}})
        lc.verified_target(plan)
    monkeypatch.setattr(environment, "hardware", lambda: {"gpu": {"available": True, "source": "nvml",
                                                                  "devices": [{"name": "NVIDIA H200"}]}})
    with pytest.raises(WorkbenchError, match="needs --certified"):
        lc.verified_target(plan)
    listed = tmp_path / "certified.txt"
    listed.write_text("smollm2-135m\n")
    with pytest.raises(WorkbenchError, match="not in the certified list"):
        lc.verified_target(lc.Plan("trtllm", "synthetic:tiny", on_target=True, certified=str(listed)))
    listed.write_text("synthetic:tiny\n")
    got = lc.verified_target(lc.Plan("trtllm", "synthetic:tiny", on_target=True, certified=str(listed)))
    assert got["gpu"] == ["NVIDIA H200"] and got["models"] == {"synthetic:tiny": "synthetic:tiny"}
    with pytest.raises(ValueError, match="--certified is read only with --on-target"):
        lc.Plan("trtllm", certified=str(listed))
    assert "--certified FILE" in claims.GATES_RUN


@pytest.mark.parametrize("extra, device, layers", [
    ({"offloaded_layers": [30, 30]}, "GPU: NVIDIA H200", "all"),  # llama.cpp's load log: every layer on the GPU
    ({"offloaded_layers": [20, 30]}, "GPU and CPU: 20 of 30 layers on the GPU", "20/30"),
    ({"offloaded_layers": None}, "CPU: AMD EPYC", "none"),  # a CPU build states no offload
    ({"gpu_devices": [{"name": "NVIDIA H200"}]}, "GPU: NVIDIA H200", "all"),  # TensorRT-LLM's devices
])
def test_each_arms_device_is_its_engines_word_not_the_machines(extra, device, layers, monkeypatch):
    """Item 2: Identity.device was the machine's summary, shared by every arm, whatever llama.cpp offloaded."""
    from types import SimpleNamespace

    from workbench import environment
    from workbench.engine import KvGeometry

    monkeypatch.setattr(environment, "hardware", lambda: {"gpu": {"devices": [{"name": "NVIDIA H200"}]},
                                                          "cpu": {"model": "AMD EPYC"}, "summary": "H200 machine"})
    d = SimpleNamespace(extra=extra, geometry=KvGeometry(30, 3, 64, 2.0))
    assert lc.device("llamacpp", d) == (device, layers)
