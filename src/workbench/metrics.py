"""Every metric a finding may carry, declared once with its unit.

Findings store raw values in the declared unit; notebooks, CLI, report and blueprint all render
them through :func:`render`, so a number reads the same everywhere.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Metric:
    tag: str
    header: str
    unit: str  # tokens | blocks | bytes | s | ratio | count | bool | p | x
    description: str


_UNIT_FMT = {
    "tokens": lambda v: f"{v:,.0f} tok",
    "blocks": lambda v: f"{v:,.0f} blk",
    "bytes": lambda v: _bytes(v),
    "s": lambda v: f"{v * 1e3:.3g} ms" if abs(v) < 1 else f"{v:.3g} s",
    "ratio": lambda v: f"{v:.1%}",
    "count": lambda v: f"{v:,.0f}",
    "bool": lambda v: "yes" if v else "no",
    "p": lambda v: f"p={v:.3g}",
    "x": lambda v: f"{v:.3g}×",
}


def _bytes(v: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(v) < 1024 or unit == "GiB":
            return f"{v:,.0f} {unit}" if unit == "B" else f"{v:.2f} {unit}"
        v /= 1024
    return f"{v}"  # pragma: no cover


_DECLARED = [
    # reuse accounting
    Metric("prompt_tokens", "prompt", "tokens", "tokens in the request's prompt"),
    Metric("reused_tokens", "reused", "tokens", "prompt tokens served from cached KV"),
    Metric("computed_tokens", "computed", "tokens", "prompt tokens evaluated by the engine"),
    Metric("expected_reused_tokens", "expected reuse", "tokens", "reuse computed from the token ids (ground truth)"),
    Metric("reuse_fraction", "reuse fraction", "ratio", "reused / reusable prompt tokens"),
    Metric("reuse_exact_fraction", "exact rows", "ratio", "fraction of requests whose reported reuse equals ground truth"),
    Metric("max_reuse_error_tokens", "max reuse error", "tokens", "largest |reported − ground truth| over the matrix"),
    Metric("disagreements", "disagreements", "count", "requests where channels disagree"),
    Metric("granularity_tokens", "granularity", "tokens", "smallest unit in which the engine reports reuse"),
    Metric("block_tokens", "block size", "tokens", "tokens per KV block"),
    # retention / pressure
    Metric("capacity_tokens", "KV capacity", "tokens", "KV capacity the engine really has"),
    Metric("capacity_blocks", "KV capacity", "blocks", "KV capacity in blocks"),
    Metric("pinned_survival_max_pressure", "survives up to", "x", "largest pressure (× free capacity) the pinned prefix survived"),
    Metric("survival_at_max_pressure", "survival @max", "ratio", "fraction of the pinned prefix reused at the highest pressure"),
    Metric("overflow_errors", "overflow errors", "count", "newcomers refused with an explicit overflow error"),
    Metric("silent_evictions", "silent evictions", "tokens", "pinned tokens lost without an error"),
    # timing
    Metric("ttft_cold_s", "TTFT cold", "s", "median time to first token, cold"),
    Metric("ttft_warm_s", "TTFT warm", "s", "median time to first token, prefix reused"),
    Metric("ttft_ratio", "TTFT warm/cold", "x", "median warm TTFT over median cold TTFT"),
    Metric("ks_p_same_manifest", "KS p (same)", "p", "two-sample KS p-value, repeat vs cold, same manifest"),
    Metric("ks_p_other_manifest", "KS p (other)", "p", "two-sample KS p-value, other manifest vs cold"),
    Metric("cross_manifest_reused_tokens", "cross-manifest reuse", "tokens", "tokens reused across manifests (must be 0)"),
    # capacity policy
    Metric("budget_bytes", "KV budget", "bytes", "byte budget the policy set"),
    Metric("budget_tokens", "KV budget", "tokens", "token budget derived from the byte budget"),
    Metric("measured_capacity_tokens", "measured capacity", "tokens", "capacity observed by filling the cache"),
    Metric("kv_bytes_per_token", "KV bytes/token", "bytes", "bytes of K and V per token, all layers"),
    Metric("kv_buffer_bytes", "KV buffer", "bytes", "size of the engine's KV buffer"),
    Metric("capacity_error", "capacity error", "ratio", "|measured − budget| / budget"),
    # connector / state export
    Metric("export_unit_tokens", "export unit", "tokens", "smallest unit of KV the engine exports"),
    Metric("state_bytes", "state size", "bytes", "bytes of one exported sequence state"),
    Metric("shifted_import_exact", "shifted import exact", "bool", "shifted import continues with identical greedy tokens"),
    Metric("restored_identical", "restore identical", "bool", "restored state continues with identical greedy tokens"),
    # surfaces
    Metric("symbols_present", "symbols present", "count", "expected API symbols found in the installed release"),
    Metric("symbols_missing", "symbols missing", "count", "expected API symbols missing or changed"),
    Metric("headers", "headers", "count", "C/C++ headers shipped"),
    Metric("executor_symbols", "executor symbols", "count", "exported executor symbols in shared libraries"),
    Metric("rows_verified", "rows verified", "count", "contract rows whose mechanism exists as expected"),
    Metric("rows_total", "rows", "count", "contract rows checked"),
    # benchmark
    Metric("cell_over_raw", "cell/raw", "x", "median ratio of cell time to raw llama-cpp-python time"),
    # agentic loop (workbench loop)
    Metric("turns", "turns", "count", "agent-loop turns replayed per arm"),
    Metric("reuse_efficiency", "reuse efficiency", "ratio", "reused / theoretically reusable prompt tokens, over the loop"),
    Metric("unexplained_miss_tokens", "unexplained misses", "tokens", "reusable tokens recomputed for no attributed cause"),
    Metric("ttft_p50_s", "TTFT p50", "s", "median time from a turn's EnsurePrefix to its first decoded token"),
    Metric("ttft_p90_s", "TTFT p90", "s", "90th percentile of that time"),
    Metric("ttft_per_suffix_token_s", "TTFT per suffix token", "s", "least-squares TTFT slope per computed prompt token"),
    Metric("ttft_per_context_token_s", "TTFT per context token", "s", "least-squares TTFT slope per prompt (context) token"),
    Metric("loop_time_s", "loop time", "s", "end-to-end time of every turn, summed"),
    Metric("speedup_vs_best_llamacpp", "speed-up", "x", "best llama.cpp arm's loop time / this arm's (paired turns)"),
    Metric("speedup_ci_low", "speed-up CI low", "x", "lower bound of the 95% bootstrap CI of that speed-up"),
    Metric("speedup_ci_high", "speed-up CI high", "x", "upper bound of the 95% bootstrap CI of that speed-up"),
    Metric("acceptance_rate", "draft acceptance", "ratio", "accepted / drafted speculative tokens"),
    Metric("mean_accepted_tokens", "accepted per draft", "tokens", "mean accepted tokens per verification that carried a draft"),
    Metric("decode_speedup_copy_heavy", "decode speed-up (copy-heavy)", "x",
           "median per-turn decode time of the plain llama.cpp arm over this arm's, on copy-heavy turns"),
]

METRICS: dict[str, Metric] = {m.tag: m for m in _DECLARED}


def get(tag: str) -> Metric:
    try:
        return METRICS[tag]
    except KeyError:
        raise KeyError(f"metric {tag!r} is not declared in workbench.metrics") from None


def render(tag: str, value: Any) -> str:
    """Format ``value`` in the declared unit of ``tag``."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return _UNIT_FMT["bool"](value) if isinstance(value, bool) else str(value)
    return _UNIT_FMT[get(tag).unit](value)
