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
from .contract import Retention, WorkbenchError

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


def run(engine: str, model: str | None) -> SmokeReport:
    """Smoke-test ``engine`` on the Hugging Face directory ``model``; bad input raises with what to fix."""
    if engine not in ENGINES:
        raise WorkbenchError(f"doctor --smoke supports --engine {' | '.join(ENGINES)}, not {engine!r}")
    if not model:
        raise WorkbenchError("doctor --smoke needs --model HF_DIR (a Hugging Face model directory with config.json)")
    resolved = models.resolve(model)
    if resolved.kind != "hf":
        raise models.ModelSpecError(f"doctor --smoke --engine {engine} needs a Hugging Face model directory "
                                    f"(config.json); {model!r} is a {resolved.kind} model")
    avail = cells.availability(engine)
    if not avail.available:
        return SmokeReport(engine, model, "not-run", avail.reason)
    connector = not any(r["feature"] == "connector" and not r["ok"] for r in avail.details.get("guard", []))
    steps: list[Step] = []
    state: dict[str, Any] = {}

    def step(path: str, fn: Callable[[], str]) -> None:
        if steps and steps[0].status != "pass":
            steps.append(Step(path, "not-run", None, "the cell did not open"))
            return
        t0 = time.perf_counter()
        try:
            detail = fn()
        except Exception as e:  # noqa: BLE001 - the point is to name whatever a path raises
            steps.append(Step(path, "fail", time.perf_counter() - t0, f"{type(e).__name__}: {e}"))
            return
        steps.append(Step(path, "pass", time.perf_counter() - t0, detail))

    def open_cell() -> str:
        state["cell"] = cells.open_cell(engine, model, dummy_weights=True, connector=connector,
                                        context_tokens=256, kv_budget_tokens=1024)
        d = state["cell"].describe()
        return f"{d.engine_version}; KV capacity {d.kv_capacity_tokens} tokens from {d.extra['kv_capacity_source']}"

    def ensure_prefix() -> str:
        cell = state["cell"]
        vocab = cell.describe().extra.get("vocab_size") or 1000
        prefix = [(100 + 7 * i) % vocab for i in range(PREFIX_TOKENS)]
        status = cell.ensure_prefix(prefix, retention=RETENTION)
        if status.source != "perf_metrics":
            raise _Failed(f"no reuse counters came back (source {status.source!r})")
        return f"{status.prompt_tokens} tokens, reused {status.reused_tokens}, retention priority {RETENTION.priority}"

    def decode() -> str:
        streamed: list[int] = []
        state["decode"] = out = state["cell"].decode(max_tokens=DECODE_TOKENS,
                                                     on_token=lambda tok, piece, t: streamed.append(tok))
        if not out.tokens or streamed != out.tokens:
            raise _Failed(f"streamed {streamed} but the result holds {out.tokens}")
        return f"{len(out.tokens)} tokens streamed, finish {out.finish_reason}, TTFT {out.ttft_s:.3f} s"

    def perf_metrics() -> str:
        counters = state["decode"].engine_counters if "decode" in state else {}
        missing = [k for k in ("num_reused_blocks", "num_missed_blocks", "engine_ttft_s") if k not in counters]
        if missing:
            raise _Failed(f"request_perf_metrics lack {', '.join(missing)}")
        return f"reused {counters['num_reused_blocks']} blocks, engine TTFT {counters['engine_ttft_s']:.3f} s"

    def kv_events() -> str:
        events = state["cell"].drain_kv_events()
        kinds = [e.kind for e in events]
        if "stored" not in kinds:
            raise _Failed(f"no stored event after two requests (got {kinds or 'nothing'})")
        return f"{len(events)} events: {', '.join(sorted(set(kinds)))}"

    def stats() -> str:
        got = state["cell"].drain_iteration_stats()
        if not got or "kvCacheStats" not in got[-1]:
            raise _Failed(f"no iteration stats with kvCacheStats ({len(got)} entries)")
        return f"{len(got)} entries, kvCacheStats {got[-1]['kvCacheStats']}"

    def connector_log() -> str:
        log = state["cell"].connector_log()
        methods = {e.get("method") for e in log}
        if "update_state_after_alloc" not in methods:
            raise _Failed(f"the recording connector did not record an allocation ({len(log)} calls: "
                          f"{', '.join(sorted(filter(None, methods))) or 'none'})")
        return f"{len(log)} calls: {', '.join(sorted(filter(None, methods)))}"

    try:
        step("open with dummy weights", open_cell)
        step("ensure_prefix with retention", ensure_prefix)
        step("decode streaming", decode)
        step("perf metrics", perf_metrics)
        step("kv events drain", kv_events)
        step("iteration stats drain", stats)
        if connector:
            step("connector log", connector_log)
        else:
            steps.append(Step("connector log", "not-run", None, "the install's connector guard rows fail"))
    finally:
        if "cell" in state:
            state["cell"].close()
    status = "fail" if any(s.status == "fail" for s in steps) else "pass"
    return SmokeReport(engine, model, status, None, tuple(steps))


def render(rep: SmokeReport) -> str:
    lines = [f"smoke       {rep.engine} on {rep.model}: {rep.status}" + (f" — {rep.reason}" if rep.reason else "")]
    for s in rep.steps:
        took = f"{s.seconds:7.2f} s" if s.seconds is not None else "      - "
        lines.append(f"  {s.status:<8} {took}  {s.path}: {s.detail}")
    return "\n".join(lines)


__all__ = ["SmokeReport", "Step", "render", "run"]
