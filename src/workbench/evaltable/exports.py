"""Reading what AIPerf exported for one cell, a profiling phase of a run: the phase's summary
(``phases/c<N>/profile_export_aiperf.json``, ~80 metrics, each
``{"unit", "avg", "p50", "p95", …}``) as the table's metrics in their declared units (:mod:`workbench.metrics`:
seconds, not AIPerf's milliseconds), and its per-request records (the run's ``profile_export.jsonl``: one JSON
object a request, ``{"metadata": {"request_start_ns", "benchmark_phase", "phase_name", …}, "metrics": {"time_to_first_token": {"value",
"unit"}, "usage_prompt_cache_read_tokens": …}, "error"}``) as :class:`Request` (each request's TTFT and the
server's own cached tokens), which split TTFT into cold and cached (:mod:`.split`) and carry the prefix-caching
finding (:mod:`.finding`).

The one boundary where AIPerf's names meet the workbench's: a release that renames a field fails here, with the
file and the field, not as a KeyError in the table.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from ..engine import WorkbenchError

SUMMARY = "profile_export_aiperf.json"
RECORDS = "profile_export.jsonl"

_SCALE = {"ms": 1e-3, "sec": 1.0, "tokens/sec": 1.0, "requests/sec": 1.0, "tokens": 1.0, "requests": 1.0, "%": 1e-2}
"""AIPerf's units → the factor to the declared unit (ms → s, % → ratio)."""

FIELDS: Mapping[str, tuple[str, str]] = {
    "output_tokens_per_s": ("output_token_throughput", "avg"),
    "requests_per_s": ("request_throughput", "avg"),
    "goodput_per_s": ("goodput", "avg"),
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
class Request:
    """One profiled request as AIPerf recorded it: when it was sent, its TTFT, the prompt tokens the server
    counted and the ones it said it read from its cache (None: the response carried no such count)."""

    start_ns: int
    ttft_s: float
    prompt_tokens: float | None
    cached_tokens: float | None
    conversation: str = ""  # AIPerf's conversation id: the request body it sent (inputs.json)
    connect_s: float | None = None  # the connection setup inside its TTFT (http_req_connecting)


@dataclass(frozen=True)
class CellExport:
    """One cell's figures, a phase of an AIPerf run: the table's metrics, the requests that completed and failed,
    each profiled request that succeeded (in the order they were sent), the run's folder and the phase's name."""

    folder: Path
    values: Mapping[str, float]
    completed: int
    errors: int
    requests: tuple[Request, ...] = ()
    phase: str = ""


def read(folder: Path, phase: str) -> CellExport:
    """Phase ``phase`` of the AIPerf run in ``folder``: its summary and its requests. AIPerf 0.13 writes each
    phase's summary in ``phases/NAME/`` where a run has several profiling phases, and only the run's own where it
    has one."""
    path = folder / "phases" / phase / SUMMARY
    if not (folder / "phases").is_dir():
        path = folder / SUMMARY
    summary = _json(path)
    values = {tag: _value(summary, field, stat, path) for tag, (field, stat) in FIELDS.items()}
    completed = int(_value(summary, "completed_request_count", "avg", path))
    errors = int(sum(e.get("count", 0) for e in summary.get("error_summary") or [] if isinstance(e, dict)))
    if not (folder / RECORDS).is_file():
        raise ExportError(f"AIPerf wrote no per-request records ({folder / RECORDS}): its run did not finish")
    return CellExport(folder, values, completed, errors, requests(folder / RECORDS, phase), phase)


def requests(path: Path, phase: str | None = None) -> tuple[Request, ...]:
    """The profiled requests in ``path`` that succeeded (of phase ``phase`` where given), in the order they were
    sent (warm-up ones and failed ones left out: neither has a TTFT that belongs to the cell's load)."""
    out = []
    try:
        lines = path.read_text().splitlines()
    except OSError as e:
        raise ExportError(f"cannot read AIPerf's export {path}: {e}") from None
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            meta, got = rec["metadata"], rec.get("metrics") or {}
            if rec.get("error") or meta.get("benchmark_phase", "profiling") != "profiling" or \
                    phase not in (None, meta.get("phase_name")):
                continue
            out.append(Request(int(meta["request_start_ns"]), _measure(got["time_to_first_token"]),
                               _optional(got.get("input_sequence_length")),
                               _optional(got.get("usage_prompt_cache_read_tokens")),
                               str(meta.get("conversation_id", "")), _optional(got.get("http_req_connecting"))))
        except (ValueError, KeyError, TypeError) as e:
            raise ExportError(f"{path} line {n} is not an AIPerf 0.13 request record (metadata.request_start_ns, "
                              f"metrics.time_to_first_token): {type(e).__name__}: {e}") from None
    return tuple(sorted(out, key=lambda r: r.start_ns))


def _measure(entry: Mapping[str, Any]) -> float:
    return float(entry["value"]) * _SCALE[entry["unit"]]


def _optional(entry: Mapping[str, Any] | None) -> float | None:
    return None if entry is None else _measure(entry)


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

