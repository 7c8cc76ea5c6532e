"""Every metric a finding may carry, declared once with its unit and its source.

Findings store raw values in the declared unit; notebooks, CLI, report and blueprint all render
them through :func:`render`, so a number reads the same everywhere. The source says how far a
number can be trusted: ``engine`` (read back from the engine itself: its KV cells, logits, its own
reuse counters, refusals), ``timed`` (wall-clock time around the engine's work, measured by the
workbench), ``cell`` (the cell's own bookkeeping or a parameter it was given, which cannot confirm
anything) or ``derived`` (computed from other metrics). A metric's declared source is where its values come
from on every engine; where that differs by engine (vLLM's reported reuse is its own ``num_cached_tokens``,
llama.cpp's the cell's arithmetic), the finding records the source of the values behind it, which wins
(:func:`source_of`). Only ``engine`` values can carry a verdict, and only when they support it: each probe
rule states the value of each metric it rests on (:class:`Support`, :attr:`workbench.probes.Outcome.rests_on`).
"""

from __future__ import annotations

import enum
import math
import operator
from dataclasses import dataclass
from typing import Any, Iterable, Literal, Mapping

Source = Literal["engine", "timed", "cell", "derived"]
SOURCES: tuple[str, ...] = ("engine", "timed", "cell", "derived")


class Unit(enum.Enum):
    """A metric's stored unit. ``convert`` scales a stored value to a display unit; ``format`` renders it."""

    TOKENS = "tokens"
    BLOCKS = "blocks"
    BYTES = "bytes"
    SECONDS = "s"
    RATIO = "ratio"
    COUNT = "count"
    BOOL = "bool"
    P = "p"
    TIMES = "x"
    LOGIT = "logit"
    SD = "sd"  # standard deviations of a distribution the description names
    TOKENS_PER_S = "tokens/s"
    REQUESTS_PER_S = "requests/s"

    def convert(self, value: float, to: str) -> float:
        """``value`` (in this unit) expressed in ``to``, e.g. ``Unit.SECONDS.convert(0.2, "ms") == 200``."""
        try:
            return value * _SCALES[self][to]
        except KeyError:
            raise ValueError(f"cannot convert {self.value} to {to!r}; known: {', '.join(_SCALES.get(self, {}))}") from None

    def format(self, value: Any) -> str:
        if self is Unit.BOOL or isinstance(value, bool):
            return "yes" if value else "no"
        return _FORMAT[self](value)


_SCALES: dict[Unit, dict[str, float]] = {
    Unit.SECONDS: {"s": 1.0, "ms": 1e3, "us": 1e6},
    Unit.BYTES: {"B": 1.0, "KiB": 2.0**-10, "MiB": 2.0**-20, "GiB": 2.0**-30},
    Unit.RATIO: {"ratio": 1.0, "%": 100.0},
    Unit.TOKENS: {"tokens": 1.0},
}


def _seconds(v: float) -> str:
    return f"{Unit.SECONDS.convert(v, 'ms'):.3g} ms" if abs(v) < 1 else f"{v:.3g} s"


def _bytes(v: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        scaled = Unit.BYTES.convert(v, unit)
        if abs(scaled) < 1024 or unit == "GiB":
            return f"{scaled:,.0f} {unit}" if unit == "B" else f"{scaled:.2f} {unit}"
    raise AssertionError("unreachable")  # pragma: no cover


_FORMAT = {
    Unit.TOKENS: lambda v: f"{v:,.0f} tok",
    Unit.BLOCKS: lambda v: f"{v:,.0f} blk",
    Unit.BYTES: _bytes,
    Unit.SECONDS: _seconds,
    Unit.RATIO: lambda v: f"{Unit.RATIO.convert(v, '%'):.1f}%",
    Unit.COUNT: lambda v: f"{v:,.0f}",
    Unit.P: lambda v: f"p={v:.3g}",
    Unit.TIMES: lambda v: f"{v:.3g}×",
    Unit.LOGIT: lambda v: f"{v:.3g}",
    Unit.SD: lambda v: f"{v:.3g} σ",
    Unit.TOKENS_PER_S: lambda v: f"{v:.3g} tok/s",
    Unit.REQUESTS_PER_S: lambda v: f"{v:.3g} req/s",
}


@dataclass(frozen=True)
class Metric:
    tag: str
    header: str
    unit: Unit
    description: str
    source: Source
    varies: bool = False  # its source differs by engine (a cell's bookkeeping here, an engine's counter there)

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(f"metric {self.tag}: source must be one of {SOURCES}")


def _m(tag: str, header: str, unit: str, source: Source, description: str, varies: bool = False) -> Metric:
    return Metric(tag, header, Unit(unit), description, source, varies)


_DECLARED = [
    # reuse accounting
    _m("prompt_tokens", "prompt", "tokens", "cell", "tokens in the request's prompt"),
    _m("reused_tokens", "reused", "tokens", "cell", "prompt tokens the cell reported as served from cached KV", varies=True),
    _m("computed_tokens", "computed", "tokens", "cell", "prompt tokens the cell sent to the engine"),
    _m("expected_reused_tokens", "expected reuse", "tokens", "derived", "reuse computed from the token ids"),
    _m("engine_resident_tokens", "KV read back", "tokens", "engine",
       "tokens whose KV the engine itself holds for the sequence, from its first position up to the first hole "
       "(llama.cpp: the cells' positions in llama_state_seq_get_data)"),
    _m("engine_reused_tokens", "engine reuse", "tokens", "engine",
       "prompt tokens the engine's own per-request counter reports as served from cache (vLLM num_cached_tokens, "
       "TensorRT-LLM perf_metrics)"),
    _m("engine_counted_requests", "engine-counted requests", "count", "engine",
       "requests whose result from the engine carried its own reuse count (vLLM num_cached_tokens, TensorRT-LLM "
       "perf_metrics); 0 when the engine returned none"),
    _m("engine_reuse_exact_fraction", "engine counter exact", "ratio", "engine",
       "fraction of requests whose reuse, as the engine's own per-request counter reports it, equals the "
       "token-id expectation"),
    _m("logits_max_abs_diff", "logits Δmax", "logit", "engine",
       "largest |logit| difference between a reused request and a cold recompute of the same tokens"),
    _m("logits_layout_floor", "logits noise floor", "logit", "engine",
       "median over requests of the |logit| difference between two cold computations of one prompt at other KV "
       "cells: the engine's own noise, below which a reused request's difference says nothing"),
    _m("reuse_fraction", "reuse fraction", "ratio", "cell", "reused / reusable prompt tokens, as the cell reports"),
    _m("engine_reuse_fraction", "engine reuse fraction", "ratio", "engine",
       "prefix tokens still held by the engine (read back) / prefix tokens"),
    _m("reuse_exact_fraction", "exact rows", "ratio", "cell",
       "fraction of requests whose cell-reported reuse equals the token-id expectation", varies=True),
    _m("max_reuse_error_tokens", "max reuse error", "tokens", "cell", "largest |reported − expected| over the matrix", varies=True),
    _m("disagreements", "disagreements", "count", "derived", "requests where channels disagree"),
    _m("granularity_tokens", "granularity", "tokens", "cell", "smallest unit in which the cell reports reuse"),
    _m("block_tokens", "block size", "tokens", "cell", "tokens per KV block, as the cell describes it"),
    # retention / pressure
    _m("capacity_tokens", "KV capacity", "tokens", "cell", "KV capacity the cell describes"),
    _m("capacity_blocks", "KV capacity", "blocks", "cell", "KV capacity in blocks"),
    _m("pinned_survival_max_pressure", "survives up to", "x", "derived",
       "largest pressure (× free capacity) at which the engine still held the whole pinned prefix"),
    _m("survival_at_max_pressure", "survival @max", "ratio", "engine",
       "fraction of the pinned prefix the engine still held at the highest pressure (its KV read back or its own "
       "reuse counter)"),
    _m("reported_survival_at_max_pressure", "reported survival @max", "ratio", "cell",
       "fraction of the pinned prefix the cell reported reused at the highest pressure (its bookkeeping)"),
    _m("admitted_load", "admitted load", "x", "derived",
       "filler tokens the engine admitted over the ramp, × free capacity (refused fillers excluded)"),
    _m("overflow_errors", "overflow errors", "count", "cell", "newcomers refused with an explicit overflow error"),
    _m("engine_refusals", "engine refusals", "count", "cell",
       "fills stopped because the engine refused (llama.cpp: llama_decode returned 1); one by construction of "
       "the fill, so a count, not evidence"),
    _m("silent_evictions", "silent evictions", "tokens", "derived",
       "pinned tokens lost without an error (baseline reuse × lost fraction)"),
    # timing
    _m("ttft_cold_s", "TTFT cold", "s", "timed", "median time to the first decoded token, cold"),
    _m("ttft_warm_s", "TTFT warm", "s", "timed", "median time to the first decoded token, prefix reused"),
    _m("ttft_iqr_s", "TTFT IQR", "s", "timed", "interquartile range of the cold TTFT samples"),
    _m("ttft_warm_iqr_s", "TTFT warm IQR", "s", "timed", "interquartile range of the warm TTFT samples"),
    _m("ttft_ratio", "TTFT warm/cold", "x", "derived", "median warm TTFT over median cold TTFT"),
    _m("ttft_ratio_ci_low", "TTFT warm/cold CI low", "x", "derived",
       "lower bound of the percentile bootstrap CI of that ratio (paired trials; the finding's notes give B and level)"),
    _m("ttft_ratio_ci_high", "TTFT warm/cold CI high", "x", "derived", "upper bound of that CI"),
    _m("ttft_other_s", "TTFT other key", "s", "timed", "median time to the first decoded token under another key"),
    _m("ttft_ratio_other", "TTFT other/cold", "x", "derived",
       "median other-key TTFT over median cold TTFT (1 when keys are isolated; below 1 when KV crossed keys)"),
    _m("ttft_ratio_other_ci_low", "TTFT other/cold CI low", "x", "derived",
       "lower bound of the percentile bootstrap CI of that ratio (paired trials; the finding's notes give B and level)"),
    _m("ttft_ratio_other_ci_high", "TTFT other/cold CI high", "x", "derived", "upper bound of that CI"),
    _m("ks_p_same_manifest", "KS p (same)", "p", "derived", "two-sample KS p-value, repeat vs cold, same manifest"),
    _m("ks_p_other_manifest", "KS p (other)", "p", "derived", "two-sample KS p-value, other manifest vs cold"),
    _m("tost_p_other_manifest", "TOST p (other)", "p", "derived",
       "equivalence (TOST) p-value, other manifest vs cold, paired by trial on log TTFT, at the stated margin"),
    _m("cross_manifest_reused_tokens", "cross-manifest reuse", "tokens", "cell",
       "tokens the cell reported reused across manifests (must be 0)", varies=True),
    _m("engine_cross_manifest_reused_tokens", "engine cross-manifest reuse", "tokens", "engine",
       "tokens the engine's own per-request counter reported reused across manifests (must be 0)"),
    _m("engine_lora_base_reused_tokens", "LoRA base repeat reuse", "tokens", "engine",
       "prompt tokens the engine's own counter reported reused by a repeat of a base-model request (no adapter) in "
       "the adapter-enabled engine: the base KV was there to be reused"),
    _m("engine_lora_cross_reused_tokens", "LoRA cross reuse", "tokens", "engine",
       "prompt tokens the engine's own counter reported reused by an adapter request right after the base model "
       "cached the same prompt under the same key (the cell's salt bypassed); 0 when the engine keys KV by adapter"),
    _m("engine_lora_reused_tokens", "LoRA repeat reuse", "tokens", "engine",
       "prompt tokens the engine's own counter reported reused by a repeat of that adapter request"),
    _m("lora_changed_output", "LoRA changed output", "bool", "engine",
       "the engine's greedy tokens for one prompt differ with the adapter and without it (the adapter was applied)"),
    # capacity policy
    _m("budget_bytes", "KV budget", "bytes", "derived", "byte budget the policy set"),
    _m("budget_tokens", "KV budget", "tokens", "derived", "token budget derived from the byte budget"),
    _m("measured_capacity_tokens", "measured capacity", "tokens", "engine",
       "capacity observed by filling the cache until the engine refused (llama.cpp) or evicted (vLLM)"),
    _m("kv_bytes_per_token", "KV bytes/token", "bytes", "cell",
       "bytes of K and V per token, all layers, from the model config's geometry (not the engine's)"),
    _m("engine_kv_bytes_per_token", "engine KV bytes/token", "bytes", "engine",
       "bytes of K and V per token, all layers, as the engine states them (llama.cpp: the row sizes in its sequence "
       "state; vLLM: page_size_bytes × layers / block_size of its kv_cache_config)"),
    _m("engine_kv_bytes", "engine KV bytes", "bytes", "engine",
       "KV bytes the engine took for a budget: the storage of its KV tensors (vLLM), or the cells it accepted before "
       "refusing × its stated bytes per cell (llama.cpp, which exposes no buffer size)"),
    _m("over_budget_bytes", "over budget", "bytes", "derived", "engine KV bytes − the byte budget"),
    _m("kv_buffer_bytes", "KV buffer", "bytes", "engine",
       "size of the engine's KV buffer, as the engine's log states it (llama.cpp: in MiB rounded to 0.01)"),
    _m("capacity_error", "capacity error", "ratio", "derived",
       "(capacity accepted × engine bytes per token − budget) / budget, the worst over the budgets"),
    _m("max_overshoot", "max overshoot", "ratio", "derived",
       "largest (engine KV bytes − budget) / budget over the budgets"),
    # connector / state export
    _m("export_unit_tokens", "export unit", "tokens", "derived",
       "smallest KV range exported: the range requested when the engine's export held just that, else the "
       "configured block size"),
    _m("connector_calls", "connector calls", "count", "engine",
       "calls the engine itself made into the recording KV connector"),
    _m("state_bytes", "state size", "bytes", "engine", "bytes of one exported sequence state"),
    _m("state_bytes_per_token", "state bytes/token", "bytes", "engine",
       "growth of an exported sequence state per token: K/V rows plus the cell's position and sequence ids"),
    _m("shifted_import_exact", "shifted import exact", "bool", "engine",
       "shifted import continues with identical greedy tokens"),
    _m("shifted_logits_max_abs_diff", "shifted logits Δmax", "logit", "engine",
       "largest |logit| difference after a shifted import against the same tokens computed cold in the source"),
    _m("restored_identical", "restore identical", "bool", "engine",
       "restored state continues with identical greedy tokens"),
    _m("subrange_export", "sub-range export", "bool", "engine",
       "a trimmed copy of a sequence exported only the kept range"),
    # surfaces
    _m("symbols_present", "symbols present", "count", "engine", "expected API symbols found in the installed release"),
    _m("symbols_missing", "symbols missing", "count", "engine", "expected API symbols missing or changed"),
    _m("headers", "headers", "count", "engine", "C/C++ headers shipped"),
    _m("executor_symbols", "executor symbols", "count", "engine", "exported executor symbols in shared libraries"),
    _m("rows_verified", "rows verified", "count", "engine",
       "contract rows whose mechanisms exist with the expected parameter names"),
    _m("rows_total", "rows", "count", "derived", "contract rows checked"),
    # benchmark
    _m("cell_over_raw", "cell/raw", "x", "derived", "median ratio of cell time to raw llama-cpp-python time"),
    _m("round_s", "round", "s", "timed", "wall time of one benchmark round (prefill + decode)"),
    _m("time_ratio", "time ratio", "x", "derived", "median ratio of one arm's round time to another's"),
    # served load (workbench evaltable: AIPerf's summary of one cell, backend × workload × concurrency)
    _m("output_tokens_per_s", "output tokens/s", "tokens/s", "timed",
       "output tokens per second over the cell's benchmark, all requests together (AIPerf output_token_throughput)"),
    _m("requests_per_s", "requests/s", "requests/s", "timed",
       "requests completed per second over the cell's benchmark (AIPerf request_throughput)"),
    _m("load_ttft_p50_s", "TTFT p50", "s", "timed",
       "median time from sending a request to its first streamed token, under the cell's load (AIPerf)"),
    _m("load_ttft_p95_s", "TTFT p95", "s", "timed", "95th percentile of that time"),
    _m("load_itl_s", "ITL", "s", "timed", "mean time between streamed tokens after the first (AIPerf inter_token_latency)"),
    _m("load_latency_p50_s", "end-to-end p50", "s", "timed",
       "median time from sending a request to its last token (AIPerf request_latency)"),
    _m("engine_cached_prompt_tokens", "engine cached tokens", "tokens", "engine",
       "prompt tokens the server reported read from its cache (usage.prompt_tokens_details.cached_tokens), summed "
       "over the cell's requests"),
    _m("engine_cache_read_fraction", "engine cache read", "ratio", "engine",
       "those cached tokens / the prompt tokens the server counted, over the cell's requests"),
    _m("goodput_per_s", "goodput", "requests/s", "timed",
       "requests per second that met the table's SLO (TTFT and ITL each at most the setup's), over the cell's "
       "benchmark (AIPerf goodput)"),
    _m("load_ttft_cold_p50_s", "TTFT cold p50", "s", "timed",
       "median TTFT of the cell's requests that did not find their prompt cached: the server read less than half of "
       "it from its cache (or, where it reports no count, the first `concurrency` requests of each run's first "
       "phase; a later phase's find the prefix computed: the row's split says which)"),
    _m("load_ttft_cached_p50_s", "TTFT cached p50", "s", "timed",
       "median TTFT of the cell's requests that found their prompt cached (the same split)"),
    _m("engine_repeat_prefix_cached", "repeats' prefix cached", "ratio", "engine",
       "over a shared-prefix workload's requests sent after each run's first `concurrency` (which could find the "
       "prefix cached), the median of the server's cached prompt tokens (usage.prompt_tokens_details.cached_tokens) "
       "over the shared prefix's tokens"),
    _m("engine_metrics_prefix_cached", "/metrics prefix cached", "ratio", "engine",
       "the server's own /metrics cache counter (llama-server llamacpp:prompt_tokens_cached_total, vLLM "
       "vllm:prefix_cache_hits_total), its rise over a shared-prefix workload's runs, per repeat over the shared "
       "prefix's tokens: a second reading of engine_repeat_prefix_cached where the engine keeps it apart (vLLM); on "
       "llama-server the same variable, checked against the responses' sum"),
    _m("engine_metrics_cached_tokens", "/metrics cached tokens", "tokens", "engine",
       "that counter's rise over the shared-prefix runs: prompt tokens the server read from its cache"),
    _m("engine_metrics_hit_rate", "/metrics hit rate", "ratio", "engine",
       "over the shared-prefix runs, the server's /metrics cached prompt tokens over those it looked up (llama-server: "
       "cached + computed, llamacpp:prompt_tokens_total; vLLM: vllm:prefix_cache_queries_total)"),
    _m("expected_prefix_hit_rate", "expected hit rate", "ratio", "derived",
       "the shared-prefix runs' theoretical hit rate: every repeat reads the whole shared prefix and nothing else is "
       "read, over the prompt tokens the server counted (computed here)"),
    _m("load_ttft_repeat_over_first", "TTFT repeats/first", "x", "derived",
       "median TTFT of those repeats over the median TTFT of each run's first requests (AIPerf's timings)"),
    _m("load_ttft_repeat_over_first_ci_low", "TTFT repeats/first CI low", "x", "derived",
       "lower bound of its percentile bootstrap CI (each group resampled on its own; the finding's notes give B "
       "and level)"),
    _m("load_ttft_repeat_over_first_ci_high", "TTFT repeats/first CI high", "x", "derived", "upper bound of that CI"),
    # agentic loop (workbench loop)
    _m("turns", "turns", "count", "derived", "agent-loop turns replayed per arm"),
    _m("compared_turns", "compared turns", "count", "derived",
       "turns the arm served with the work asked and a greedy decode of the model, as the loop's llama.cpp scorer "
       "read it (the only ones timed against others)"),
    _m("excluded_turns", "excluded turns", "count", "derived",
       "turns left out of every comparison: less work than asked, or tokens greedy decoding would not pick"),
    _m("greedy_gap_max_sd", "largest greedy gap", "sd", "derived",
       "over the arm's turns, the largest gap between the scorer's top logit and the token the arm emitted, in "
       "standard deviations of that position's logits (0: every token the scorer's argmax; read from llama.cpp's "
       "logits, teacher-forced)"),
    _m("scorer_numeric_gap_sd", "batched-vs-sequential gap", "sd", "engine",
       "for an arm whose tokens were verified in batches (prompt lookup), the largest difference over its turns "
       "between each of its tokens' greedy gap read in the batches it fed (replayed on the scorer) and read by "
       "sequential decode, both from llama.cpp's logits of the same model: the batch kernels' numerics, which "
       "widen the arm's near-tie margin"),
    _m("near_tie_margin_sd", "near-tie margin", "sd", "derived",
       "the near-tie margin the arm's tokens were held to: the equal-work rule's, plus its batched-vs-sequential "
       "gap (scorer_numeric_gap_sd) where measured and within the cap"),
    _m("reuse_efficiency", "reuse efficiency", "ratio", "engine",
       "reused / theoretically reusable prompt tokens over the loop, as the engine counted them (llama.cpp: its eval "
       "counters; vLLM: num_cached_tokens; TensorRT-LLM: perf_metrics)", varies=True),
    _m("unexplained_miss_tokens", "unexplained misses", "tokens", "derived",
       "reusable tokens recomputed for no attributed cause"),
    _m("ttft_p50_s", "TTFT p50", "s", "timed", "median time from a turn's EnsurePrefix to its first decoded token"),
    _m("ttft_p90_s", "TTFT p90", "s", "timed", "90th percentile of that time"),
    _m("ttft_p95_s", "TTFT p95", "s", "timed", "95th percentile of that time"),
    _m("ttft_per_suffix_token_s", "TTFT per suffix token", "s", "derived",
       "least-squares TTFT slope per computed prompt token"),
    _m("ttft_per_context_token_s", "TTFT per context token", "s", "derived",
       "least-squares TTFT slope per prompt (context) token"),
    _m("itl_p50_s", "ITL (TPOT) p50", "s", "timed",
       "median over turns of a turn's mean time between its decoded tokens after the first (the request's TPOT, "
       "its mean inter-token latency, as vllm bench serve and AIPerf define them)"),
    _m("e2e_p50_s", "end-to-end p50", "s", "timed", "median time from a turn's EnsurePrefix to its last decoded token"),
    _m("loop_output_tokens_per_s", "output throughput", "tokens/s", "timed",
       "tokens the arm decoded over the loop / its loop time: output throughput of one sequential agent"),
    _m("loop_time_s", "loop time", "s", "timed", "end-to-end time of every turn, summed"),
    _m("speedup_vs_best_llamacpp", "speed-up", "x", "derived", "best llama.cpp arm's loop time / this arm's (paired turns)"),
    _m("speedup_ci_low", "speed-up CI low", "x", "derived", "lower bound of the 95% bootstrap CI of that speed-up"),
    _m("speedup_ci_high", "speed-up CI high", "x", "derived", "upper bound of the 95% bootstrap CI of that speed-up"),
    _m("speedup_turns", "speed-up turns", "count", "derived",
       "turns that speed-up and its CI are over (both arms' compared turns); under 10 the CI is shown as \"CI over n "
       "turns\": it cannot reach past those turns' own ratios, so it is narrower than 95%"),
    _m("speedup_excluded_against_low", "speed-up CI low, excluded turns against", "x", "derived",
       "lower bound of the 95% bootstrap CI of that speed-up over every turn both arms served, each excluded one counted "
       "against this arm (its time no less than the best arm's there): a confirmation must hold here too"),
    _m("speedup_excluded_favour_high", "speed-up CI high, excluded turns in favour", "x", "derived",
       "upper bound of the same CI with each excluded turn counted in this arm's favour (its time no more than the best "
       "arm's there): a refutation must hold here too"),
    _m("decode_tokens_vs_best_llamacpp", "decoded tokens vs best", "ratio", "derived",
       "this arm's decoded tokens / the best llama.cpp arm's over the compared turns (1: the same lengths; a greedy "
       "stop on one arm where the other broke a near-tie and decoded on makes them differ)"),
    _m("acceptance_rate", "draft acceptance", "ratio", "cell",
       "accepted / drafted speculative tokens (engine-sourced where the engine counts its own drafts)", varies=True),
    _m("mean_accepted_tokens", "accepted per draft", "tokens", "cell",
       "mean accepted tokens per verification that carried a draft", varies=True),
    _m("decode_speedup_copy_heavy", "decode speed-up (copy-heavy)", "x", "derived",
       "median per-turn decode time of the plain arm on the same engine and transport (llamacpp-server for "
       "llamacpp-server-spec) over this arm's, on turns where this arm's own output is copy-heavy and identical to "
       "the plain arm's"),
    # the KV event plane (workbench.events)
    _m("engine_block_tokens", "engine block", "tokens", "engine", "tokens per full block in the engine's stored events"),
    _m("inventory_exact_fraction", "inventory exact", "ratio", "engine",
       "fraction of requests whose engine-reported cached tokens equal what an inventory built from the engine's "
       "own events predicted"),
    _m("inventory_predicted_hit_tokens", "predicted hits", "tokens", "derived",
       "cached tokens the event inventory predicted, summed over requests"),
    _m("removal_tested_requests", "eviction tested", "count", "derived",
       "requests on which the engine reported fewer cached tokens than an inventory ignoring removed events "
       "predicted (eviction touched the workload)"),
    _m("engine_evicted_blocks", "evicted blocks", "blocks", "engine", "blocks the engine's removed events named"),
    _m("hash_parity_fraction", "hash parity", "ratio", "engine",
       "fraction of the engine's stored-block hashes that the client recomputed from token ids"),
    _m("consumer_seen_fraction_min", "least seen", "ratio", "engine",
       "smallest fraction of the engine's event stream that one of several consumers received"),
    _m("lease_holder_seen_fraction", "lease holder saw", "ratio", "engine",
       "fraction of the engine's event stream that the consumer holding the endpoint's lease received"),
    _m("consumer_overlap_fraction", "shared events", "ratio", "engine",
       "fraction of the stream's sequence numbers that more than one consumer received"),
    _m("engine_lost_events", "lost events", "count", "engine",
       "sequence numbers the engine's stream skipped for a consumer (gaps)"),
    # the event ledger (workbench.probes.events_ledger)
    _m("ledger_stored_blocks", "stored", "blocks", "engine", "blocks the engine's stored events named"),
    _m("ledger_removed_blocks", "removed", "blocks", "engine", "blocks the engine's removed events named"),
    _m("ledger_resident_blocks", "ledger", "blocks", "engine",
       "blocks the event ledger holds (stored − removed, copies of one hash counted apart)"),
    _m("engine_capacity_blocks", "pool", "blocks", "engine",
       "blocks in the engine's KV pool as the engine reported it (TensorRT-LLM: its created event; vLLM: its block "
       "count)"),
    _m("ledger_overflow_blocks", "ledger beyond pool", "blocks", "engine",
       "ledger blocks beyond the pool the engine reported (above 0: blocks left with no removed event)"),
    _m("ledger_exact_fraction", "ledger exact", "ratio", "engine",
       "fraction of read-back requests whose engine-reported cached tokens equal the ledger's prediction"),
    _m("engine_evicted_min_blocks", "evicted (at least)", "blocks", "engine",
       "blocks the engine evicted, at least: the blocks its removed events named, or the blocks it stored beyond its "
       "pool, whichever is more (a block stored into a full pool displaced one, announced or not)"),
    _m("ledger_overclaimed_requests", "ledger overclaims", "count", "engine",
       "read-back requests the ledger predicted more cached tokens for than the engine reported: blocks its events "
       "still call held that the engine no longer serves"),
    _m("engine_held_blocks", "engine holds", "blocks", "engine",
       "blocks the engine's own prefix-cache index holds after the read-back, copies of one hash apart (vLLM "
       "in-process: the (hash, block) entries of the scheduler's BlockPool.cached_block_hash_to_block)"),
    _m("ledger_held_gap_blocks", "ledger − held", "blocks", "engine",
       "the ledger's blocks (stored − removed) minus the blocks the engine's own index holds: 0 where the ledger "
       "closes; above, blocks gone with no removed event; below, blocks held that no stored event announced"),
    _m("replay_resident_blocks", "replay", "blocks", "derived",
       "blocks an offline replay of the same requests (least recently used evicted) leaves held"),
    _m("replay_exact_fraction", "replay exact", "ratio", "derived",
       "fraction of requests whose engine-reported cached tokens equal the offline replay's"),
    _m("duplicate_copy_removals", "copy removals", "count", "engine",
       "removed events that took one copy of a hash the engine still held another of"),
    _m("reset_inventory_blocks", "held after clear", "blocks", "cell",
       "blocks the gateway's inventory (the workbench's consumer) held after the engine's cache was cleared or the "
       "engine restarted, before the next request"),
    _m("reset_clear_events", "inventory emptied", "count", "cell",
       "times the gateway's inventory was emptied after the engine's cache was cleared or it restarted, by the time "
       "the next request had run: on the engine's clear events and on the consumer's own resyncs (a sequence gone "
       "backwards, a gap it could not replay)"),
    _m("reset_engine_clear_signals", "clear signals", "count", "engine",
       "signals in the engine's own stream after its cache was cleared or it restarted, by the time the next request "
       "had run: clear events (vLLM AllBlocksCleared, TensorRT-LLM a new pool's created) and event ids numbered "
       "afresh (a restarted engine)"),
    _m("reset_engine_clear_signals_early", "clear signals before", "count", "engine",
       "the same signals of the engine's stream, arrived before the next request was sent"),
    _m("reset_engine_reused_tokens", "reuse after clear", "tokens", "engine",
       "cached tokens the engine reported for a request after its cache was cleared or it restarted"),
    _m("cross_tenant_predicted_tokens", "cross-tenant predicted", "tokens", "derived",
       "cached tokens the inventory predicted for a request under another tenant's salt"),
    _m("engine_cross_tenant_reused_tokens", "cross-tenant reuse", "tokens", "engine",
       "cached tokens the engine reported for a request under another tenant's salt"),
    # the gateway's sequential P/D shape (workbench.gateway.pd)
    _m("pd_external_tokens", "external KV", "tokens", "engine",
       "prompt tokens the generation endpoint's own counter says its KV connector supplied to the P/D request "
       "(vLLM: vllm:external_prefix_cache_hits_total, its difference over the leg)"),
    _m("pd_expected_external_tokens", "expected external", "tokens", "derived",
       "the prompt's tokens the connector moves (vLLM ExampleConnector: whole blocks of all but the last token)"),
    _m("pd_external_exact", "external = prefix", "bool", "engine",
       "the generation endpoint's own external count equals the original prompt's transferable prefix"),
    _m("pd_decode_cached_tokens", "decode cached", "tokens", "engine",
       "usage.prompt_tokens_details.cached_tokens of the generation leg (local and external hits together)"),
    _m("pd_output_matches_single", "P/D = single", "bool", "engine",
       "the P/D answer's greedy token ids equal one engine's for the same request"),
    _m("pd_zeroed_output_changed", "zeroed store changes output", "bool", "engine",
       "with the transferred KV zeroed in the store, the generation endpoint's token ids differ from one engine's"),
    _m("pd_early_exit_generation_requests", "gen requests on early exit", "count", "engine",
       "requests the generation endpoint's own counter finished while the relay served a request whose context leg "
       "had already finished (0 when the early exit holds)"),
    _m("pd_early_exits", "early exits", "count", "cell", "requests the relay answered from the context leg alone"),
    _m("pd_ttft_s", "TTFT P/D", "s", "timed",
       "median over the run's P/D requests, from the context leg's send to the generation leg's first token (the "
       "transfer and the first decode step included)"),
    _m("pd_context_s", "context leg", "s", "timed", "median round trip of the context leg (prefill and store)"),
    _m("single_ttft_s", "TTFT single", "s", "timed", "median time to the first token of the same requests on one engine"),
    # the gateway's shapes on a pool (workbench.gateway)
    _m("routing_hit_gain", "KV-exact hit gain", "ratio", "engine",
       "engine-read hit rate (cached_tokens / prompt tokens) of KV-exact routing minus the better fullproxy shape's, "
       "on the same requests"),
    _m("routing_hit_gain_ci_low", "hit gain CI low", "ratio", "engine",
       "lower bound of the paired 95% bootstrap CI of that gain (engine-read counts, resampled by request)"),
    _m("routing_hit_gain_ci_high", "hit gain CI high", "ratio", "engine",
       "upper bound of the paired 95% bootstrap CI of that gain"),
    _m("routing_kv_hit_rate", "KV-exact hit rate", "ratio", "engine",
       "engine-read cached_tokens / prompt tokens over the KV-exact shape's requests"),
    _m("routing_fullproxy_hit_rate", "fullproxy hit rate", "ratio", "engine",
       "engine-read cached_tokens / prompt tokens over the better fullproxy shape's requests"),
    _m("routing_best_hit_rate", "best placement", "ratio", "derived",
       "hit rate of the best placement (any earlier request's prefix, unbounded KV), computed by the workbench"),
    _m("routing_ttft_speedup", "TTFT speed-up", "x", "timed",
       "the better fullproxy shape's median TTFT over KV-exact's, on the same requests"),
    _m("routing_ttft_speedup_ci_low", "TTFT speed-up CI low", "x", "timed",
       "lower bound of the paired 95% bootstrap CI of that TTFT speed-up (resampled by request)"),
    _m("routing_retried_requests", "retried", "count", "cell",
       "requests retried on another endpoint after theirs died (the kill fault)"),
    _m("routing_unread_requests", "unread", "count", "cell",
       "requests whose answer carried no cached_tokens (an engine reading missing: no verdict rests on such a run)"),
    _m("routing_events_lost", "events lost", "count", "cell",
       "gaps in the endpoints' own event numbers that no replay recovered, plus served requests whose blocks "
       "never reached the inventory: the inventory was no longer the engine's"),
    # modeld's contract through the cell's daemon (contract.conformance): "engine work" is the engine's own cumulative
    # count of what it did, read before and after a call through the daemon's evidence, never from the adapter's
    # answers (CellSession.work_of: llama.cpp's llama_perf_context, prompt tokens evaluated and tokens generated;
    # vLLM's Prometheus counters through LLM.get_metrics, prompt tokens by source, prefix_cache_hits, generation
    # tokens, requests finished; TensorRT-LLM's iteration stats through LLM.get_stats, numCtxTokens,
    # kvCacheStats.reusedBlocks, iterations, numCompletedRequests)
    _m("conf_engine_work_stale_fence", "engine work, stale fence", "count", "engine",
       "engine work done while calls carrying a stale owner fence (or another owner's handle) were answered: 0 when "
       "no such call reached the engine"),
    _m("conf_wire_refusals", "wire refusals right", "ratio", "cell",
       "fence, handle and overflow refusals that came back over modeld's wire with the token and gRPC code "
       "runtime/transport/grpc/errors.go gives them, over those sent (the daemon's answers)"),
    _m("conf_engine_reuse_same", "engine reuse, same manifest", "tokens", "engine",
       "prompt tokens the engine reused for a repeat of the stable prefix under the same manifest"),
    _m("conf_engine_reuse_cross", "engine reuse, other manifest", "tokens", "engine",
       "prompt tokens the engine reused for the same stable prefix under a manifest of another runtime identity "
       "(must be 0)"),
    _m("conf_prefix_counters_exact", "PrefixStatus = engine", "ratio", "engine",
       "EnsurePrefix calls whose ReusedTokens and PrefilledTokens equal what the engine's own work counters, read "
       "beside the call, say it served from cache and computed (llama.h counts no hits: the KV it holds less what it "
       "computed), within its reuse granularity (a block), over those made"),
    _m("conf_suffix_counters_exact", "ContextReport counters = engine", "ratio", "engine",
       "PrefillSuffix calls whose ContextReport counters (PhysicalPrefill* or DeferredPrefill*) moved by what the "
       "engine did: the suffix computed then (physical), or nothing computed then and the suffix computed by the next "
       "decode (deferred)"),
    _m("conf_deferred_engine_work", "engine work at deferred prefill", "count", "engine",
       "engine work done during PrefillSuffix calls made in deferred mode (0 when the suffix was only deferred)"),
    _m("conf_deferred_carried", "decode carried the suffix", "bool", "engine",
       "the decode after a deferred PrefillSuffix computed at least the deferred suffix (less one block), by the "
       "engine's own work counter of prompt tokens computed"),
    _m("conf_engine_decoded_tokens", "engine decoded tokens", "tokens", "engine",
       "tokens the engine generated for a Decode (its result's ids)"),
    _m("conf_stream_frames", "Decode frames", "count", "cell",
       "frames that Decode's server stream delivered over the wire for that decode"),
    _m("conf_structured_valid", "structured output valid", "bool", "engine",
       "the engine's output under StructuredOutput{json_schema} parsed as JSON and validated against the schema"),
    _m("conf_caps_exercised", "capabilities exercised", "count", "derived",
       "residency capabilities whose operation the probe ran through the contract (RemoveTail: drop a tail and "
       "extend again; RecomputeRange: restore a snapshot's tokens without the engine's state, judged by the engine's "
       "counts and the greedy output, never by the report)"),
    _m("conf_caps_lies", "capabilities contradicted", "count", "engine",
       "exercised capabilities whose ExplainContext report contradicts what the engine did in their operation"),
    _m("conf_restore_output_equal", "restored output equal", "bool", "engine",
       "greedy decode after Restore into a fresh session equals the decode of the session snapshotted"),
    _m("conf_snapshot_engine_blob", "snapshot holds engine state", "bool", "cell",
       "the snapshot came back with a state_id: the engine's own state blob, kept by the daemon"),
    _m("conf_describe_kv_bytes_match", "Describe KV bytes = engine", "bool", "engine",
       "ModelInfo.kv_bytes_per_token equals the engine's KV bytes per token read again at the call by another path "
       "(llama.cpp: the growth of a sequence's state size per cell; vLLM: its KV tensors' bytes over the tokens its "
       "pool holds)"),
    _m("conf_describe_window", "Describe window", "tokens", "cell",
       "ModelInfo.effective_context for the requested NumCtx"),
    _m("conf_describe_window_right", "Describe window = NumCtx", "bool", "engine",
       "ModelInfo.effective_context equals the NumCtx asked for, within the context the engine itself was opened "
       "with (llama_n_ctx, max_model_len, max_seq_len)"),
    _m("conf_engine_work_overflow", "engine work, overflow", "count", "engine",
       "engine work done while requests past the session's NumCtx were refused (0 when refused before dispatch)"),
    _m("conf_engine_work_embed", "engine work, Embed", "count", "engine",
       "engine work done while Embed was answered"),
    _m("conf_embed_vector", "Embed vector length", "count", "engine",
       "floats in the vector Embed returned, the engine's embedding (0: refused)"),
    _m("conf_switch_engine_reuse", "engine reuse after switch", "tokens", "engine",
       "prompt tokens the engine reused, right after a reload of the same variant (so under the same salt), for a "
       "prefix it held before (must be 0)"),
    _m("conf_switch_generation", "generation advanced", "count", "cell",
       "how far LoadModel moved the slot's generation (1 for one switch)"),
    _m("conf_fatal_engine_failed", "engine failed", "bool", "engine",
       "the engine itself failed the call after its fault (its own error, e.g. llama_decode returning 2)"),
    _m("conf_engine_work_after_fatal", "engine work after fatal", "count", "engine",
       "engine work done while the poisoned session answered a call, the fault undone so that the engine serves "
       "again (0 when the session never went back to the engine)"),
    _m("conf_engine_work_after_heal", "engine work, fresh session", "count", "engine",
       "engine work a fresh session's call did after the fault was undone (> 0: the engine served again, so the "
       "poisoned session's 0 could have read otherwise)"),
    _m("conf_fatal_reported", "fatal reported", "bool", "cell",
       "session_fatal on the wire, and ExplainContext with Closed and FatalError, after the engine failed"),
    # the local-node benchmark report (runtime/benchreport), driven through the contract (contract.benchreport)
    _m("bench_cold_prefill_s", "cold full prefill", "s", "timed", "EnsurePrefix of the stable prefix, cold"),
    _m("bench_cold_prefix_tokens", "cold prefix", "tokens", "cell", "the stable prefix's tokens (PrefixTokens)"),
    _m("bench_warm_prefill_s", "warm same prefix", "s", "timed", "EnsurePrefix of the same prefix on the live session"),
    _m("bench_warm_hit_rate", "warm hit rate", "ratio", "cell", "ReusedTokens / PrefixTokens of that warm call"),
    _m("bench_warm_engine_reused", "warm engine reuse", "tokens", "engine",
       "prompt tokens the engine itself reused for the warm same-prefix call"),
    _m("bench_ttft_cold_s", "TTFT cold", "s", "timed", "the cold turn's time from Decode to its first chunk"),
    _m("bench_ttft_warm_changed_s", "TTFT warm changed suffix", "s", "timed",
       "the warm changed-suffix turn's time from Decode to its first chunk"),
    _m("bench_output_equals_cold", "warm = cold output", "bool", "engine",
       "the warm changed-suffix turn's greedy output equals a fresh session's on the same inputs (the engine's text)"),
    _m("bench_edited_engine_computed", "edited prefix computed", "tokens", "engine",
       "prompt tokens the engine computed for the edited stable segment (an actual cache miss computes some)"),
    _m("bench_edited_output_equals_cold", "edited = cold output", "bool", "engine",
       "the edited-segment turn's greedy output equals a fresh session's on the same inputs"),
    _m("bench_decode_tokens_per_s", "decode", "tokens/s", "timed", "the cold turn's streamed chunks per second"),
    # the step-function gates (workbench.certify: G1–G3 here, G4 the loop's) and the quality smoke
    _m("g1_candidate_tier_tokens", "G1 candidate tier", "tokens", "engine",
       "the largest ladder tier the candidate's engine served (a request of that many tokens decoded) under the memory "
       "budget every arm shares"),
    _m("g1_baseline_tier_tokens", "G1 llama.cpp tier", "tokens", "engine",
       "the largest ladder tier any llama.cpp profile served under that budget"),
    _m("g2_candidate_usable_tokens", "G2 candidate usable", "tokens", "derived",
       "the largest tier within the latency budget (p95 first output and turn time over the runs) for the candidate"),
    _m("g2_baseline_usable_tokens", "G2 llama.cpp usable", "tokens", "derived",
       "the same for the best llama.cpp arm"),
    _m("g2_usable_ratio", "G2 usable ratio", "x", "derived",
       "candidate's usable context over the best llama.cpp arm's (largest tiers within the budget)"),
    _m("g2_usable_ratio_low", "G2 ratio low", "x", "derived",
       "lower bound of that ratio from the ladder's brackets (candidate's largest usable / baseline's first unusable)"),
    _m("g2_usable_ratio_high", "G2 ratio high", "x", "derived", "upper bound of that ratio from the brackets"),
    _m("g3_prefill_ratio", "G3 prefill ratio", "x", "derived",
       "the best llama.cpp arm's prefill or first-output time over the candidate's, the median of per-run ratios (runs "
       "paired), at the 32k+ tier and metric where its lower bound is highest"),
    _m("g3_prefill_ratio_low", "G3 ratio low", "x", "derived",
       "lower bound of that ratio's percentile bootstrap interval over the runs (over 3 runs: the least run's ratio)"),
    _m("g3_prefill_ratio_high", "G3 ratio high", "x", "derived", "upper bound of that interval"),
    _m("a2_output_equals_cold", "A2 warm = cold", "bool", "engine",
       "the engine's greedy tokens after a warm suffix (ensure_prefix then prefill_suffix in one cell) equal its tokens "
       "for the whole prompt cold (certification tier A2)"),
    _m("task_pass_fraction", "task set passed", "ratio", "engine",
       "share of the quality smoke's tasks whose answer, the engine's greedy text, passed its checker"),
    # what the figures draw of evidence rows (one per request, turn, trial or step), where no metric above is that
    # quantity: a figure's trace names the metric it draws (workbench.panels.draws), so its unit is declared here once
    _m("ttft_s", "TTFT", "s", "timed",
       "one request's time to its first token (one trial, one turn, one request), measured by the workbench"),
    _m("step_s", "step time", "s", "timed",
       "wall time of one timed step (a set-up, a request, a warm-up, a contract call), measured around it"),
    _m("elapsed_s", "elapsed", "s", "timed", "seconds since what a timeline follows started (a consumer, a pool)"),
    _m("shape_hit_rate", "hit rate", "ratio", "engine",
       "engine-read cached_tokens / prompt tokens over one routing shape's requests"),
    _m("inventory_blocks", "inventory", "blocks", "engine",
       "blocks an endpoint's event inventory holds, built from the engine's own stored and removed events"),
    _m("consumer_seen_fraction", "share seen", "ratio", "engine",
       "fraction of the engine's event stream one consumer received"),
    _m("check_held", "check held", "bool", "derived",
       "one check of a probe held (yes), was contradicted (no) or was not read: what a check's marker shows"),
]

METRICS: dict[str, Metric] = {m.tag: m for m in _DECLARED}
ABSENCE = ("symbols_missing",)
"""The metrics that are the engine's own word that a mechanism is absent (symbols missing from the installed
package): on the claim's subject, a not-applicable rests on one of them, never on the cell's absence list."""


def get(tag: str) -> Metric:
    try:
        return METRICS[tag]
    except KeyError:
        raise KeyError(f"metric {tag!r} is not declared in workbench.metrics") from None


def render(tag: str, value: Any) -> str:
    """Format ``value`` in the declared unit of ``tag``."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if not isinstance(value, (bool, int, float)):
        return str(value)
    return get(tag).unit.format(value)


Op = Literal[">", ">=", "==", "!=", "<=", "<"]
_OPS = {">": operator.gt, ">=": operator.ge, "==": operator.eq, "!=": operator.ne, "<=": operator.le,
        "<": operator.lt}


@dataclass(frozen=True)
class Support:
    """The value of one metric that supports a verdict: ``metric op value``, e.g. isolation's ``refuted``
    rests on ``Support("engine_cross_manifest_reused_tokens", ">", 0)``. A rule states one per metric its
    verdict rests on; the guard reads the outcome's values against them, so a verdict cannot stand on a
    number that contradicts it."""

    metric: str
    op: Op
    value: float | None  # a bool for a bool metric; None only in a rule's declaration: the run's parameters set it

    def __post_init__(self) -> None:
        get(self.metric)
        if self.op not in _OPS:
            raise ValueError(f"support for {self.metric}: op must be one of {', '.join(_OPS)}, got {self.op!r}")

    def holds(self, v: Any) -> bool:
        return _OPS[self.op](v, self.value)

    def admits(self, recorded: "Support") -> bool:
        """Whether ``recorded`` is this declared support: the same metric and op, and the same value where the rule
        fixes one (``None``: a value the run's parameters set)."""
        return (recorded.metric, recorded.op) == (self.metric, self.op) and self.value in (None, recorded.value)

    def __str__(self) -> str:
        return f"{self.metric} {self.op} {'(the run’s)' if self.value is None else _shown(self.value)}"


Rests = Mapping[tuple[str, str], tuple[tuple[Support, ...], ...]]
"""A rule's declaration of what each verdict may rest on: ``(claim, verdict)`` (claim ``"*"``: any claim of the
probe without its own entry) → the alternatives, each the whole set of supports one rung of the rule states."""


def undeclared(rests: Rests, claim: str, verdict: str, recorded: Iterable[Support]) -> str | None:
    """Why ``recorded`` is not one of the alternatives ``rests`` declares for ``verdict`` on ``claim``, or None."""
    alternatives = rests.get((claim, verdict), rests.get(("*", verdict)))
    recorded = tuple(recorded)
    if alternatives is None:
        return f"the rule never rests {verdict} on {claim} on engine readings"
    for alt in alternatives:
        if len(alt) == len(recorded) and all(any(a.admits(r) for r in recorded) for a in alt):
            return None
    said = ", ".join(map(str, recorded)) or "nothing"
    return (f"it rests {verdict} on {claim} on {said}, which is not what the rule rests it on "
            f"({' or '.join('(' + ', '.join(map(str, alt)) + ')' for alt in alternatives)})")


def _finite(v: Any) -> bool:
    """A bool, or an int or float that is finite (NaN and ±inf are no reading and no threshold)."""
    return isinstance(v, bool) or (isinstance(v, (int, float)) and math.isfinite(v))


def _shown(v: Any) -> str:
    return repr(v) if isinstance(v, bool) else f"{v:g}"


def source_of(tag: str, sources: Mapping[str, str] | None = None) -> str:
    """Where ``tag``'s value in one finding came from: the finding's own record of it (``sources``: the rows
    behind it were read from the engine, or were the cell's) where the metric's source varies by engine
    (``Metric.varies``) or the record lowers it, else the declared source: a file cannot lift a cell count to an
    engine reading."""
    m, recorded = get(tag), (sources or {}).get(tag)
    source = recorded if recorded and (m.varies or recorded != "engine") else m.source
    if source not in SOURCES:
        raise ValueError(f"metric {tag}: source must be one of {SOURCES}, got {source!r}")
    return source


def unfit_to_rest_on(values: Mapping[str, Any], supports: Iterable[Support],
                     sources: Mapping[str, str] | None = None) -> list[str]:
    """Why each support cannot carry the verdict given the outcome's ``values`` (and the finding's own
    ``sources``): its metric missing, not read from the engine, not a finite number (a bool is a finite
    reading), or holding a value that does not support the verdict. Empty when all of them can."""
    out = []
    for s in supports:
        if not isinstance(s, Support):
            out.append(f"{s!r} names no value that supports the verdict")
            continue
        t, v = s.metric, values.get(s.metric)
        if t not in values:
            out.append(f"{t} was not measured")
        elif source_of(t, sources) != "engine":
            out.append(f"{t} is {source_of(t, sources)}-sourced")
        elif not _finite(v):
            out.append(f"{t} is {v!r}, not a finite reading")
        elif isinstance(v, bool) != (get(t).unit is Unit.BOOL):
            out.append(f"{t} is {v!r}, not a {get(t).unit.value} reading")
        elif not _finite(s.value):
            out.append(f"{s} names no finite value")
        elif not s.holds(v):
            out.append(f"{t} is {v!r}, which does not support it (needs {s.op} {_shown(s.value)})")
    return out
