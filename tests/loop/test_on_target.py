"""A GPU run end to end, on a faked GPU: NVML (a double of its library) reports an H100, the llama.cpp arms are
stand-ins that log a CUDA build's offload (in-process, and llama-server behind a wrapper), and the gate reaches the
claim's own verdict rather than holding it back for a missing GPU baseline."""

from __future__ import annotations

import json

import pytest

from conftest import TINY, require_engine
from doubles.fake_nvml import FakeNvml
from workbench import cells, environment, loop, nvml, settle
from workbench.cells.llamacpp import served as llama_served
from workbench.loop import arms, equal, gate, results, target, traces

from . import standins

pytestmark = pytest.mark.slow

TURNS = 24  # above the claim's 20 compared turns


@pytest.fixture
def gpu_machine(monkeypatch, tmp_path):
    """This machine as a GPU machine: NVML answers with an H100; llama.cpp logs what its CUDA build would; the
    subject arm is the plain llama.cpp cell (no 2× win over itself: the claim's verdict is refuted); the hand
    trace is the claim's, by its digest; synthetic:tiny is certified."""
    require_engine("llamacpp-server")
    monkeypatch.setattr(nvml, "_load", FakeNvml)
    environment.gpus.cache_clear()
    standins.register(monkeypatch)
    monkeypatch.setitem(cells.ENGINES._loaded, "llamacpp", standins.CudaLogCell)
    monkeypatch.setenv(llama_served.LLAMA_SERVER_ENV, str(standins.cuda_llama_server(tmp_path, TINY)))
    monkeypatch.setitem(arms.ARMS._loaded, "trtllm", arms.ArmSpec(
        "trtllm", "standin-plain", True, "none", "stand-in subject (plain llama.cpp)", {"threads": 1}))
    path = tmp_path / "long.jsonl"  # Mooncake: each request extends the last or diverges after two blocks
    path.write_text("".join(json.dumps({"timestamp": i, "input_length": (3 + i % 4) * 512, "output_length": 512,
                                        "hash_ids": [0, 1, *range(2 if i % 5 else 100 * i, (2 if i % 5 else 100 * i) + 1 + i % 4)]}) + "\n"
                            for i in range(TURNS)))
    monkeypatch.setattr(target, "claim_trace", lambda: ("long", traces.load(str(path)).sha256))
    certified = tmp_path / "certified.txt"
    certified.write_text(f"{TINY}\n")
    seen: list[dict] = []  # each arm's description, in the run's order of arms, as the gate reads it
    real_on_gpu = arms.on_gpu
    monkeypatch.setattr(arms, "on_gpu", lambda d: seen.append(d.extra) or real_on_gpu(d))
    yield path, certified, seen
    environment.gpus.cache_clear()


def test_a_gpu_run_with_the_llamacpp_cuda_baseline_reaches_the_claims_verdict(gpu_machine):
    path, certified, seen = gpu_machine
    res = loop.run(str(path), arms="trtllm,llamacpp,llamacpp-server-spec", model=TINY, threads=1, context_tokens=1024,
                   tokens_per_block=4, on_target=True, certified=certified)
    g = res.findings[-1]
    assert g.probe == "loop.gate" and g.verdict in {"confirmed", "refuted"}, g.summary
    assert g.verdict == "refuted" and "not the claim's verdict" not in g.summary  # llama.cpp is no 2× over itself
    # re-derived from what the findings recorded, beside its run's arm findings, it settles the claim
    assert settle.verify([(None, f) for f in res.findings])[-1].why(gate.CLAIM) == ()
    assert settle.unsettled(g, gate.CLAIM) != ()  # alone, what it says of its arms cannot be checked
    t = g.environment["target"]
    assert t["gpu"] == ["NVIDIA H100 80GB HBM3"] and t["gpu_source"] == "nvml" and t["trace_sha256"] == res.workload["sha256"]
    # each llama.cpp arm asked for every layer and said it holds them all (2 layers and the output layer); the
    # stand-in subject, not a llama.cpp arm, was not asked
    assert [e.get("offloaded_layers") for e in seen] == [None, [3, 3], [3, 3]]
    argv = seen[2]["server_argv"]
    assert argv[argv.index("-ngl") + 1] == "all"
    # the control: the same run, read as if no arm had said it was on the GPU, is held back for that baseline
    rule = gate.GateRule()
    held = gate.decide(rule, results.gate_evidence(res.summaries, rule, t, equal.EqualWork(), on_gpu=()))
    assert held.verdict == "inconclusive" and "llama.cpp's own speculation on the GPU" in held.summary
