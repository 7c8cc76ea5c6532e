"""gateway.routing's rule: every verdict it returns, from summaries of the shapes a pool measured."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench.probes import gateway_routing as gr


def _summary(gain=(0.2, 0.1, 0.3), speedup=(1.5, 1.2, 1.8), best=0.6, unread=0, lost=0) -> gr.Summary:
    shapes = [{"shape": s, "engine_hit_rate": r, "ttft_p50_s": t, "best_hit_rate": best}
              for s, r, t in (("round-robin", 0.3, 0.2), ("least-load", 0.3, 0.2), ("kv-exact", 0.5, 0.1))]
    g = {"against": "round-robin", "hit_gain": gain[0], "hit_gain_ci_low": gain[1], "hit_gain_ci_high": gain[2],
         "ttft_speedup": speedup[0], "ttft_speedup_ci_low": speedup[1], "ttft_speedup_ci_high": speedup[2]}
    return gr.Summary(shapes, g, best, unread, 0, -1, lost)


@pytest.mark.parametrize("summary, verdict, case", [
    (_summary(), "confirmed", "gain"),
    (_summary(speedup=(1.1, 0.9, 1.3)), "partial", "hit-only"),
    (_summary(gain=(0.0, 0.0, 0.0)), "refuted", "no-gain"),
    (_summary(gain=(0.02, -0.01, 0.05)), "inconclusive", "overlap"),
    (_summary(best=0.0), "inconclusive", "no-sharing"),
    (_summary(unread=2), "inconclusive", "unread"),
    (_summary(gain=(0.0, 0.0, 0.0), lost=3), "inconclusive", "diverged"),  # KV-exact routed on an emptied inventory
    (_summary(lost=3), "confirmed", "gain"),  # lost events only handicap KV-exact: a gain still stands
])
def test_every_verdict_of_the_rule(summary, verdict, case):
    d = gr.decide(summary)
    assert (d.verdict, d.case) == (verdict, case)
    assert gr.explain(d, summary, 32)
    if verdict in ("confirmed", "partial", "refuted"):
        assert d.rests_on and gr.GatewayRouting.rests[("*", verdict)][0] == d.rests_on


def test_on_tensorrt_llm_the_claim_reads_unresolved_in_the_guide_with_the_command_for_a_gpu_machine(tmp_path):
    from workbench import probes
    from workbench.events import guide

    f = probes.run("gateway.routing", engine="trtllm", model="synthetic:tiny", out=tmp_path / "f", isolated=False)
    assert f.verdict == "not-run"
    out = tmp_path / "guide.md"
    assert guide.run_writeback(Path(__file__).resolve().parents[2] / "data" / guide.GUIDE, [tmp_path / "f"], "write",
                               out) == 0
    text = out.read_text().split("## Gateway shape claims")[1]
    block = text[text.index("workbench:begin shapes.kv_routing"):text.index("workbench:end shapes.kv_routing")]
    assert "**TensorRT-LLM: unresolved" in block and "gateway.routing --engine trtllm-serve" in block
