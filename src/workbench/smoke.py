"""``workbench doctor --smoke``: one tiny request through every TensorRT-LLM path the probes use.

The first run on a GPU machine should fail here, in seconds and by name, not inside a notebook.
The cell is opened with dummy weights (``load_format="dummy"``) on the model directory's
``config.json``, then each path runs once and reports pass or fail with the exception: open (with
its open request), ensure_prefix with retention, streaming decode, the per-request perf metrics,
a KV-event drain, an iteration-stats drain, and the recording connector where the install has it.
A smoke run checks plumbing; it is never a finding.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from . import cells, models
from .engine import Retention, WorkbenchError

ENGINES = ("trtllm",)
PREFIX_TOKENS = 40
DECODE_TOKENS = 4
RETENTION = Retention(priority=90, duration_ms=60_000)


@dataclass(frozen=True)
class Step:
    """One path: ``pass``, ``fail`` (with the exception) or ``not-run`` (with the reason)."""

    path: str
    status: str
    seconds: float | None = None
    detail: str = ""


@dataclass(frozen=True)
class SmokeReport:
    engine: str
    model: str
    status: str  # "pass" | "fail" | "not-run"
    reason: str | None = None
    steps: tuple[Step, ...] = field(default_factory=tuple)

    @property
    def exit_code(self) -> int:
        """0 when every path passed or the engine cannot run here (not-run is not an error), else 1."""
        return 1 if self.status == "fail" else 0

    def as_dict(self) -> dict:
        return asdict(self)


class _Failed(WorkbenchError):
    """A path ran but did not give what the probes need."""


def _timed(path: str, fn: Callable[[], str]) -> Step:
    """Run one path: pass with what it gave, or fail with whatever it raised."""
    t0 = time.perf_counter()
    try:
        detail = fn()
    except Exception as e:  # noqa: BLE001 - the point is to name whatever a path raises
        return Step(path, "fail", time.perf_counter() - t0, f"{type(e).__name__}: {e}")
    return Step(path, "pass", time.perf_counter() - t0, detail)


class _Smoke:
    """One cell and the paths run on it, in order; each path after the open reads what earlier ones left."""

    def __init__(self, engine: str, model: str, connector: bool) -> None:
        self.engine, self.model, self.connector = engine, model, connector
        self.cell: Any = None
        self.decoded: Any = None

    def steps(self) -> list[Step]:
        steps = [_timed("open with dummy weights", self.open_cell)]
        paths = [("ensure_prefix with retention", self.ensure_prefix), ("decode streaming", self.decode),
                 ("perf metrics", self.perf_metrics), ("kv events drain", self.kv_events),
                 ("iteration stats drain", self.stats)] + ([("connector log", self.connector_log)]
                                                            if self.connector else [])
        for path, fn in paths:
            steps.append(_timed(path, fn) if steps[0].status == "pass"
                         else Step(path, "not-run", None, "the cell did not open"))
        if not self.connector:
            steps.append(Step("connector log", "not-run", None, "the install's connector guard rows fail"))
        return steps

    def close(self) -> None:
        if self.cell is not None:
            self.cell.close()

    def open_cell(self) -> str:
        self.cell = cells.open_cell(self.engine, self.model, dummy_weights=True, connector=self.connector,
                                    context_tokens=256, kv_budget_tokens=1024)
        d = self.cell.describe()
        return f"{d.engine_version}; KV capacity {d.kv_capacity_tokens} tokens from {d.extra['kv_capacity_source']}"

    def ensure_prefix(self) -> str:
        vocab = self.cell.describe().extra.get("vocab_size") or 1000
        prefix = [(100 + 7 * i) % vocab for i in range(PREFIX_TOKENS)]
        status = self.cell.ensure_prefix(prefix, retention=RETENTION)
        if status.source != "perf_metrics":
            raise _Failed(f"no reuse counters came back (source {status.source!r})")
        return f"{status.prompt_tokens} tokens, reused {status.reused_tokens}, retention priority {RETENTION.priority}"

    def decode(self) -> str:
        streamed: list[int] = []
        self.decoded = out = self.cell.decode(max_tokens=DECODE_TOKENS,
                                              on_token=lambda tok, piece, t: streamed.append(tok))
        if not out.tokens or streamed != out.tokens:
            raise _Failed(f"streamed {streamed} but the result holds {out.tokens}")
        return f"{len(out.tokens)} tokens streamed, finish {out.finish_reason}, TTFT {out.ttft_s:.3f} s"

    def perf_metrics(self) -> str:
        counters = self.decoded.engine_counters if self.decoded is not None else {}
        missing = [k for k in ("num_reused_blocks", "num_missed_blocks", "engine_ttft_s") if k not in counters]
        if missing:
            raise _Failed(f"request_perf_metrics lack {', '.join(missing)}")
        return f"reused {counters['num_reused_blocks']} blocks, engine TTFT {counters['engine_ttft_s']:.3f} s"

    def kv_events(self) -> str:
        events = self.cell.drain_kv_events()
        kinds = [e.kind for e in events]
        if "stored" not in kinds:
            raise _Failed(f"no stored event after two requests (got {kinds or 'nothing'})")
        return f"{len(events)} events: {', '.join(sorted(set(kinds)))}"

    def stats(self) -> str:
        got = self.cell.drain_iteration_stats()
        if not got or "kvCacheStats" not in got[-1]:
            raise _Failed(f"no iteration stats with kvCacheStats ({len(got)} entries)")
        return f"{len(got)} entries, kvCacheStats {got[-1]['kvCacheStats']}"

    def connector_log(self) -> str:
        log = self.cell.connector_log()
        methods = {e.get("method") for e in log}
        if "update_state_after_alloc" not in methods:
            raise _Failed(f"the recording connector did not record an allocation ({len(log)} calls: "
                          f"{', '.join(sorted(filter(None, methods))) or 'none'})")
        return f"{len(log)} calls: {', '.join(sorted(filter(None, methods)))}"


def _checked(engine: str, model: str | None) -> str:
    """``model`` when the input can be smoke-tested; bad input raises with what to fix."""
    if engine not in ENGINES:
        raise WorkbenchError(f"doctor --smoke supports --engine {' | '.join(ENGINES)}, not {engine!r}")
    if not model:
        raise WorkbenchError("doctor --smoke needs --model HF_DIR (a Hugging Face model directory with config.json)")
    resolved = models.resolve(model)
    if resolved.kind != "hf":
        raise models.ModelSpecError(f"doctor --smoke --engine {engine} needs a Hugging Face model directory "
                                    f"(config.json); {model!r} is a {resolved.kind} model")
    return model


def run(engine: str, model: str | None) -> SmokeReport:
    """Smoke-test ``engine`` on the Hugging Face directory ``model``; bad input raises with what to fix."""
    model = _checked(engine, model)
    avail = cells.availability(engine)
    if not avail.available:
        return SmokeReport(engine, model, "not-run", avail.reason)
    connector = not any(r["feature"] == "connector" and not r["ok"] for r in avail.details.get("guard", []))
    smoke = _Smoke(engine, model, connector)
    try:
        steps = smoke.steps()
    finally:
        smoke.close()
    status = "fail" if any(s.status == "fail" for s in steps) else "pass"
    return SmokeReport(engine, model, status, None, tuple(steps))


def render(rep: SmokeReport) -> str:
    lines = [f"smoke       {rep.engine} on {rep.model}: {rep.status}" + (f" — {rep.reason}" if rep.reason else "")]
    for s in rep.steps:
        took = f"{s.seconds:7.2f} s" if s.seconds is not None else "      - "
        lines.append(f"  {s.status:<8} {took}  {s.path}: {s.detail}")
    return "\n".join(lines)


__all__ = ["SmokeReport", "Step", "render", "run"]
