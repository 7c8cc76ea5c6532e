"""The quality smoke per (engine, model): without its status no throughput claim stands.

Benchmark integrity asks for an "answer-quality smoke" beside every performance row ("Throughput claims require
quality-smoke status", contenox/runtime ``2bfdc1f5``, ``benchmark-integrity-blueprint.md``, "Reporting Rules"). Two
parts, through the engine layer's cell (the transport's conformance probes run the same A2 check through modeld's
session contract, contenox's benchreport ``output_equals_cold``; either finding answers the matrix's column):

- **A2** (``docs/development/blueprints/modeld/alternative-silicon.md``, certification tier A2 "Rewind/suffix
  equivalent: warm suffix output matches cold full prompt under greedy decode"): the stable prefix through
  ``ensure_prefix``, the suffix through ``prefill_suffix`` in the same cell, greedy decode; then the whole prompt cold
  (another key, so nothing is reused) and the same decode. The engine's tokens must be equal.
- **A task set with a checker** (:data:`TASKS`): four one-line chat tasks a working instruct model answers, each
  checked on its text; the set passes at :data:`TASK_PASS` of them. A random-weight (synthetic) model answers
  nothing by construction: its task set is not run, and says why.

The finding (``quality.smoke``, claim ``cert.quality_smoke``, a :class:`QualitySmoke` source) is confirmed when A2
holds and the task set passes (or does not apply), refuted when either fails.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from .. import claims, environment, findings
from ..metrics import Support
from ..probes import Declared
from . import classes
from .integrity import engine_session, engine_stages, timed

CLAIM = "cert.quality_smoke"
PROBE = "quality.smoke"
TASK_PASS = 0.75  # share of the task set the model must answer for the smoke to pass
A2_STABLE, A2_SUFFIX, A2_DECODE = 64, 16, 8  # tokens: the stable prefix, the suffix, the greedy decode


@dataclass(frozen=True)
class Task:
    name: str
    prompt: str
    check: Callable[[str], bool]
    expects: str  # the checker in words


TASKS: tuple[Task, ...] = (
    Task("capital", "What is the capital of France? Answer in one word.", lambda t: "paris" in t.lower(),
         "the answer names Paris"),
    Task("sum", "What is 2 + 3? Answer with the number only.", lambda t: "5" in t or "five" in t.lower(),
         "the answer says 5"),
    Task("colour", "What colour is the sky on a clear day? One word.", lambda t: "blue" in t.lower(),
         "the answer says blue"),
    Task("opposite", "What is the opposite of hot? One word.", lambda t: "cold" in t.lower(),
         "the answer says cold"),
)
TASK_TOKENS = 12  # greedy tokens decoded per task


class QualitySmoke(Declared):
    """The quality smoke's findings declared like a probe's: claim, version, class, what each verdict rests on."""

    version = "1"
    claims = (CLAIM,)
    result_class = classes.ResultClass.MICRO.value  # output checks, not a performance figure
    rests = {("*", "confirmed"): ((Support("a2_output_equals_cold", "==", True),
                                   Support("task_pass_fraction", ">=", TASK_PASS)),
                                  (Support("a2_output_equals_cold", "==", True),)),
             ("*", "refuted"): ((Support("a2_output_equals_cold", "==", False),),
                                (Support("task_pass_fraction", "<", TASK_PASS),))}

    def obtained(self, found: Sequence[findings.Finding]) -> str:
        return "workbench certify quality"


def _ids(cell: Any, n: int, seed: int) -> list[int]:
    """``n`` token ids the cell's model holds (a fixed pseudo-random draw past the control tokens)."""
    import numpy as np

    vocab = int(cell.describe().extra.get("vocab_size") or 256)
    low = min(260, vocab - 1)
    return [int(t) for t in np.random.default_rng(seed).integers(low, vocab, n)]


def a2(cell: Any, *, seed: int = 0) -> dict:
    """A2 on ``cell``: warm suffix output against the cold full prompt, greedy; one evidence row."""
    stable, suffix = _ids(cell, A2_STABLE, seed), _ids(cell, A2_SUFFIX, seed + 1)
    warm_key, cold_key = f"a2-warm-{uuid.uuid4().hex}", f"a2-cold-{uuid.uuid4().hex}"
    first, ensure_s = timed(lambda: cell.ensure_prefix(stable, salt=warm_key))
    st, suffix_s = timed(lambda: cell.prefill_suffix(suffix))
    warm, decode_s = timed(lambda: cell.decode(max_tokens=A2_DECODE))
    cell.ensure_prefix(stable + suffix, salt=cold_key)
    cold = cell.decode(max_tokens=A2_DECODE)
    process, session = engine_session(cell)
    digest = hashlib.sha256(",".join(map(str, stable + suffix)).encode()).hexdigest()
    return {"kind": "a2", "stable_tokens": len(stable), "suffix_tokens": len(suffix), "decode_tokens": A2_DECODE,
            "prompt_sha256": digest,
            "warm_tokens": list(warm.tokens), "cold_tokens": list(cold.tokens),
            "equal": list(warm.tokens) == list(cold.tokens), "warm_reused_tokens": st.reused_tokens,
            "warm_prefilled_tokens": st.computed_tokens, "reuse_source": st.source,
            "first_prefill_tokens": first.computed_tokens, "process": process, "session": session,
            "stages": engine_stages(None, ensure_s, decode_s, suffix_s).as_dict()}


def tasks(cell: Any) -> list[dict]:
    """The task set on ``cell`` (chat messages through its model's template), one row per task."""
    rows = []
    for t in TASKS:
        cell.ensure_prefix([{"role": "user", "content": t.prompt}], salt=f"task-{uuid.uuid4().hex}")
        out = cell.decode(max_tokens=TASK_TOKENS)
        rows.append({"kind": "task", "task": t.name, "prompt": t.prompt, "expects": t.expects, "answer": out.text,
                     "passed": bool(t.check(out.text))})
    return rows


def smoke(cell: Any, synthetic: bool, seed: int = 0) -> tuple[str, str, dict, list[dict]]:
    """The smoke on an open cell: (status, its reason in words, its metrics, its rows). ``synthetic``: random
    weights, so the task set does not apply."""
    row = a2(cell, seed=seed)
    rows, values = [row], {"a2_output_equals_cold": row["equal"]}
    said = (f"A2: warm suffix output {'equals' if row['equal'] else 'differs from'} the cold full prompt's "
            f"({A2_DECODE} greedy tokens after {A2_STABLE} + {A2_SUFFIX})")
    if synthetic:
        said += "; task set not run: random weights answer no task by construction"
    else:
        done = tasks(cell)
        rows += done
        share = sum(r["passed"] for r in done) / len(done)
        values["task_pass_fraction"] = share
        said += f"; task set {sum(r['passed'] for r in done)}/{len(done)} (passes at {TASK_PASS:.0%})"
    passed = values["a2_output_equals_cold"] and values.get("task_pass_fraction", 1.0) >= TASK_PASS
    return ("passed" if passed else "failed"), said, values, rows


def _supports(values: dict) -> tuple[Support, ...]:
    if values["a2_output_equals_cold"] is False:
        return (Support("a2_output_equals_cold", "==", False),)
    if "task_pass_fraction" in values:
        op = ">=" if values["task_pass_fraction"] >= TASK_PASS else "<"
        if op == "<":
            return (Support("task_pass_fraction", "<", TASK_PASS),)
        return (Support("a2_output_equals_cold", "==", True), Support("task_pass_fraction", ">=", TASK_PASS))
    return (Support("a2_output_equals_cold", "==", True),)


def run(engine: str, model: str, *, threads: int | None = None, seed: int = 0,
        cell_options: dict | None = None) -> findings.Finding:
    """The quality smoke of ``engine`` on ``model`` as a finding (not-run with the reason where the engine cannot
    run here)."""
    from .. import cells, models, probes

    avail = cells.availability(engine)
    options = dict(cell_options or {}) | ({"threads": threads} if threads else {})
    if not avail.available:
        return _finding(engine, model, "not-run", f"Not run on {engine}: {avail.reason}", {}, [], None, None,
                        avail.reason, options)
    resolved = models.resolve(model)
    with cells.open_cell(engine, model, **options) as cell:
        d = cell.describe()
        status, said, values, rows = smoke(cell, resolved.kind == "synthetic", seed)
    verdict = "confirmed" if status == "passed" else "refuted"
    out = probes.Outcome(verdict, f"Quality smoke {status} on {engine} ({resolved.name}): {said}.", values, rows,
                         rests_on=_supports(values))
    out = probes.at_most_inconclusive_without_engine(out)
    return _finding(engine, model, out.verdict, out.summary, values, rows, d, resolved, None, options,
                    out.rests_on)


def _finding(engine: str, model: str, verdict: str, summary: str, values: dict, rows: list[dict], d: Any,
             resolved: Any, reason: str | None, options: dict, rests: Sequence[Support] = ()) -> findings.Finding:
    version = d.engine_version if d is not None else None
    env = environment.fingerprint(engine, version, resolved, d.geometry if d is not None else None)
    claims.get(CLAIM)
    return findings.Finding(
        probe=PROBE, probe_version=QualitySmoke.version, claims=[CLAIM], verdict=verdict, summary=summary,
        engine=engine, environment=env, params={"model": model, "tasks": [t.name for t in TASKS],
                                                "task_pass": TASK_PASS, "a2": [A2_STABLE, A2_SUFFIX, A2_DECODE]},
        cell_options=options, metrics=findings.metric_values(values),
        evidence={"columns": list(dict.fromkeys(k for r in rows for k in r)), "rows": rows,
                  "notes": [f"task {t.name}: {t.prompt!r}, checked: {t.expects}" for t in TASKS]},
        reason=reason, rests_on=findings.supports_doc(rests),
        result_class=classes.for_verdict(verdict, QualitySmoke.result_class))


def run_in_child(engine: str, model: str, *, out: Any = None, **kwargs: Any) -> findings.Finding:
    """:func:`run` in a child process (an engine crash is reported with its signal, the caller lives); the finding
    written to ``out`` when given."""
    from .. import isolate, probes

    f = isolate.call(run, engine, model, preload=probes.preload(engine), **kwargs)
    if out is not None:
        findings.write(f, out)
    return f


__all__ = ["A2_DECODE", "A2_STABLE", "A2_SUFFIX", "CLAIM", "PROBE", "QualitySmoke", "TASKS", "TASK_PASS", "Task",
           "a2", "run", "run_in_child", "smoke", "tasks"]
