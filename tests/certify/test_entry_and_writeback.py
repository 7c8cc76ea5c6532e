"""The entry condition across its four gates, and what the write-back shows of them, the matrix and the product
path: the gates' findings re-derive (settle), only the subject on target answers, and the cell is kept when any
one gate is confirmed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from workbench import blueprint, claims, settle, standing
from workbench.certify import writeback as cw

from .helpers import gates_finding, loop_gate

BLUEPRINT = Path(__file__).resolve().parents[2] / "data" / "blueprint" / "blueprint.md"
ALL_REFUTED = dict(cand32=3.0, base32=1.0, g1=(16384, 32768))


def entry(found):
    (st,) = [s for s in standing.claim_states(found, "entry") if s.claim.id == standing.STEP_FUNCTION]
    return st


def test_a_gates_finding_rederives_each_row_and_on_target_settles_it():
    f = gates_finding()
    assert {c: f.verdict_on(c) for c in claims.GATES[:3]} == {
        "gate.context_tier": "confirmed", "gate.usable_context": "inconclusive", "gate.prefill_32k": "confirmed"}
    assert settle.unsettled(f, "gate.prefill_32k") == () and settle.unsettled(f, "gate.context_tier") == ()
    off = gates_finding(gpu=False)
    assert "no GPU" in " ".join(settle.unsettled(off, "gate.prefill_32k"))
    forged = gates_finding()
    forged.claim_verdicts["gate.usable_context"] = "confirmed"
    assert "decided again" in " ".join(settle.unsettled(forged, "gate.usable_context"))


def test_a_rule_moved_from_the_claims_number_settles_nothing():
    f = gates_finding()
    f.params["rules"]["gate.prefill_32k"]["min_ratio"] = 1.5
    assert "exploratory" in " ".join(settle.unsettled(f, "gate.prefill_32k"))
    f = gates_finding()
    f.params["output_tokens"] = 16  # a shorter turn than the claim's: the whole run is exploratory
    assert "exploratory" in " ".join(settle.unsettled(f, "gate.prefill_32k"))


@pytest.mark.parametrize("found, verdict", [
    ([gates_finding()], "confirmed"),  # G1 and G3 confirmed on target: kept
    ([gates_finding(**ALL_REFUTED)], "inconclusive"),  # three refuted, G4 not run: not every gate refuted
    ([gates_finding(**ALL_REFUTED), loop_gate("refuted")], "refuted"),  # every one refuted: not kept
    ([gates_finding(cand32=1.0, base32=2.0, g1=(16384, 32768)), loop_gate("refuted")], "inconclusive"),
    ([gates_finding(gpu=False)], "inconclusive"),  # off target the subject's answers settle nothing
])
def test_the_entry_condition_is_kept_when_any_gate_is_confirmed_on_target(found, verdict):
    st = entry([(None, f) for f in found])
    assert [s.verdict for s in st.subject] == [verdict], st.subject
    assert all(g in st.subject[0].summary for g in ("G1", "G2", "G3", "G4"))


def test_a_reference_engines_gates_never_answer_the_entry_condition():
    st = entry([(None, gates_finding("vllm"))])
    assert not st.subject and st.headline.startswith("unresolved — needs tensorrt_llm")
    (g3,) = [s for s in standing.claim_states([(None, gates_finding("vllm"))], "gates") if s.claim.id == "gate.prefill_32k"]
    assert not g3.resolved and [r.engine for r in g3.references] == ["vllm"]


def test_the_write_back_shows_four_gate_lines_under_the_entry_condition(tmp_path):
    found = [(tmp_path / "g.json", gates_finding("vllm")), (tmp_path / "l.json", loop_gate("refuted", engine="trtllm"))]
    text = blueprint.writeback(BLUEPRINT.read_text(), found, base=tmp_path)
    assert blueprint.writeback(text, found, base=tmp_path) == text  # idempotent
    section = text[text.index("## Admissible Future Shape"):text.index("## Contract Mapping Reference")]
    item = section[section.index("- a benchmark on target hardware"):section.index("- the contract-mapping table")]
    block = item[item.index(f"<!-- workbench:begin {cw.GATES_BLOCK} -->"):item.index(f"<!-- workbench:end {cw.GATES_BLOCK} -->")]
    lines = [line.strip() for line in block.splitlines() if line.strip().startswith("- **G")]
    assert [re.match(r"- \*\*(G\d)", line).group(1) for line in lines] == ["G1", "G2", "G3", "G4"]
    assert all(" · rule: " in line and " · evidence: " in line for line in lines)
    g3 = lines[2]
    assert "at least 3× (the source's)" in g3 and "[finding](g.json)" in g3
    assert "reference · vllm 1.2.1 on synthetic-long · confirmed (prefill at 32768" in g3, g3
    assert "which says nothing about TensorRT-LLM" in g3, g3
    g4 = lines[3]
    assert "**refuted** on TensorRT-LLM" in g4 and "the workbench's own reading" in g4 and "the source gives no number" in g4
    assert "the blueprint's 2" not in text
    # the matrix and the product path, each in a block of its own in the entry conditions' section
    for bid in (cw.MATRIX_BLOCK, cw.PRODUCT_BLOCK):
        assert f"<!-- workbench:begin {bid} -->" in section
    assert "| backend | version | topology | model |" in section
    assert re.search(r"\| trtllm \| 1\.2\.1 \| 1 × NVIDIA H200.*G4 \(loop\): loop gate refuted", section)
    assert "internal/models/modelrepo/vllm/client.go:285" in section and "--type vllm" in section
    assert "backendservice_test.go:28" in section and "Nothing here is `contenox_product_path`" in section


def test_a_person_may_move_the_blocks_and_they_stay_there(tmp_path):
    found = [(tmp_path / "g.json", gates_finding("vllm"))]
    text = blueprint.writeback(BLUEPRINT.read_text(), found, base=tmp_path)
    begin, end = f"<!-- workbench:begin {cw.PRODUCT_BLOCK} -->", f"<!-- workbench:end {cw.PRODUCT_BLOCK} -->"
    block = text[text.index(begin):text.index(end) + len(end)]
    moved = text.replace(block, "").rstrip("\n") + "\n\n" + block + "\n"
    again = blueprint.writeback(moved, found, base=tmp_path)
    assert again.index(begin) > again.index("## Verification log") and again.count(begin) == 1


def test_each_gate_line_names_the_model_and_a_reference_never_reads_as_the_subjects(tmp_path):
    """The reviewer's construction (review of issue 50, item 11): the lines showed a reference's verdict bare ("reference
    vllm 0.32.0: confirmed — … the candidate served up to 32768 …") and the subject's verdicts of two models with none
    named ("**refuted** on TensorRT-LLM 1.2.1; **confirmed** on TensorRT-LLM 1.2.1")."""
    a = gates_finding()  # G1 and G3 confirmed
    b = gates_finding(**ALL_REFUTED)
    b.environment["model"] = {"name": "Llama-3-8B-Q4"}
    ref = gates_finding("vllm", gpu=False)
    ref.environment["engine_version"] = "0.32.0"
    found = [(tmp_path / "a.json", a), (tmp_path / "b.json", b), (tmp_path / "r.json", ref)]
    lines = cw.gate_lines(found, tmp_path, blueprint._reference_line)
    g1 = next(line for line in lines if line.startswith("- **G1"))
    assert "**confirmed** on TensorRT-LLM 1.2.1 on synthetic-long" in g1 and "on Llama-3-8B-Q4" in g1, g1
    assert "reference · vllm 0.32.0 on synthetic-long · confirmed (" in g1, g1
    assert "the claim holds on vllm, which says nothing about TensorRT-LLM" in g1, g1
    assert "reference vllm 0.32.0: confirmed" not in g1


def test_the_product_path_sentence_is_read_from_the_findings():
    """The reviewer's construction (review of issue 50, item 15): "Nothing here is contenox_product_path" stood whatever
    the findings said, and a truthy contenox_runtime was enough to claim the class."""
    from workbench.certify import matrix, product

    ran = gates_finding("vllm", gpu=False)
    assert product.product_words([(None, ran)]).startswith("Nothing here is `contenox_product_path`")
    driven = gates_finding("vllm", gpu=False)
    driven.result_class = "contenox_product_path"
    driven.environment["contenox_runtime"] = "yes"
    assert product.product_path([(None, driven)]) == []  # two edited fields do not make a product-path row
    driven.environment["contenox_runtime"] = {"version": "1.0.0", "command": "contenox run --trace t.json",
                                              "trace_sha256": "d" * 64}
    words = product.product_words([(None, driven)])
    assert words.startswith("1 finding of this run is `contenox_product_path`: vllm by contenox 1.0.0"), words
    assert "Nothing here" not in " ".join(product.note([(None, driven)]))
    note = matrix.document(matrix.build([(None, driven)]))["notes"]
    assert any(n.startswith("contenox_product_path (a contenox runtime drove it): ") and "vllm on synthetic-long" in n
               for n in note), note
    driven.environment["contenox_runtime"] = "yes"  # built in memory, never through the schema: the matrix checks too
    assert "no contenox runtime drove it" in matrix.left_out(driven)
