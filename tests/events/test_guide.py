"""The gateway guide's write-back: every event-plane claim gets its managed block, TensorRT-LLM's state first."""

from pathlib import Path

from workbench import claims, probes
from workbench.events import guide

REPO = Path(__file__).resolve().parents[2]
SOURCE = REPO / "data" / guide.GUIDE


def test_every_gateway_claim_has_an_item_in_the_guide_and_lands_there(tmp_path):
    found = tmp_path / "findings"
    for name in ("events.hash_parity", "events.one_consumer"):
        probes.run(name, engine="trtllm", model="synthetic:tiny", out=found, isolated=False)
        probes.run(name, engine="llamacpp", model="synthetic:tiny", out=found, isolated=False)
    out = tmp_path / "guide.md"
    assert guide.run_writeback(SOURCE, [found], "write", out) == 0
    text = out.read_text()
    for c in claims.in_section("gateway"):
        begin = text.index(f"<!-- workbench:begin {c.id} -->")
        block = text[begin:text.index(f"<!-- workbench:end {c.id} -->")]
        assert "**TensorRT-LLM: unresolved" in block, c.id
    parity = text[text.index("workbench:begin gateway.hash_parity"):text.index("workbench:end gateway.hash_parity")]
    assert "| reference | not-applicable | llamacpp" in parity and "--engine trtllm" in parity
    assert SOURCE.read_text().split("## Event plane claims")[0] == text.split("## Event plane claims")[0]
    assert guide.run_writeback(out, [found], "check") == 0  # idempotent
