"""The loop's arms side by side: one row per arm that ran, the numbers a serving benchmark reports (TTFT, ITL/TPOT,
end-to-end time, output tokens/s, as ``vllm bench serve`` and AIPerf name them) beside the loop's own (reuse
efficiency, the speed-up over the best llama.cpp arm with its bootstrap CI).

Built from the loop's findings (the gate's carries the subject arm's metrics), so ``workbench loop``, notebook 60 and
the report show the same table. Each column is one metric of :mod:`workbench.metrics` in one unit, stated once in its
header with where its numbers come from (read from the engine, timed or computed by the workbench); a value whose
finding records another source than its column's says so beside it.

Benchmark integrity (:mod:`workbench.certify.integrity`): every row names its result class; TTFT is given at p50, p90
and p95 over the run's turns; the loop time, the whole trace's end to end, is p50 · p90 · p95 over the repeated runs
of the whole trace with the same workload (each run a finding of the arm: same engine and version, model, trace and
parameters), with the run count in its own column (one run: its value, "(1 run)", no spread).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import pandas as pd

from .. import metrics
from ..certify.integrity import Percentiles, result_class
from ..findings import Finding, model_of, short_reason
from . import arms as _arms
from .stats import few_turns

COLUMNS = ("ttft_p50_s", "ttft_p90_s", "ttft_p95_s", "itl_p50_s", "e2e_p50_s", "loop_output_tokens_per_s",
           "loop_time_s", "reuse_efficiency", "speedup_vs_best_llamacpp")
SPEEDUP = "speedup_vs_best_llamacpp"
OVER_RUNS = "loop_time_s"  # the whole trace's end to end: p50 · p90 · p95 over the runs, the run count beside
SOURCE_WORDS = {"engine": "engine-read", "timed": "timed by the workbench", "cell": "the cell's own count",
                "derived": "computed by the workbench"}


@dataclass(frozen=True)
class Column:
    tag: str
    header: str  # the metric's declared header
    unit: str  # the unit every value of the column is shown in
    source: str  # the metric's declared source, in words

    @property
    def title(self) -> str:
        return f"{self.header} ({self.unit})"


@dataclass(frozen=True)
class ArmRow:
    arm: str
    engine: str  # with its version
    model: str
    turns: str  # compared of replayed
    values: tuple[str, ...]  # per column, in its unit; "—" where not recorded
    best: bool  # the best llama.cpp arm, which the speed-ups are over
    runs: int = 1  # runs of the whole trace with this row's workload (its loop time's p50 · p90 · p95 are over them)
    result_class: str = ""  # benchmark integrity's class of its finding


@dataclass(frozen=True)
class ArmTable:
    columns: tuple[Column, ...]
    rows: tuple[ArmRow, ...]
    not_run: tuple[tuple[str, str], ...]  # (arm, why it did not run here)

    def frame(self) -> pd.DataFrame:
        """The table as a DataFrame: a column per metric, titled with its unit."""
        return pd.DataFrame([{"arm": r.arm + (" (best llama.cpp)" if r.best else ""), "engine": r.engine,
                              "model": r.model, "turns compared": r.turns, "runs": r.runs,
                              **{c.title: v for c, v in zip(self.columns, r.values)},
                              "result class": r.result_class} for r in self.rows],
                            columns=["arm", "engine", "model", "turns compared", "runs",
                                     *(c.title for c in self.columns), "result class"])

    def sources(self) -> list[tuple[str, list[str]]]:
        """The columns' headers grouped by where their numbers come from (engine-read, timed, computed)."""
        out: dict[str, list[str]] = {}
        for c in self.columns:
            out.setdefault(c.source, []).append(c.header)
        return list(out.items())

    @property
    def classes(self) -> tuple[str, ...]:
        """The result classes of the rows, each once (one: the report says it once for every row)."""
        return tuple(dict.fromkeys(r.result_class for r in self.rows))

    @property
    def over(self) -> str:
        """What each figure of the table is over (benchmark integrity's words)."""
        return OVER_WORDS

    def legend(self) -> str:
        """Where each column's numbers come from, and what its figures are over, in one line."""
        return ("sources: " + "; ".join(f"{source}: {', '.join(hs)}" for source, hs in self.sources())
                + f". {OVER_WORDS}")

    def text(self) -> str:
        """The table as ``workbench loop`` prints it: the rows, then each column's source and the arms not run."""
        lines = [self.frame().to_string(index=False)] if self.rows else ["no arm ran"]
        lines.append(self.legend())
        lines += [f"not run: {arm}: {why}" for arm, why in self.not_run]
        return "\n".join(lines)


def arm_of(f: Finding) -> str | None:
    """The arm a loop finding is about (the gate's: the subject's arm), None for another finding."""
    return (f.params or {}).get("arm") if f.probe.startswith("loop.") else None


def _display(unit: metrics.Unit, values: Sequence[float]) -> tuple[str, float]:
    """The unit a column shows its values in, and the factor from the stored unit: seconds as ms where every value is
    under a second, ratios as %."""
    if unit is metrics.Unit.SECONDS:
        return ("ms", unit.convert(1.0, "ms")) if all(abs(v) < 1 for v in values) else ("s", 1.0)
    if unit is metrics.Unit.RATIO:
        return "%", unit.convert(1.0, "%")
    return {metrics.Unit.TIMES: "×", metrics.Unit.TOKENS_PER_S: "tok/s"}.get(unit, unit.value), 1.0


def _number(v: float, factor: float, unit: str) -> str:
    x = v * factor
    return f"{x:.1f}" if unit == "%" else f"{x:.3g}"


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _speedup(f: Finding, factor: float, unit: str) -> str:
    """The speed-up with its 95% bootstrap CI, and the turns it is over where they are few (:mod:`.stats`)."""
    value, low, high = (f.metric(t) for t in (SPEEDUP, "speedup_ci_low", "speedup_ci_high"))
    if not _finite(value):
        return "—"
    text = _number(value, factor, unit)
    if _finite(low) and _finite(high):
        text += f" [{_number(low, factor, unit)}, {_number(high, factor, unit)}]"
        n = f.metric("speedup_turns")
        text += few_turns(n if _finite(n) else None)
    return text


OVER_WORDS = ("TTFT p50, p90 and p95 are over the run's turns; loop time is p50 · p90 · p95 over the runs of the "
              "whole trace with the same workload, the run count beside it (1 run: its value, no spread)")


def arm_table(found: Sequence[Finding], every: Sequence[Finding] = ()) -> ArmTable:
    """The table of the loop findings among ``found`` (the ones that stand: the caller picks them): a row per arm that
    ran, arms in the registry's order, the claims' subject first; the arms that ran nowhere listed with why they did
    not run (a batch's llama.cpp lane reports the vLLM arms not-run on its model, while vLLM's own lane ran them).
    A row's runs are the findings among ``every`` (default ``found``: every run in the folder, not only those that
    stand) of its arm with its workload (:func:`_workload`)."""
    from ..loop import gate

    loop = [(arm_of(f), f) for f in found if arm_of(f)]
    order = _arms.names()
    rank = lambda af: (af[0] != gate.GateRule().subject, order.index(af[0]) if af[0] in order else len(order),  # noqa: E731
                       af[1].engine_version or "", model_of(af[1]))
    ran = sorted(((a, f) for a, f in loop if f.verdict != "not-run"), key=rank)
    ran_arms = {a for a, _ in ran}  # an arm that ran on one model is no "not run" because a pass on another could not
    not_run = tuple(dict.fromkeys((a, _short(f.reason)) for a, f in sorted(loop, key=rank)
                                  if f.verdict == "not-run" and a not in ran_arms))
    runs = [_runs(f, every or found) for _, f in ran]
    columns, cells = [], []
    for tag in COLUMNS:
        m = metrics.get(tag)
        values = [v for _, f in ran if _finite(v := f.metric(tag))]
        unit, factor = _display(m.unit, values)
        columns.append(Column(tag, m.header, unit, SOURCE_WORDS[m.source]))
        cells.append([_over_runs(rs, factor, unit) if tag == OVER_RUNS else _cell(f, tag, m, factor, unit)
                      for (_, f), rs in zip(ran, runs)])
    rows = tuple(ArmRow(a, f"{f.engine} {f.engine_version or ''}".strip(), model_of(f),
                        f"{_count(f.metric('compared_turns'))}/{_count(f.metric('turns'))}",
                        tuple(col[i] for col in cells), _best(f, a), len(runs[i]), result_class(f)[0])
                 for i, (a, f) in enumerate(ran))
    return ArmTable(tuple(columns), rows, not_run)


def _workload(f: Finding) -> tuple:
    """What makes two loop findings runs of one workload: the arm, the engine and its version, the model, the trace
    (its digest) and every parameter."""
    import json

    trace = ((f.environment or {}).get("loop") or {}).get("sha256")
    return (f.probe, f.engine, f.engine_version, model_of(f), trace, json.dumps(f.params or {}, sort_keys=True,
                                                                               default=str))


def _runs(f: Finding, every: Sequence[Finding]) -> list[Finding]:
    """The runs of ``f``'s workload among ``every`` (``f`` itself at least), each once."""
    key = _workload(f)
    same = {g.id or id(g): g for g in every if g.verdict != "not-run" and _workload(g) == key}
    return list(same.values()) if same else [f]


def _over_runs(runs: Sequence[Finding], factor: float, unit: str) -> str:
    """The loop time over the runs: p50 · p90 · p95 with the run count (:class:`Percentiles`); one run its value."""
    p = Percentiles.of(f.metric(OVER_RUNS) for f in runs)
    if p is None:
        return "—"
    if p.runs == 1:
        return f"{_number(p.p50, factor, unit)} (1 run)"
    return p.text(lambda v: _number(v, factor, unit))


def _cell(f: Finding, tag: str, m: metrics.Metric, factor: float, unit: str) -> str:
    if tag == SPEEDUP:
        return _speedup(f, factor, unit)
    v = f.metric(tag)
    if not _finite(v):
        return "—"
    source = (f.metrics.get(tag) or {}).get("source", m.source)
    return _number(v, factor, unit) + (f" ({SOURCE_WORDS.get(source, source)})" if source != m.source else "")


def _count(v: Any) -> str:
    return f"{v:g}" if _finite(v) else "—"


def _best(f: Finding, arm: str) -> bool:
    """Whether ``arm`` is the best llama.cpp arm its speed-up was taken over (its CI records the reference)."""
    return ((f.evidence.get("ci") or {}).get(SPEEDUP) or {}).get("reference") == arm


def _short(reason: str | None) -> str:
    return short_reason(reason, 90)


__all__ = ["ArmRow", "ArmTable", "COLUMNS", "Column", "arm_of", "arm_table"]
