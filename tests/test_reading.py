"""What a researcher reads first (``reading.py``, issue 51): the run's established findings as sentences, the
subject's state once, a reason cut at a clause or sentence, never inside a word, and the command a card gives to run
its finding again."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench import manifest, probes, reading, settle
from workbench.findings import Finding


@pytest.fixture(autouse=True)
def re_derived(monkeypatch, hand_built):
    """Hand-built findings, taken as re-derived and bound to their run (conftest.hand_built; no reason on any claim):
    which findings settle is workbench.settle's (tests/test_settle.py, tests/test_provenance.py)."""
    monkeypatch.setattr(settle, "_reasons", lambda path, f, now, claim_ids=(): {})


def finding(probe: str, claims: list[str], verdict: str, engine: str, summary: str, **kw) -> Finding:
    return Finding(probe=probe, claims=claims, verdict=verdict, summary=summary, engine=engine,
                   environment={"engine_version": "0.3.36", "model": {"name": "SmolLM2-135M"}},
                   probe_version=probes.declared(probe).version, **kw)


def test_a_reason_is_cut_at_a_clause_or_a_sentence_never_inside_a_word():
    said = "The engine's KV blobs are exportable: it exported a 1476072-byte state, e.g. of 3 slots. It restored it."
    assert reading.first_clause(said) == ("The engine's KV blobs are exportable", True)
    assert reading.first_sentence(said) == "The engine's KV blobs are exportable: it exported a 1476072-byte state, " \
                                           "e.g. of 3 slots."
    assert reading.first_clause("Short and whole.") == ("Short and whole", False)
    assert reading.first_clause("The engine has no priority to pin with (vLLM has none: blocks join one LRU queue)") \
        == ("The engine has no priority to pin with", True)  # never a parenthesis left open
    long = "word " * 80
    cut = reading.first_sentence(long, 50)
    assert cut.endswith(" …") and all(w == "word" for w in cut[:-2].split())


def test_the_established_sentences_put_the_most_telling_answers_first_and_link_each_card():
    fs = [finding("retention.pinning_under_pressure", ["unknown.retention_pressure"], "not-applicable", "llamacpp",
                  "The engine has no eviction to pin against."),
          finding("connector.export_granularity", ["unknown.connector_granularity"], "refuted", "vllm",
                  "The connector exports whole blocks; import only continues a prefix."),
          finding("connector.export_granularity", ["unknown.connector_granularity"], "not-run", "trtllm",
                  "Not run on trtllm", reason="no GPU")]
    found = [(Path(f"{f.id}.json"), f) for f in fs]
    said = reading.established(found, lambda fid: f"finding-{fid}")
    assert [e.claim.id for e in said] == ["unknown.connector_granularity", "unknown.retention_pressure"]
    (answer,) = said[0].answers
    assert (answer.verdict, answer.subject, answer.href) == ("refuted", False, f"#finding-{fs[1].id}")
    assert answer.who == "vllm 0.3.36 on SmolLM2-135M" and answer.reason.startswith("The connector exports")
    line = reading.subject_line(found)
    assert line.startswith("TensorRT-LLM, the claims' subject, did not run here") and "not about TensorRT-LLM" in line


def test_a_cards_command_runs_the_probe_again_with_what_differs_from_its_defaults():
    defaults = {p["name"]: p["default"] for p in probes.describe_params("capacity.budget_policy")}
    f = finding("capacity.budget_policy", ["risk.memory_fraction"], "confirmed", "llamacpp", "s",
                params=defaults | {"tolerance": 0.1, "model": "smollm2-135m"}, cell_options={"context_tokens": 512})
    assert reading.rerun_command(f) == ("workbench probe capacity.budget_policy --engine llamacpp --model smollm2-135m "
                                        "-p tolerance=0.1 -c context_tokens=512 --out findings")
    assert ("tolerance", "0.1", True) in reading.shown_params(f) and reading.shown_params(f)[0][0] == "model"
    loop = finding("loop.llamacpp", ["entry.step_function"], "inconclusive", "llamacpp", "s")
    nb = manifest.NotebookRun("llamacpp/60_agentic_loop", "ok", {"engine": "llamacpp", "model": "smollm2-135m",
                                                                  "out": "/abs/findings", "turns": 3}, "x.ipynb", "t")
    assert reading.rerun_command(loop, nb) == ("workbench run --out RUN --only 60_agentic_loop --engine llamacpp "
                                               "--model smollm2-135m -p turns=3")
    assert reading.rerun_command(loop) is None
