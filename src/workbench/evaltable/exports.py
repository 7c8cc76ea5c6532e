"""Reading what AIPerf exported for one cell: its summary (``profile_export_aiperf.json``, ~80 metrics, each
``{"unit", "avg", "p50", "p95", …}``) as the table's metrics in their declared units (:mod:`workbench.metrics`:
seconds, not AIPerf's milliseconds). Its per-request records (``profile_export.jsonl``: each request's TTFT and
the server's cached tokens) must be there and stay in the run folder; the table does not read them yet.

The one boundary where AIPerf's names meet the workbench's: a release that renames a field fails here, with the
file and the field, not as a KeyError in the table.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from ..contract import WorkbenchError

SUMMARY = "profile_export_aiperf.json"
RECORDS = "profile_export.jsonl"

_SCALE = {"ms": 1e-3, "sec": 1.0, "tokens/sec": 1.0, "requests/sec": 1.0, "tokens": 1.0, "requests": 1.0, "%": 1e-2}
"""AIPerf's units → the factor to the declared unit (ms → s, % → ratio)."""

FIELDS: Mapping[str, tuple[str, str]] = {
    "output_tokens_per_s": ("output_token_throughput", "avg"),
    "requests_per_s": ("request_throughput", "avg"),
    "load_ttft_p50_s": ("time_to_first_token", "p50"),
    "load_ttft_p95_s": ("time_to_first_token", "p95"),
    "load_itl_s": ("inter_token_latency", "avg"),
    "load_latency_p50_s": ("request_latency", "p50"),
    "engine_cached_prompt_tokens": ("total_usage_prompt_cache_read_tokens", "avg"),
    "engine_cache_read_fraction": ("overall_usage_prompt_cache_read_pct", "avg"),
}
"""Table metric → (AIPerf summary field, statistic). The cached tokens are the server's own count
(``usage.prompt_tokens_details.cached_tokens`` in each response), which AIPerf only adds up."""


class ExportError(WorkbenchError):
    """An AIPerf export that is missing, unreadable, or lacks a field the table reads."""


@dataclass(frozen=True)
class CellExport:
    """One AIPerf run's figures: the table's metrics, the requests that completed and failed, and where it is."""

    folder: Path
    values: Mapping[str, float]
    completed: int
    errors: int


def read(folder: Path) -> CellExport:
    summary = _json(folder / SUMMARY)
    values = {tag: _value(summary, field, stat, folder / SUMMARY) for tag, (field, stat) in FIELDS.items()}
    completed = int(_value(summary, "completed_request_count", "avg", folder / SUMMARY))
    errors = int(sum(e.get("count", 0) for e in summary.get("error_summary") or [] if isinstance(e, dict)))
    if not (folder / RECORDS).is_file():
        raise ExportError(f"AIPerf wrote no per-request records ({folder / RECORDS}): its run did not finish")
    return CellExport(folder, values, completed, errors)


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ExportError(f"cannot read AIPerf's export {path}: {e}") from None


def _value(summary: Mapping[str, Any], field: str, stat: str, path: Path) -> float:
    """``summary[field][stat]`` in the workbench's unit; 0 where AIPerf left out a token count it never saw
    (no response carried cached tokens: the field is absent, not zero)."""
    entry = summary.get(field)
    if entry is None and field.startswith(("total_usage_prompt_cache", "overall_usage_prompt_cache")):
        return 0.0
    try:
        return float(entry[stat]) * _SCALE[entry["unit"]]
    except (KeyError, TypeError, ValueError):
        raise ExportError(f"{path} has no {field}.{stat} in a known unit (AIPerf 0.13's field): "
                          f"{json.dumps(entry)[:120]}") from None

