"""The Markdown blueprint and the write-back of findings into it.

The write-back's promise is that people own every byte outside managed blocks; the property tests
edit the blueprint at random between write-backs and check exactly that.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from workbench import blueprint as bp
from workbench import claims, probes, settle
from workbench import findings as fstore
from workbench.files import OutputError
from workbench.findings import Finding

ROOT = Path(__file__).resolve().parents[1]
BLUEPRINT = ROOT / "data" / "blueprint" / "blueprint.md"
SEED = ROOT / "data" / "blueprint" / "source.txt"  # the blueprint as its owners wrote it (plain text)
BASE = Path("/bp")  # links in pure write-backs are relative to this folder
MARKER = re.compile(r"[ \t]*<!-- workbench:(begin|end) (\S+) -->[ \t]*\r?\n?")


@pytest.fixture(autouse=True)
def re_derived(monkeypatch):
    """These tests are about where and how verdicts land in the document: every hand-built finding here is taken as
    re-derived. Which findings settle a claim is workbench.settle's rule, tested in tests/test_settle.py (a forged
    finding written back into this blueprint included)."""
    monkeypatch.setattr(settle, "unsettled", lambda f, claim_id, now=None: ())


def finding(claim_ids: list[str], verdict: str = "confirmed", *, engine: str = "llamacpp",
            version: str | None = "0.3.16", created: str = "2026-07-03T10:00:00+00:00", reason: str | None = None, summary: str | None = None,
            claim_verdicts: dict | None = None, probe: str = "prefix.warmup_materialization") -> Finding:
    """A schema-valid finding with only what a test cares about spelled out, written by this workbench's version of
    ``probe`` and resting on an engine reading that holds (so its verdict is re-derived: workbench.settle)."""
    return Finding(
        probe=probe, claims=list(claim_ids), verdict=verdict,
        summary=summary or f"{probe} found it {verdict} on {engine}.", engine=engine, reason=reason,
        environment={"engine": engine, "engine_version": version, "model": {"name": "SmolLM2-135M"},
                     "hardware": {"summary": "test CPU (2 cores); no GPU"}, "workbench_version": "0.1.0",
                     "time": created},
        claim_verdicts=claim_verdicts or {}, created=created, probe_version=probes.declared(probe).version,
        metrics={"engine_reuse_fraction": {"value": 0.5, "unit": "ratio", "source": "engine"}},
        rests_on=[{"metric": "engine_reuse_fraction", "op": "<", "value": 1.0}],
    ).validate()


def located(*fs: Finding, folder: Path = BASE / "findings") -> list[tuple[Path, Finding]]:
    return [(folder / f"{f.id}.json", f) for f in fs]


def pristine() -> str:
    return BLUEPRINT.read_bytes().decode("utf-8")


def block(text: str, bid: str) -> str:
    """The lines between a block's markers (a line scan, independent of the module)."""
    begin = re.search(rf"^[ \t]*<!-- workbench:begin {re.escape(bid)} -->\n", text, re.M)
    end = re.search(rf"^[ \t]*<!-- workbench:end {re.escape(bid)} -->\n", text, re.M)
    assert begin and end, f"no block {bid}"
    return text[begin.end():end.start()]


def row(text: str, start: str) -> str:
    (line,) = [ln for ln in text.splitlines() if ln.startswith(f"| {start}")]
    return line


# --------------------------------------------------------------------------- the rendering


def _words(md_line: str) -> str | None:
    """A Markdown line's words: markup we added (headings, bullets, table pipes, delimiter rows) removed."""
    s = md_line.strip()
    if not s:
        return None
    if s.startswith("|"):
        cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", s.strip("|"))]
        if all(re.fullmatch(r":?-+:?", c) for c in cells):
            return None
        s = " ".join(cells)
    s = re.sub(r"^(#{1,6}|[-*+])\s+", "", s)
    return " ".join(s.split())


def test_markdown_has_exactly_the_seed_words_in_order():
    seed = [" ".join(ln.split()) for ln in SEED.read_text(encoding="utf-8").splitlines() if ln.strip()]
    md = [w for ln in pristine().splitlines() if (w := _words(ln)) is not None]
    assert md == seed


def test_markdown_structure_headings_lists_and_tables():
    tokens = MarkdownIt("commonmark").enable("table").parse(pristine())
    heads = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]
    assert heads == ["Blueprint: TensorRT-LLM and the modeld Boundary", *[
        "Invariants", "TensorRT-LLM Facts", "Consequence", "Admissible Future Shape",
        "Contract Mapping Reference", "Risks", "Open Unknowns", "Sources"]]
    rows, per_table = 0, []
    for t in tokens:
        rows += t.type == "tr_open"
        if t.type == "table_close":
            per_table, rows = [*per_table, rows], 0
    assert per_table == [1 + 11, 1 + 5]  # header + body rows: Contract Mapping Reference, Risks
    assert sum(t.type == "list_item_open" for t in tokens) == 3 + 7 + 2 + 4 + 6


# --------------------------------------------------------------------------- where verdicts go


def test_each_verdict_lands_next_to_its_claim():
    fs = located(finding(["unknown.retention_pressure", "risk.retention_bias"], "confirmed", engine="trtllm",
                         version="1.2.0", probe="retention.pinning_under_pressure"),
                 finding(["contract.embed"], "refuted", engine="trtllm", version="1.2.0", probe="reuse.per_request_metrics"))
    out = bp.writeback(pristine(), fs, base=BASE)
    assert "**confirmed**" in block(out, "unknown.retention_pressure")
    assert "unresolved — needs tensorrt_llm on an NVIDIA GPU" in block(out, "unknown.reuse_metrics")
    assert row(out, "Priority retention").split(" | ")[-1].startswith("**confirmed** · trtllm 1.2.0")
    assert row(out, "Risk").endswith("| Status |")
    assert row(out, "`Embed`").split(" | ")[-1].startswith("**refuted**")
    assert row(out, "Contract").endswith("| Verified |")
    log = block(out, "verification-log")
    assert log.startswith("## Verification log") and "| retention.pinning_under_pressure |" in log and "| reuse.per_request_metrics |" in log
    assert out.rstrip().endswith("<!-- workbench:end verification-log -->")


def test_version_churn_is_written_back_from_surveys_of_two_releases():
    def survey(version, cache_salt):
        f = finding(["entry.contract_table", "risk.version_churn"], "partial", engine="trtllm", version=version,
                    probe="surface.contract_mapping", claim_verdicts={"risk.version_churn": "inconclusive"})
        f.evidence = {"rows": [{"guard": "LLM.generate_async", "feature": "core", "ok": cache_salt,
                                "signature": {"at": "LLM.generate_async", "names": {"cache_salt": cache_salt},
                                              "defaults": {}}}]}
        return f

    one = bp.writeback(pristine(), located(survey("1.2.1", True)), base=BASE)
    assert row(one, "Version churn").split(" | ")[-1].startswith("**TensorRT-LLM: open — inconclusive")
    two = bp.writeback(pristine(), located(survey("1.2.1", True), survey("1.3.0", False)), base=BASE)
    assert row(two, "Version churn").split(" | ")[-1].startswith("**confirmed** · trtllm 1.2.1 → 1.3.0")


def test_another_engines_finding_is_a_reference_never_the_answer():
    fs = located(finding(["unknown.retention_pressure", "risk.retention_bias"], "refuted", engine="llamacpp",
                         version="0.3.36", probe="retention.pinning_under_pressure"),
                 finding(["unknown.retention_pressure", "risk.retention_bias"], "not-run", engine="trtllm",
                         version="1.2.0", reason="TensorRT-LLM needs an NVIDIA GPU; this machine has none",
                         probe="retention.pinning_under_pressure"))
    out = bp.writeback(pristine(), fs, base=BASE)
    status = row(out, "Priority retention").split(" | ")[-1]
    first, reference = status.split("<br>")
    assert first.startswith("**TensorRT-LLM: unresolved — needs tensorrt_llm on an NVIDIA GPU** · resolve: "
                            "`workbench probe retention.pinning_under_pressure --engine trtllm --model HF_DIR --out findings`")
    assert reference.startswith("reference · llamacpp 0.3.36 on SmolLM2-135M · refuted (retention.pinning_under_pressure "
                                "found it refuted on llamacpp): the claim does not hold on llamacpp, which says nothing "
                                "about TensorRT-LLM · ")
    assert not re.search(r"\*\*(confirmed|refuted|partial)\*\*", status)
    unknown = block(out, "unknown.retention_pressure")
    assert unknown.lstrip().startswith("**TensorRT-LLM: unresolved — needs tensorrt_llm on an NVIDIA GPU**")
    assert "| reference | refuted | llamacpp | 0.3.36 | SmolLM2-135M |" in unknown
    rows = bp.unknowns_table(out)
    mine = [(r["role"], r["engine"], r["verdict"], r["resolved"]) for r in rows if r["claim"] == "unknown.retention_pressure"]
    assert mine == [("subject", "trtllm", None, False), ("reference", "llamacpp", "refuted", False)]
    # the reason is printed once per engine, in the log, not on every row
    assert out.count("this machine has none") == 1


def test_not_applicable_renders_with_its_evidence():
    f = finding(["risk.warmup"], "not-applicable", engine="trtllm", version="1.2.0",
                summary="No max_tokens=1 warm-up: every prefix token was resident when the warm-up returned.")
    out = bp.writeback(pristine(), located(f), base=BASE)
    assert row(out, "Warm-up").split(" | ")[-1].startswith("**not-applicable** · trtllm 1.2.0")
    assert "not-applicable" in block(out, "verification-log")


def test_human_table_cells_are_kept_byte_for_byte():
    before = pristine()
    out = bp.writeback(before, located(finding(["risk.warmup"])), base=BASE)
    tables = [ln for ln in before.splitlines() if ln.startswith("|")]
    written = [ln for ln in out.splitlines() if ln.startswith("| ")]
    assert all(any(w.startswith(t + " ") for w in written) for t in tables)
    edited = out.replace("Pin exactly;", "Pin exactly (we mean it);")  # a person edits a managed table's cell
    again = bp.writeback(edited, located(finding(["risk.version_churn"])), base=BASE)
    assert "| Version churn across TensorRT-LLM releases. | Pin exactly (we mean it); a version bump" in again


def test_writeback_is_idempotent():
    fs = located(finding(["unknown.reuse_metrics", "risk.reuse_metrics"], "partial"),
                 finding(["unknown.reuse_metrics"], "not-run", engine="trtllm", version="1.2.0", reason="no GPU"))
    once = bp.writeback(pristine(), fs, base=BASE)
    assert bp.writeback(once, fs, base=BASE) == once
    assert bp.writeback(bp.writeback(once, [], base=BASE), fs, base=BASE) == once


def test_newest_finding_per_engine_version_side_by_side():
    fs = located(
        finding(["unknown.retention_pressure"], "refuted", engine="trtllm", version="1.2.0",
                created="2026-07-01T00:00:00+00:00", summary="Old run."),
        finding(["unknown.retention_pressure"], "confirmed", engine="trtllm", version="1.2.0",
                created="2026-07-02T00:00:00+00:00", summary="New run."),
        finding(["unknown.retention_pressure"], "partial", engine="trtllm", version="1.1.9", summary="Older release."),
        finding(["unknown.retention_pressure"], "confirmed", version="0.3.16", summary="Incumbent."),
    )
    rows = bp.unknowns_table(bp.writeback(pristine(), fs, base=BASE))
    mine = [(r["role"], r["engine"], r["engine_version"], r["verdict"], r["summary"]) for r in rows
            if r["claim"] == "unknown.retention_pressure"]
    assert mine == [("subject", "trtllm", "1.1.9", "partial", "Older release."),
                    ("subject", "trtllm", "1.2.0", "confirmed", "New run."),
                    ("reference", "llamacpp", "0.3.16", "confirmed",
                     "Incumbent. — reference: the claim holds on llamacpp, which says nothing about TensorRT-LLM")]


def test_claim_verdicts_override_the_finding_verdict_per_claim():
    f = finding(["contract.decode", "contract.embed"], "partial", engine="trtllm", version="1.2.0",
                claim_verdicts={"contract.embed": "confirmed"})
    out = bp.writeback(pristine(), located(f), base=BASE)
    assert row(out, "`Decode`").split(" | ")[-1].startswith("**partial**")
    assert row(out, "`Embed`").split(" | ")[-1].startswith("**confirmed**")


# --------------------------------------------------------------------------- not-run is never an answer


@pytest.fixture
def findings_that_could_not_run() -> list[tuple[Path, Finding]]:
    return located(finding(["unknown.connector_granularity", "risk.warmup"], "not-run", engine="trtllm",
                           version="1.2.0", reason="TensorRT-LLM needs an NVIDIA GPU; this machine has none",
                           summary="Connector probe did not run."))


def test_not_run_shows_as_unresolved_with_its_reason(findings_that_could_not_run):
    out = bp.writeback(pristine(), findings_that_could_not_run, base=BASE)
    unknown = block(out, "unknown.connector_granularity")
    assert "**TensorRT-LLM: unresolved — needs tensorrt_llm on an NVIDIA GPU**" in unknown
    assert "`workbench probe connector.export_granularity --engine trtllm --model HF_DIR --out findings`" in unknown
    assert not re.search(r"\*\*(confirmed|refuted|partial)\*\*", unknown)
    assert row(out, "Warm-up").split(" | ")[-1].startswith("**TensorRT-LLM: unresolved")
    assert ("- trtllm did not run (prefix.warmup_materialization): TensorRT-LLM needs an NVIDIA GPU; this machine has none"
            in block(out, "verification-log"))
    (r,) = [r for r in bp.unknowns_table(out) if r["claim"] == "unknown.connector_granularity"]
    assert (r["verdict"], r["resolved"]) == (None, False)


def test_a_later_not_run_does_not_mask_an_answer(findings_that_could_not_run):
    answered = finding(["unknown.connector_granularity"], "refuted", engine="trtllm", version="1.2.0",
                       created="2026-06-01T00:00:00+00:00")
    rows = bp.unknowns_table(bp.writeback(pristine(), [*findings_that_could_not_run, *located(answered)], base=BASE))
    assert [(r["verdict"], r["resolved"]) for r in rows if r["claim"] == "unknown.connector_granularity"] == [
        ("refuted", True)]


def test_unknowns_table_of_a_pristine_blueprint_is_all_open():
    rows = bp.unknowns_table(pristine())
    assert [r["claim"] for r in rows] == [c.id for c in claims.in_section("unknowns")]
    assert not any(r["resolved"] for r in rows)


# --------------------------------------------------------------------------- clear errors


def test_missing_section_is_a_clear_error():
    broken = pristine().replace("## Risks\n", "## Hazards\n")
    with pytest.raises(bp.MissingError, match=r"section 'Risks' is missing.*risk\.warmup"):
        bp.writeback(broken, [], base=BASE)


def test_missing_row_names_the_claim():
    broken = "\n".join(ln for ln in pristine().splitlines() if not ln.startswith("| `Describe`")) + "\n"
    with pytest.raises(bp.MissingError, match=r"no row starting with '`Describe`' \(claim contract\.describe\)"):
        bp.writeback(broken, [], base=BASE)


def test_duplicate_item_is_ambiguous():
    doubled = pristine().replace("- Whether priority-100", "- Whether priority-100 retention survives sustained "
                                 "pressure, again.\n- Whether priority-100")
    with pytest.raises(bp.MissingError, match="2 list items starting with 'Whether priority-100"):
        bp.writeback(doubled, [], base=BASE)


def test_begin_without_end_is_malformed():
    written = bp.writeback(pristine(), [], base=BASE)
    broken = written.replace("  <!-- workbench:end unknown.reuse_metrics -->\n", "")
    with pytest.raises(bp.ManagedBlockError, match="unknown.reuse_metrics"):
        bp.writeback(broken, [], base=BASE)


def test_marker_swallowed_by_human_html_is_malformed():
    written = bp.writeback(pristine(), [], base=BASE)
    broken = written.replace("<!-- workbench:begin risks-table -->", "<div>\n<!-- workbench:begin risks-table -->")
    with pytest.raises(bp.ManagedBlockError, match="not an HTML comment block of its own"):
        bp.writeback(broken, [], base=BASE)


def test_markers_quoted_in_code_are_documentation():
    doc = pristine() + "\n```\n<!-- workbench:begin example -->\n```\n"
    out = bp.writeback(doc, [], base=BASE)
    assert "```\n<!-- workbench:begin example -->\n```\n" in out


# --------------------------------------------------------------------------- human edits survive


FINDING_POOL = [
    finding(["unknown.retention_pressure", "risk.retention_bias"], "confirmed", created="2026-07-01T00:00:00+00:00"),
    finding(["unknown.retention_pressure"], "refuted", created="2026-07-02T00:00:00+00:00"),
    finding(["unknown.reuse_metrics", "risk.reuse_metrics"], "partial", summary="Counts | in blocks\nonly."),
    finding(["unknown.cpp_entrypoint"], "not-run", engine="trtllm", version="1.2.0", reason="no GPU <here>"),
    finding(["contract.decode", "contract.embed", "entry.contract_table"], "inconclusive", version=None),
    finding(["risk.version_churn", "contract.lora"], "confirmed", engine="trtllm", version="1.2.1"),
]
MARKDOWNISH = st.sampled_from([
    "", "# Risks", "## Open Unknowns", "## Notes", "### Aside", "- item", "* item", "1. item", "| a | b |",
    "| --- | --- |", "Risk | Position", "```", "~~~python", "<!-- note -->", "<!--", "-->", "<div>", "</div>",
    "    indented code", "> quote", "---", "===", "***", "[ref]: http://x", "\t- tabbed", "  - nested",
    "<!-- workbench:begin unknown.reuse_metrics -->", "<!-- workbench:end risks-table -->",
    "- Whether priority-100 retention survives sustained pressure.", "| `Embed` | x |",
])
ANY_LINE = st.one_of(st.text(max_size=30), MARKDOWNISH, st.tuples(MARKDOWNISH, st.text(max_size=10)).map("".join))
PLAIN_LINE = st.text(st.characters(whitelist_categories=("Lu", "Ll", "Nd", "Zs"),
                                   whitelist_characters=".,;:!?()'\"/é⊕—"), max_size=30)  # no block syntax
TABLE_ROWS = dict(zip(("contract-table", "risks-table"), (
    [ln for ln in group.splitlines() if ln.startswith("|")]
    for group in pristine().split("## Risks"))))
Edits = st.lists(st.tuples(st.booleans(), st.integers(0, 10_000)), max_size=4)


def _items(text: str) -> list[tuple[str, str]]:
    """A written-back text as ("human", line) and ("block", whole block) items (a plain line scan)."""
    lines, items, i = text.splitlines(keepends=True), [], 0
    while i < len(lines):
        m = MARKER.fullmatch(lines[i])
        if m and m[1] == "begin":
            j = next(k for k in range(i + 1, len(lines)) if (e := MARKER.fullmatch(lines[k])) and e[2] == m[2])
            items.append(("block", "".join(lines[i:j + 1])))
            i = j + 1
        else:
            items.append(("human", lines[i]))
            i += 1
    return items


def _next_block(text: str, pos: int) -> tuple[int, int] | None:
    """(start, end) of a whole managed block at ``pos``, perhaps after one blank line setting it apart."""
    start = pos + text.startswith("\n", pos)
    m = MARKER.match(text, start)
    if not m or m[1] != "begin":
        return None
    e = re.compile(rf"[ \t]*<!-- workbench:end {re.escape(m[2])} -->[ \t]*(\r\n|\r|\n|$)").search(text, m.end())
    return (start, e.end()) if e else None


def _survived(expected: list[tuple[str, str]], text: str) -> list[tuple[str, str]]:
    """Check ``text`` is ``expected``'s human items, byte for byte and in order, with only whole managed blocks
    rewritten or inserted between them; return the new items."""
    out: list[tuple[str, str]] = []
    pos = 0

    def inserted() -> None:
        nonlocal pos
        found = _next_block(text, pos)
        assert found, f"human text changed at offset {pos}: found {text[pos:pos + 80]!r}"
        if found[0] > pos:
            out.append(("human", text[pos:found[0]]))
        out.append(("block", text[found[0]:found[1]]))
        pos = found[1]

    for kind, s in expected:
        if kind == "human":
            while not text.startswith(s, pos):
                inserted()
            out.append((kind, s))
            pos += len(s)
        else:
            while not MARKER.match(text, pos):
                inserted()
            inserted()
    while pos < len(text):
        inserted()
    return out


def _structural(line: str) -> bool:
    """A heading or the line that carries a claim: replacing it removes what the claims need."""
    return line.startswith("#") or any(c.match in line for c in claims.CLAIMS.values())


def _edit(items: list[tuple[str, str]], edits: list[tuple[bool, int]], chunks: list[str],
          keep_structure: bool) -> list[tuple[str, str]]:
    """Insert or replace lines outside managed blocks."""
    items = list(items)
    for (replace, at), chunk in zip(edits, chunks):
        humans = [i for i, (kind, s) in enumerate(items)
                  if kind == "human" and not (keep_structure and _structural(s))]
        if replace and humans:
            items[humans[at % len(humans)]] = ("human", chunk + "\n")
        else:
            items.insert(at % (len(items) + 1), ("human", chunk + "\n"))
    return items


def _rounds(data, line: st.SearchStrategy[str], must_succeed: bool) -> None:
    text = bp.writeback(pristine(), located(*data.draw(st.lists(st.sampled_from(FINDING_POOL)))), base=BASE)
    items = _items(text)
    for _ in range(data.draw(st.integers(1, 3))):
        edits = data.draw(Edits)
        chunks = [data.draw(st.lists(line, min_size=1, max_size=3).map("\n".join)) for _ in edits]
        items = _edit(items, edits, chunks, keep_structure=must_succeed)
        fs = located(*data.draw(st.lists(st.sampled_from(FINDING_POOL), max_size=4)))
        try:
            text = bp.writeback("".join(s for _, s in items), fs, base=BASE)
        except bp.BlueprintError:
            assert not must_succeed
            event("edit broke the blueprint's structure: clear error")
            return
        items = _survived(items, text)
        assert bp.writeback(text, fs, base=BASE) == text
        for bid, human_rows in TABLE_ROWS.items():
            (managed,) = [s for kind, s in items if kind == "block" and f"workbench:begin {bid} " in s]
            rows = managed.splitlines()[1:-1]
            assert len(rows) == len(human_rows) and all(r.startswith(h + " ") for r, h in zip(rows, human_rows))
    event("write-backs succeeded")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_any_human_edit_survives_write_backs_or_is_refused(data):
    _rounds(data, ANY_LINE, must_succeed=False)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_plain_human_text_always_survives_write_backs(data):
    _rounds(data, PLAIN_LINE, must_succeed=True)


# --------------------------------------------------------------------------- the command


@pytest.fixture
def findings_updating_retention(tmp_path) -> Path:
    d = tmp_path / "runs" / "r1" / "findings"
    fstore.write(finding(["unknown.retention_pressure", "risk.retention_bias"], "confirmed", probe="retention.pinning_under_pressure"), d)
    fstore.write(finding(["unknown.connector_granularity"], "not-run", engine="trtllm", version="1.2.0",
                         reason="no NVIDIA GPU", probe="connector.export_granularity"), d)
    return d


@pytest.fixture
def stale_blueprint(tmp_path) -> Path:
    p = tmp_path / "blueprint.md"
    p.write_bytes(BLUEPRINT.read_bytes())
    return p


@pytest.fixture
def blueprint_without_risks_section(tmp_path) -> Path:
    p = tmp_path / "blueprint.md"
    p.write_text(pristine().replace("## Risks\n", ""), encoding="utf-8")
    return p


def test_missing_section_writes_nothing(blueprint_without_risks_section, findings_updating_retention, tmp_path):
    before = blueprint_without_risks_section.read_bytes()
    for out in (None, tmp_path / "out" / "blueprint.md"):
        with pytest.raises(bp.MissingError, match="Risks"):
            bp.run_writeback(blueprint_without_risks_section, [findings_updating_retention], "write", out=out)
    assert blueprint_without_risks_section.read_bytes() == before
    assert not (tmp_path / "out").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blueprint.md", "runs"]


def test_dry_run_prints_a_diff_and_changes_nothing(stale_blueprint, findings_updating_retention, capsys):
    before = stale_blueprint.read_bytes()
    assert bp.run_writeback(stale_blueprint, [findings_updating_retention], "dry-run") == 0
    diff = capsys.readouterr().out
    assert diff.startswith("---") and "\n+<!-- workbench:begin risks-table -->\n" in diff
    assert "\n-| Risk | Position |\n" in diff and "\n+| Risk | Position | Status |\n" in diff
    assert stale_blueprint.read_bytes() == before


def test_check_fails_when_out_of_date_and_passes_after_write(stale_blueprint, findings_updating_retention, capsys):
    assert bp.run_writeback(stale_blueprint, [findings_updating_retention], "check") == 1
    said = capsys.readouterr().out
    assert "out of date" in said and "unknown.retention_pressure" in said and "risk.retention_bias" in said
    assert bp.run_writeback(stale_blueprint, [findings_updating_retention], "write") == 0
    assert bp.run_writeback(stale_blueprint, [findings_updating_retention], "check") == 0
    fstore.write(finding(["risk.warmup"], "refuted", probe="prefix.warmup_materialization"), findings_updating_retention)
    capsys.readouterr()
    assert bp.run_writeback(stale_blueprint, [findings_updating_retention], "check") == 1
    assert "changed: risk.warmup, verification-log" in capsys.readouterr().out


def test_write_to_out_links_findings_relative_to_it(stale_blueprint, findings_updating_retention, tmp_path):
    out = tmp_path / "runs" / "r1" / "blueprint.md"
    before = stale_blueprint.read_bytes()
    assert bp.run_writeback(stale_blueprint, [findings_updating_retention], "write", out=out) == 0
    assert stale_blueprint.read_bytes() == before
    links = re.findall(r"\[finding\]\(([^)]+)\)", out.read_text(encoding="utf-8"))
    assert links and all(lk.startswith("findings/") and (out.parent / lk).is_file() for lk in links)
    assert bp.run_writeback(stale_blueprint, [findings_updating_retention], "check", out=out) == 0


def test_write_is_atomic(stale_blueprint, findings_updating_retention, monkeypatch):
    before = stale_blueprint.read_bytes()

    def crash(*_):
        raise OSError("disk went away")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OutputError, match="disk went away.*nothing was changed"):
        bp.run_writeback(stale_blueprint, [findings_updating_retention], "write")
    assert stale_blueprint.read_bytes() == before
    assert [p.name for p in stale_blueprint.parent.iterdir() if p.name.startswith(".")] == []


def test_missing_or_empty_findings_folder_writes_nothing(stale_blueprint, tmp_path):
    before = stale_blueprint.read_bytes()
    with pytest.raises(bp.BlueprintError, match="no findings folder"):
        bp.run_writeback(stale_blueprint, [tmp_path / "nowhere"], "write")
    (tmp_path / "empty").mkdir()
    with pytest.raises(bp.BlueprintError, match="no findings in"):
        bp.run_writeback(stale_blueprint, [tmp_path / "empty"], "write")
    assert stale_blueprint.read_bytes() == before


def test_corrupt_finding_is_reported_and_skipped(stale_blueprint, findings_updating_retention, capsys):
    (findings_updating_retention / "broken.json").write_text("{not json", encoding="utf-8")
    assert bp.run_writeback(stale_blueprint, [findings_updating_retention], "write") == 0
    assert "skipping corrupt finding" in capsys.readouterr().err
    assert "reference | confirmed" in block(stale_blueprint.read_text(encoding="utf-8"), "unknown.retention_pressure")


# --------------------------------------------------------------------------- issue 23: a person's text is never lost


def test_an_edit_made_during_the_writeback_is_kept_and_nothing_is_written(stale_blueprint, findings_updating_retention,
                                                                           monkeypatch):
    """The write-back takes seconds between reading the blueprint and replacing it; a line a person appended
    meanwhile was lost while the tool printed `wrote`."""
    real = bp.writeback

    def slow_writeback(text, found, *, base, **sections):
        out = real(text, found, base=base, **sections)
        with open(stale_blueprint, "a", encoding="utf-8") as f:
            f.write("A line a person appended meanwhile.\n")
        return out

    monkeypatch.setattr(bp, "writeback", slow_writeback)
    with pytest.raises(bp.ChangedError, match="changed while the write-back was computed"):
        bp.run_writeback(stale_blueprint, [findings_updating_retention], "write")
    assert stale_blueprint.read_text(encoding="utf-8").endswith("A line a person appended meanwhile.\n")
    assert "workbench:begin" not in stale_blueprint.read_text(encoding="utf-8")


def test_a_symlinked_blueprint_is_written_through_to_its_target(stale_blueprint, findings_updating_retention, tmp_path):
    link = tmp_path / "docs" / "blueprint.md"
    link.parent.mkdir()
    link.symlink_to(stale_blueprint)
    assert bp.run_writeback(link, [findings_updating_retention], "write") == 0
    assert link.is_symlink() and os.readlink(link) == str(stale_blueprint)
    assert "workbench:begin risks-table" in stale_blueprint.read_text(encoding="utf-8")


@pytest.mark.parametrize("encoding", ["latin-1", "utf-16"])
def test_a_blueprint_not_in_utf8_is_refused_naming_the_fix(stale_blueprint, findings_updating_retention, encoding):
    stale_blueprint.write_bytes(("Caf\u00e9 notes\n" + pristine()).encode(encoding, errors="replace"))
    before = stale_blueprint.read_bytes()
    with pytest.raises(bp.BlueprintError, match="is not UTF-8 .*save it as UTF-8"):
        bp.run_writeback(stale_blueprint, [findings_updating_retention], "write")
    assert stale_blueprint.read_bytes() == before


def test_a_directory_given_as_the_blueprint_is_refused_naming_the_fix(findings_updating_retention, tmp_path):
    with pytest.raises(bp.BlueprintError, match="is not a Markdown file .*give the blueprint's .md file"):
        bp.run_writeback(tmp_path, [findings_updating_retention], "write")


def test_every_contract_row_cites_the_daemons_conformance_run_beside_the_verdict_that_stands():
    """The contract table's rows cite contract.conformance (the cell's daemon, row by row) on each engine it ran on,
    even where another probe's newer finding is the one that stands for that engine."""
    conformance = finding(["contract.decode", "contract.embed"], "confirmed", probe="contract.conformance",
                          created="2026-07-01T00:00:00+00:00",
                          claim_verdicts={"contract.decode": "confirmed", "contract.embed": "not-applicable"})
    newer = finding(["contract.decode"], "partial", created="2026-07-02T00:00:00+00:00")
    out = bp.writeback(pristine(), located(conformance, newer), base=BASE)
    decode = row(out, "`Decode`").split(" | ")[-1]
    assert "reference · llamacpp 0.3.16 on SmolLM2-135M · partial" in decode
    assert f"conformance · llamacpp 0.3.16 on SmolLM2-135M · confirmed · 2026-07-01 · [finding](findings/{conformance.id}.json)" in decode
    embed = row(out, "`Embed`").split(" | ")[-1]
    assert embed.count("conformance ·") == 0 and "reference · llamacpp 0.3.16 on SmolLM2-135M · not-applicable" in embed  # it stands
def test_a_write_back_into_a_new_file_says_it_is_new_not_that_every_block_changed(stale_blueprint,
                                                                                   findings_updating_retention, capsys,
                                                                                   tmp_path):
    """Issue 51: a run into a fresh folder printed "changed:" and every block of the blueprint."""
    out = tmp_path / "fresh" / "blueprint.md"
    assert bp.run_writeback(stale_blueprint, [findings_updating_retention], "write", out=out) == 0
    said = capsys.readouterr().out
    assert "a new write-back of blueprint.md" in said and "changed:" not in said
    fstore.write(finding(["risk.warmup"], "refuted", probe="prefix.warmup_materialization"), findings_updating_retention)
    assert bp.run_writeback(stale_blueprint, [findings_updating_retention], "write", out=out) == 0
    assert "changed: risk.warmup, verification-log" in capsys.readouterr().out  # an existing one says what changed


def test_the_log_lists_as_not_run_only_what_ran_nowhere():
    """Issue 51: a batch's llama.cpp pass reports the vLLM arms not-run on its model while vLLM's own pass ran them:
    the log said "vllm did not run (loop.vllm)" beside the rows that show it ran."""
    ran = finding(["entry.step_function"], "inconclusive", engine="vllm", version="0.32.0", probe="loop.vllm")
    elsewhere = finding(["entry.step_function"], "not-run", engine="vllm", version=None, probe="loop.vllm",
                        reason="the vLLM arm needs a Hugging Face model", created="2026-07-04T10:00:00+00:00")
    never = finding(["unknown.retention_pressure"], "not-run", engine="trtllm", version=None,
                    probe="retention.pinning_under_pressure", reason="no NVIDIA GPU")
    log = block(bp.writeback(pristine(), located(ran, elsewhere, never), base=BASE), "verification-log")
    assert "- trtllm did not run (retention.pinning_under_pressure): no NVIDIA GPU" in log
    assert "vllm did not run" not in log
