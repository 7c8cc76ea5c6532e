"""The loop's reuse efficiency carries the source of the counts behind it (issue 35, case 9: vLLM's own
``num_cached_tokens`` was published as ``cell``, with a note that the engine reported none)."""

from __future__ import annotations

import pandas as pd
import pytest

from workbench import findings
from workbench.loop import results

# each turn's reuse source (the loop's "engine" for llama.cpp's eval counters, else the cell's PrefixStatus.source)
# -> the finding's source of reuse_efficiency (None: not measured), and what its note must say
CASES = [
    (["engine", "engine"], "engine", None),  # llama.cpp's eval counters (in-process and llama-server)
    (["num_cached_tokens"] * 2, "engine", None),  # vLLM
    (["perf_metrics"] * 2, "engine", None),  # TensorRT-LLM
    (["usage.prompt_tokens_details.cached_tokens"] * 2, "engine", None),  # vllm serve
    (["perf_metrics.kv_cache_metrics"] * 2, "engine", None),  # trtllm-serve
    (["cell", "cell"], "cell", "the cell's own count on 2 of 2 turns (cell)"),
    (["num_cached_tokens", "bookkeeping"], "cell", "the cell's own count on 1 of 2 turns (bookkeeping), the engine's"),
    (["engine", "restore"], "cell", "the cell's own count on 1 of 2 turns (restore)"),
    (["none", "none"], None, "no reuse count on 2 of 2 turns"),
    (["num_cached_tokens", "none"], None, "no reuse count on 1 of 2 turns"),  # missing, never a 0 in the sum
]


@pytest.mark.parametrize("turns, source, note", CASES)
def test_reuse_efficiency_is_labelled_by_the_counts_behind_it(turns, source, note):
    s = results.ArmSummary("arm", "engine", None)
    results._reuse(pd.DataFrame({"reuse_source": turns, "reused": 30, "theoretical": 40}), s)
    value = s.metrics["reuse_efficiency"]
    assert (value == 0.75) if source else (value != value)  # NaN where a count is missing
    if source:
        published = findings.metric_values({"reuse_efficiency": value}, s.sources)["reuse_efficiency"]
        assert published["source"] == source
    assert not any("engine reported none" in n for n in s.notes)
    assert (note is None and not s.notes) or any(note in n for n in s.notes), s.notes
