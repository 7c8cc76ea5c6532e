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
    [(path, setup, shown)] = table.in_run(tmp_path)
    assert setup["TTFT cross-check"] == check  # shown beside the table in the report
    assert path == as_json and shown == table.text_rows(rows) and shown[0][:3] == ["llamacpp-server", "prefix-1k", "2"]
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
