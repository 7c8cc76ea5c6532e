"""The eval table as written and read back: a batch's tables (``RUN/evaltable/ENGINE/evaltable.json``) appear in
the run's report, each row as the Markdown writes it, measured or not-run with its reason."""

from workbench import report
from workbench.evaltable import table
from workbench.evaltable.exports import FIELDS
from workbench.evaltable.split import ENGINE


def test_a_batchs_tables_read_back_and_show_in_the_report(tmp_path):
    values = {t: table.Spread.of([0.5, 0.7]) for t in table.COLUMNS} | {"load_ttft_cached_p50_s": None}
    rows = [table.Row("llamacpp-server", "prefix-1k", 2, "ok", values=values, requests=4, split=ENGINE),
            table.Row("trtllm-serve", "prefix-1k", None, "not-run", "needs an NVIDIA GPU; on a GPU machine: …")]
    check = "TTFT cross-check on 3 repeats of … (workbench-timed, settles nothing): … they agree within their spread"
    as_json, as_md = table.write(rows, tmp_path / "evaltable" / "llamacpp", {"model": "smollm2-135m", "repeats": 1},
                                 [check])
    (tmp_path / "evaltable" / "vllm").mkdir()
    (tmp_path / "evaltable" / "vllm" / "evaltable.json").write_text("{")  # a table cut off: left out
    doc, back = table.read(as_json)
    assert back == rows and doc["setup"] == {"model": "smollm2-135m", "repeats": 1} and doc["ttft_crosscheck"] == [check]
    [(path, setup, laid)] = table.in_run(tmp_path)
    shown = table.text_rows(rows)
    assert setup["TTFT cross-check"] == check  # shown beside the table in the report
    assert path == as_json and laid == table.shown_rows(rows) and shown[0][:3] == ["llamacpp-server", "prefix-1k", "2"]
    assert len(shown[0]) == len(table.heads()) == 3 + len(FIELDS) + 4  # … the split, the result class
    assert shown[0][-1] == "raw_backend_control" and shown[1][-1] == "failed_no_performance_claim"
    page = report.render(tmp_path)
    assert 'id="evaltable"' in page and 'href="evaltable/llamacpp/evaltable.md"' in page
    assert f"<td>{shown[0][3]}</td>" in page and "not-run: needs an NVIDIA GPU" in page
    md = as_md.read_text()
    assert "| llamacpp-server | prefix-1k | 2 |" in md and check in md and check in page
    # p50 · p90 · p95 over the runs with their count; a table of one repeat says so plainly, no spread invented
    assert shown[0][3].startswith("p50 ") and " · p95 " in shown[0][3] and shown[0][3].endswith(" (2 runs)")
    assert "ran 1 repeat per cell" in md and "raw_backend_control" in md and "stream_options.include_usage" in md
    one = table.Row("vllm-server", "prefix-1k", 1, "ok", values={t: table.Spread.of([0.5]) for t in table.COLUMNS},
                    requests=4, split=ENGINE)
    assert table.text_rows([one])[0][3].endswith("(1 run)")


def test_a_row_not_measured_spans_its_reason_across_the_metric_columns(tmp_path):
    """Review of issues 50/51 (item 7): the result class column, filled on every row, made the report's guess (a row
    whose cells after the fourth are all empty) miss the not-run row, so TensorRT-LLM's reason sat in one 150 px
    metric cell again. The row's status lays it out: the reason across the metric and split columns, the class in
    its own column, every row as wide as the heads."""
    values = {t: table.Spread.of([0.5, 0.7]) for t in table.COLUMNS}
    rows = [table.Row("llamacpp-server", "prefix-1k", 2, "ok", values=values, requests=4, split=ENGINE),
            table.Row("trtllm-serve", "prefix-1k", None, "not-run", "needs an NVIDIA GPU: pip install "
                      "'tensorrt_llm>=1.2,<1.3'")]
    table.write(rows, tmp_path / "evaltable" / "trtllm", {"model": "m"})
    page = report.render(tmp_path)
    assert (f'<td colspan="{len(table.COLUMNS) + 1}">not-run: needs an NVIDIA GPU' in page
            and "<td>failed_no_performance_claim</td>" in page)
    measured, not_run = table.shown_rows(rows)
    assert [c.span for c in measured] == [1] * len(table.heads())
    assert [c.span for c in not_run] == [1, 1, 1, len(table.COLUMNS) + 1, 1]
    assert sum(c.span for c in not_run) == len(table.heads())
    assert not_run[3].text.startswith("not-run: needs an NVIDIA GPU") and not_run[-1].text == "failed_no_performance_claim"


def test_the_reports_caption_says_what_the_cells_show_and_the_quality_smoke(tmp_path):
    """Review of issue 50 (item 14): the report's caption still said "the median over the cell's repeats with its
    (least–greatest, n runs)" above cells showing p50 · p90 · p95, and nothing of the quality smoke, without which no
    throughput claim stands."""
    values = {t: table.Spread.of([0.5, 0.7]) for t in table.COLUMNS}
    rows = [table.Row("llamacpp-server", "prefix-1k", 2, "ok", values=values, requests=4, split=ENGINE),
            table.Row("trtllm-serve", "prefix-1k", None, "not-run", "needs an NVIDIA GPU")]
    table.write(rows, tmp_path / "evaltable" / "llamacpp", {"model": "m", "repeats": 2})
    page = report.render(tmp_path)
    assert "least–greatest" not in page and "the median over" not in page
    assert "Each figure: p50 · p90 · p95 over the cell&#39;s repeats" in page and "with the run count" in page
    assert ("<b>Quality smoke</b>: llamacpp-server: no quality smoke (no finding of it in this run): no throughput "
            "claim stands on this row.") in page  # the not-run backend measured nothing, so it has none to run
