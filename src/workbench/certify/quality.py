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

from .. import claims, environment, findings, probes
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

    version = "2"  # 2: whether its model has random weights recorded (evidence["inputs"]), so its rows re-derive it
    claims = (CLAIM,)
    result_class = classes.ResultClass.MICRO.value  # output checks, not a performance figure
    rests = {("*", "confirmed"): ((Support("a2_output_equals_cold", "==", True),
                                   Support("task_pass_fraction", ">=", TASK_PASS)),
                                  (Support("a2_output_equals_cold", "==", True),)),
             ("*", "refuted"): ((Support("a2_output_equals_cold", "==", False),),
                                (Support("task_pass_fraction", "<", TASK_PASS),))}

    def obtained(self, found: Sequence[findings.Finding]) -> str:
        return "workbench certify quality"

    def from_evidence(self, evidence, p) -> probes.Outcome:
        """The smoke again from its rows: A2 from the two token lists the engine decoded (warm against cold), each
        task by its own checker on the answer the engine gave, at this workbench's pass mark (never a recorded
        one); the task set is skipped only where the run said its model has random weights."""
        rows = evidence["rows"]
        synthetic = bool((evidence.get("inputs") or {}).get("synthetic"))
        status, said, values = judge(rows, synthetic)
        return _outcome(status, said, values, rows)

    def guard(self, o: probes.Outcome, f: findings.Finding) -> probes.Outcome:
        return probes.at_most_inconclusive_without_engine(o)  # as run() applies it


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
    rows = [a2(cell, seed=seed)] + ([] if synthetic else tasks(cell))
    status, said, values = judge(rows, synthetic)
    return status, said, values, rows


def judge(rows: Sequence[dict], synthetic: bool) -> tuple[str, str, dict]:
    """The smoke's rule on its rows: (status, its reason in words, its metrics). A2 holds where the warm and the cold
    decode gave the same tokens; each task passes by its own checker on the engine's answer."""
    (row,) = [r for r in rows if r.get("kind") == "a2"]
    equal = list(row["warm_tokens"]) == list(row["cold_tokens"])
    values = {"a2_output_equals_cold": equal}
    said = (f"A2: warm suffix output {'equals' if equal else 'differs from'} the cold full prompt's "
            f"({A2_DECODE} greedy tokens after {A2_STABLE} + {A2_SUFFIX})")
    if synthetic:
        said += "; task set not run: random weights answer no task by construction"
    else:
        checks = {t.name: t for t in TASKS}
        done = [r for r in rows if r.get("kind") == "task"]
        if sorted(r["task"] for r in done) != sorted(checks):
            raise ValueError(f"the task rows name {sorted(r['task'] for r in done)}, not the set "
                             f"{sorted(checks)}")
        passed = sum(bool(checks[r["task"]].check(r["answer"] or "")) for r in done)
        values["task_pass_fraction"] = passed / len(done)
        said += f"; task set {passed}/{len(done)} (passes at {TASK_PASS:.0%})"
    ok = values["a2_output_equals_cold"] and values.get("task_pass_fraction", 1.0) >= TASK_PASS
    return ("passed" if ok else "failed"), said, values


def _outcome(status: str, said: str, values: dict, rows: list[dict], engine: str = "", model: str = ""
             ) -> probes.Outcome:
    where = f" on {engine} ({model})" if engine else ""
    return probes.Outcome("confirmed" if status == "passed" else "refuted", f"Quality smoke {status}{where}: {said}.",
                          values, list(rows), rests_on=_supports(values), inputs={})


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
    from .. import cells, models

    avail = cells.availability(engine)
    options = dict(cell_options or {}) | ({"threads": threads} if threads else {})
    if not avail.available:
        return _finding(engine, model, "not-run", f"Not run on {engine}: {avail.reason}", {}, [], None, None,
                        avail.reason, options)
    resolved = models.resolve(model)
    synthetic = resolved.kind == "synthetic"
    with cells.open_cell(engine, model, **options) as cell:
        d = cell.describe()
        status, said, values, rows = smoke(cell, synthetic, seed)
    out = probes.at_most_inconclusive_without_engine(_outcome(status, said, values, rows, engine, resolved.name))
    f = _finding(engine, model, out.verdict, out.summary, values, rows, d, resolved, None, options, out.rests_on,
                 synthetic)
    probes.check_derivable(probes.declared(PROBE), f)
    return f


def _finding(engine: str, model: str, verdict: str, summary: str, values: dict, rows: list[dict], d: Any,
             resolved: Any, reason: str | None, options: dict, rests: Sequence[Support] = (),
             synthetic: bool = False) -> findings.Finding:
    version = d.engine_version if d is not None else None
    env = environment.fingerprint(engine, version, resolved, d.geometry if d is not None else None)
    claims.get(CLAIM)
    return findings.Finding(
        probe=PROBE, probe_version=QualitySmoke.version, claims=[CLAIM], verdict=verdict, summary=summary,
        engine=engine, environment=env, params={"model": model, "tasks": [t.name for t in TASKS],
                                                "task_pass": TASK_PASS, "a2": [A2_STABLE, A2_SUFFIX, A2_DECODE]},
        cell_options=options, metrics=findings.metric_values(values),
        evidence={"columns": list(dict.fromkeys(k for r in rows for k in r)), "rows": rows,
                  "notes": [f"task {t.name}: {t.prompt!r}, checked: {t.expects}" for t in TASKS],
                  "inputs": {"synthetic": synthetic}},
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
           "a2", "judge", "run", "run_in_child", "smoke", "tasks"]
