"""Benchmark integrity's rules for publishing a number, each in one place.

The source: contenox/runtime ``2bfdc1f5``,
``docs/development/blueprints/modeld/effective-context/benchmark-integrity-blueprint.md``. What each rule is here:

- **Result class** on every row and finding (:mod:`.classes`; :func:`result_class` reads it, from a finding written
  before it was recorded too), and mixed classes never compared (:func:`comparable`).
- **p50, p90 and p95 across repeated runs** (:class:`Percentiles`): one value per run of the whole workload, the run
  count beside each figure. The source names no repeat count and no interval method; the percentiles are numpy's
  linear interpolation between order statistics, so with 1 run all three are that run's value and with 3 runs p95
  lies between the two slowest: the count beside them says how far to read them.
- **The same-model rule** (:class:`Identity`, :func:`differences`): model and digest, quantization, the model's shape
  (layers, heads, KV heads, head size, hidden size, vocabulary: what makes two files one checkpoint across formats),
  KV precision, prompt set, context, output cap, device, runtime profile (threads, batch, GPU layers) and warm or cold
  state must match, "if any field differs, the report says 'not comparable' and explains the difference". A
  comparison across engines (the gates') names the fields it varies by design (the engine, and for G1 the KV
  precision each engine's best profile uses); every other must match.
- **The warm-state rule** (:class:`WarmState`, :func:`warm_problem`): a warm row keeps the process and session that
  warmed it and records the PrefixStatus/SuffixStatus counters; replay through one-shot calls is a separate result.
- **Stage times** (:class:`StageTimes`): load, session-open, EnsurePrefix, PrefillSuffix and decode, each on its own,
  with the layer that timed them. The engine layer (:func:`engine_stages`) has no session: its session-open is not
  measured and says so. The session layer (``workbench.transport``, modeld's contract served over its gRPC wire)
  implements :class:`StageTimer` and replaces it where it runs (docs/certify.md, "Stage times").
- **The quality smoke** (:data:`QUALITY`): "Throughput claims require quality-smoke status" (:func:`throughput_words`).
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence, runtime_checkable

from . import classes

# --------------------------------------------------------------------------- result class


def result_class(f: Any) -> tuple[str, str]:
    """A finding's class and how it is known: ``recorded`` (its own ``result_class``), or ``declared`` (written
    before it was recorded: its writer's declared class, :attr:`workbench.probes.Declared.result_class`, failed for a
    run that measured nothing)."""
    if getattr(f, "result_class", None):
        return f.result_class, "recorded"
    from .. import probes

    declared = probes.declared(f.probe)
    return classes.for_verdict(f.verdict, declared.result_class if declared else classes.ResultClass.RAW.value), \
        "declared"


# --------------------------------------------------------------------------- p50/p90/p95 over runs


PERCENTILES = (50, 90, 95)


@dataclass(frozen=True)
class Percentiles:
    """A figure over repeated runs of the whole workload: its p50, p90 and p95 and the count of runs behind them."""

    p50: float
    p90: float
    p95: float
    runs: int

    @classmethod
    def of(cls, values: Iterable[float | None]) -> "Percentiles | None":
        """Over the runs that gave a finite value; None where none did."""
        import numpy as np

        got = [float(v) for v in values if v is not None and math.isfinite(float(v))]
        if not got:
            return None
        p = np.percentile(np.asarray(got), PERCENTILES)
        return cls(float(p[0]), float(p[1]), float(p[2]), len(got))

    def text(self, show: Callable[[float], str] = lambda v: f"{v:.3g}") -> str:
        """``p50 1.2 s · p90 1.4 s · p95 1.5 s (3 runs)``; one run says so (its three figures are that run)."""
        runs = "1 run: no spread" if self.runs == 1 else f"{self.runs} runs"
        return f"p50 {show(self.p50)} · p90 {show(self.p90)} · p95 {show(self.p95)} ({runs})"

    def as_dict(self) -> dict:
        return asdict(self)


# --------------------------------------------------------------------------- the same-model rule


@dataclass(frozen=True)
class Identity:
    """What a figure was measured on, field by field as the same-model rule lists them."""

    model: str | None = None  # the model's name (a synthetic spec's resolved name)
    digest: str | None = None  # its content digest (sha256 of the GGUF, or of a Hugging Face folder's files)
    quantization: str | None = None  # the weights' type (F32, F16, Q4_1, …)
    architecture: str | None = None  # layers, heads, KV heads, head size, hidden size, vocabulary (models.architecture)
    kv_precision: str | None = None  # the KV cache's element type (f32, f16, bf16, fp8, q8_0, q4_0)
    prompt_set: str | None = None  # the workload: a trace and its digest, or the generator and its seed
    context: int | None = None  # context tokens of the request (the tier)
    output_cap: int | None = None  # output tokens asked for
    device: str | None = None  # where the engine said it runs (its GPU, or the CPU), else the machine's summary
    runtime_profile: str | None = None  # threads, batch, GPU layers: what the engine was configured with
    warm_state: str | None = None  # cold | warm

    @classmethod
    def of(cls, doc: Mapping[str, Any]) -> "Identity":
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in doc.items() if k in names})


IDENTITY_FIELDS = tuple(f.name for f in fields(Identity))


def differences(a: Identity, b: Identity, varies: Sequence[str] = ()) -> list[str]:
    """Each field (but those ``varies`` by design) on which ``a`` and ``b`` differ, in words: ``model:
    smollm2-135m vs synthetic-3f2a``. A field neither records is no difference; one recorded on one side only is."""
    out = []
    for name in IDENTITY_FIELDS:
        if name in varies:
            continue
        x, y = getattr(a, name), getattr(b, name)
        if x != y and not (x is None and y is None):
            out.append(f"{name.replace('_', ' ')}: {_shown(x)} vs {_shown(y)}")
    return out


def _shown(v: Any) -> str:
    if v is None:
        return "not recorded"
    return f"{v[:12]}…" if isinstance(v, str) and len(v) == 64 else str(v)


@dataclass(frozen=True)
class Comparability:
    """Whether two figures may be compared, and if not why, in the words a report prints."""

    ok: bool
    why: str = ""

    def __bool__(self) -> bool:
        return self.ok

    @property
    def words(self) -> str:
        return "comparable" if self.ok else f"not comparable: {self.why}"


def comparable(a: tuple[str, Identity], b: tuple[str, Identity], varies: Sequence[str] = ()) -> Comparability:
    """Two figures, each (result class, identity): comparable only when their classes agree (mixed classes are
    never compared here: nothing is normalised) and the same-model rule holds on every field but ``varies``."""
    (ca, ia), (cb, ib) = a, b
    why = []
    if ca != cb:
        why.append(f"result classes differ ({ca} vs {cb}): mixed classes are never compared")
    if classes.ResultClass.FAILED.value in (ca, cb):
        why.append("a failed run makes no performance claim")
    why += differences(ia, ib, varies)
    return Comparability(not why, "; ".join(why))


# --------------------------------------------------------------------------- the warm-state rule


@dataclass(frozen=True)
class WarmState:
    """Where a row's KV came from: ``cold`` (nothing reused by construction), or ``warm`` with the process and
    session that held it and the counters the contract reports (``PrefixStatus``: reused, prefilled; a suffix's
    tokens where there was one)."""

    state: str  # cold | warm
    process: int | None = None  # the engine process's id (in-process cells: the child the probe ran in)
    session: str | None = None  # the session (engine layer: the cell and its slot; session layer: the handle)
    warmed_by: tuple[int | None, str | None] | None = None  # (process, session) of the row that warmed it
    reused_tokens: int | None = None
    prefilled_tokens: int | None = None
    suffix_tokens: int | None = None
    counters_source: str | None = None  # where reused_tokens came from (the engine's counter, or the cell's)

    def as_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items()}


def warm_problem(w: WarmState) -> str | None:
    """Why a row labelled warm is not one by the warm-state rule (None: it is, or it is cold)."""
    if w.state == "cold":
        return None
    if w.state != "warm":
        return f"warm state {w.state!r} is neither cold nor warm"
    if w.warmed_by is None or w.process is None or w.session is None:
        return "a warm row must name the process and session that warmed it"
    if tuple(w.warmed_by) != (w.process, w.session):
        return ("warmed in another process or session: a warm row keeps the runtime process and session alive "
                "(replay through one-shot calls is a separate result)")
    if w.reused_tokens is None or w.prefilled_tokens is None:
        return "a warm row records the PrefixStatus counters (reused, prefilled)"
    return None


def engine_session(cell: Any, slot: int = 0) -> tuple[int, str]:
    """The engine layer's (process, session) for a cell's slot: this process (the engine runs in it, or is its
    server's client) and the cell object with its slot: the engine layer has no session handle of its own."""
    return os.getpid(), f"{type(cell).__name__}@{id(cell):x}/slot{slot}"


# --------------------------------------------------------------------------- stage times


STAGES = ("load_s", "session_open_s", "ensure_prefix_s", "prefill_suffix_s", "decode_s")


@dataclass(frozen=True)
class StageTimes:
    """One request's stages, each on its own (seconds; None: not measured at this layer, ``missing`` says why)."""

    load_s: float | None = None
    session_open_s: float | None = None
    ensure_prefix_s: float | None = None
    prefill_suffix_s: float | None = None
    decode_s: float | None = None
    layer: str = "engine"  # engine (the workbench's cells) | session (modeld's contract, workbench.transport)
    missing: Mapping[str, str] = field(default_factory=dict)  # stage -> why it is not measured

    def as_dict(self) -> dict:
        return asdict(self) | {"missing": dict(self.missing)}


@runtime_checkable
class StageTimer(Protocol):
    """What times a request's stages: the engine layer here (:func:`engine_stages`); the session layer
    (``workbench.transport``'s session adapters: Describe/LoadModel, OpenSession, EnsurePrefix, PrefillSuffix,
    Decode, each timed around its call) plugs in by the same shape."""

    def stage_times(self) -> StageTimes: ...


ENGINE_LAYER_MISSING = {"session_open_s": "the engine layer has no session: opening one is modeld's contract's "
                                          "(workbench.transport), not measured here"}


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    """``fn()`` and its wall time in seconds (perf_counter)."""
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def engine_stages(load_s: float | None, ensure_prefix_s: float | None, decode_s: float | None,
                  prefill_suffix_s: float | None = None) -> StageTimes:
    """Stage times as the engine layer measures them: the cell's open (the engine's load), ``ensure_prefix``,
    ``prefill_suffix`` where there was a suffix, and ``decode``; session-open is not the engine layer's."""
    missing = dict(ENGINE_LAYER_MISSING)
    if prefill_suffix_s is None:
        missing["prefill_suffix_s"] = "no suffix: the whole prompt went through EnsurePrefix (a cold row)"
    if load_s is None:
        missing["load_s"] = "the engine was loaded once for several rows: its load is the first row's"
    return StageTimes(load_s, None, ensure_prefix_s, prefill_suffix_s, decode_s, "engine", missing)


# --------------------------------------------------------------------------- the quality smoke


QUALITY = ("passed", "failed", "not-run")
"""A quality smoke's status, per (engine, model): passed (A2 and the task set, where one applies), failed (either
failed), not-run (with why). "Throughput claims require quality-smoke status.\""""


def throughput_words(status: str | None, why: str = "") -> str:
    """What a throughput or latency row says of its quality smoke: its status, or that it has none and so makes no
    throughput claim."""
    if status == "passed":
        return "quality smoke passed"
    if status == "failed":
        return f"quality smoke failed{': ' + why if why else ''}: no throughput claim stands"
    return f"no quality smoke{' (' + why + ')' if why else ''}: no throughput claim stands on this row"


__all__ = ["Comparability", "ENGINE_LAYER_MISSING", "IDENTITY_FIELDS", "Identity", "PERCENTILES", "Percentiles",
           "QUALITY", "STAGES", "StageTimer", "StageTimes", "WarmState", "comparable", "differences",
           "engine_session", "engine_stages", "result_class", "throughput_words", "timed", "warm_problem"]
