"""The agentic-loop benchmark and the step-function gate (the blueprint's first entry condition).

``run`` replays a trace's turns through every arm (interleaved, one fixed thread count), attributes
every reusable token that was recomputed, and writes one finding per arm plus one gate finding for
claim ``entry.step_function`` into the same store as the probes' findings.

Modules: :mod:`.traces` (formats), :mod:`.render` (turns → tokens), :mod:`.arms` (registry),
:mod:`.spec` (prompt-lookup speculation), :mod:`.replay` (interleaving), :mod:`.attribution`,
:mod:`.stats`, :mod:`.gate` (the claim rule), :mod:`.results` (findings).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import pandas as pd

from .. import cells, findings, models
from ..engine import EngineUnavailable, UnsupportedFeature, WorkbenchError
from .. import environment
from .. import cpu as _cpu
from .. import progress as _progress
from . import arms as _arms
from . import equal as _equal
from . import gate as _gate
from . import replay as _replay
from . import results as _results
from . import target as _target
from . import traces as _traces
from . import verify as _verify
from .render import check_block
from .spec import Drafter

DEFAULT_CONTEXT = 8192  # context tokens of every arm: the one home the CLI, the library and notebook 60 read
HASH_ONLY = ("hash-only trace (block ids, no text): its prompts are token ids made up per hash, whose repeats an "
             "n-gram drafter copies back with near-100% acceptance, so this speculation's acceptance and speed-up "
             "measure the fabrication, not the workload; run a trace with its text (taubench) for them")


@dataclass
class LoopRun:
    rows: pd.DataFrame
    summaries: list[_results.ArmSummary]
    findings: list[findings.Finding]
    workload: dict
    paths: list[Path] = field(default_factory=list)


def parse_arms(spec: str | Sequence[str]) -> list[str]:
    """``"all"`` or comma-separated arm names, in the order given; unknown names fail with the valid ones."""
    names = spec.split(",") if isinstance(spec, str) else list(spec)
    names = [n.strip() for n in names if n.strip()]
    if names == ["all"]:
        return _arms.names()
    if not names:
        raise ValueError(f"no arms given; valid arms: {', '.join(_arms.names())} (or 'all')")
    for n in names:
        _arms.get(n)
    return list(dict.fromkeys(names))


def default_arms(engine: str) -> list[str]:
    """The arms a notebook runs for ``engine`` (``workbench run`` runs each notebook once per engine).

    llama.cpp: every llama.cpp arm, the subject's (TensorRT-LLM's, not-run with their reason where it cannot run,
    the gate included) and each served reference's (``vllm-server``); a reference engine's in-process arms (vLLM's)
    are its own pass's, which runs them beside plain ``llamacpp`` on its model, so no lane measures them twice. The
    subject (TensorRT-LLM, where it can run): its arms plus every llama.cpp arm, since the gate compares it with the
    best of them and they must share the machine. Another engine (a reference, e.g. vLLM): its own arms plus
    plain ``llamacpp`` to be compared with; the llama.cpp pass already measured the other llama.cpp arms.
    An engine that cannot run here: none, since the llama.cpp pass already reported it not-run and a
    second, reference-less gate finding would only mask that one. ``arms="all"`` runs every arm.
    """
    if engine == "llamacpp":
        subject = _arms.get(_gate.GateRule().subject).engine
        passes = {_arms.get(n).engine for n in _arms.names()} - {"llamacpp", subject}
        own_pass = passes & set(cells.engines(served=False))  # in-process references run in a pass of their own
        return [n for n in _arms.names() if _arms.get(n).engine not in own_pass]
    own = [n for n in _arms.names() if _arms.get(n).engine == engine]
    if not own:
        raise ValueError(f"no arm runs on engine {engine!r}; arms: {', '.join(_arms.names())}")
    if _arms.unavailable(own[0]) is not None:
        return []
    if _gate.GateRule().subject not in own:
        return own + [_arms.plain("llamacpp")]
    return own + [n for n in _arms.names() if _arms.is_llamacpp(n)]


def run(trace: str, *, arms: str | Sequence[str] = "all", model: str, turns: int | None = None,
        sessions: int | None = None, out: str | Path | None = None, threads: int | None = None,
        context_tokens: int = DEFAULT_CONTEXT, tokens_per_block: int | None = None, drafter: Drafter = Drafter(),
        rule: _gate.GateRule = _gate.GateRule(), on_target: bool = False, certified: str | Path | None = None,
        work: _equal.EqualWork = _equal.EqualWork(), seed: int = 0, arm_models: Mapping[str, str] | None = None,
        scorer_model: str | None = None, progress: Callable[[dict, int, int], None] | None = None) -> LoopRun:
    """Replay ``trace`` (name or path) on ``arms``; write the findings to ``out`` when given: one per
    reference arm and, when ``arms`` hold the subject, the gate finding, which carries the subject arm's figures or
    its not-run reason (a run without it writes none, so the reason a pass with it gave stays the one that stands).

    ``progress(row, done, total)`` is called with every per-turn row as it is measured.
    ``on_target`` declares target hardware with a certified model, checked before any turn runs: NVML must report
    a GPU here, every arm's model must be in the ``certified`` list and the trace must be the claim's, by digest
    (:mod:`.target`); the llama.cpp arms then hold every layer on the GPU (:func:`.arms.target_options`). Without it a
    measured TensorRT-LLM result is at most ``inconclusive``. ``work``
    says which turns are compared (:mod:`.equal`): equal work, each output scored as a greedy decode of ``model`` by a
    llama.cpp scorer (:mod:`.verify`), and shown against a reference arm's.
    ``arm_models`` gives an arm the same model in its engine's own format (TensorRT-LLM and vLLM load a
    Hugging Face directory, llama.cpp a GGUF); each arm is scored at its own precision (``scorer_model`` for every
    arm where given, else :func:`.verify.scorer_model` of the arm's own model: its GGUF, its checkpoint converted, or
    ``model``); the subject's scorer tokenizes the trace for every arm, so an arm whose vocabulary differs is
    refused before any turn runs.
    """
    names = parse_arms(arms)
    work.for_arms(names, rule.subject)  # a declared reference not in the run fails here, before anything runs
    arm_models = dict(arm_models or {})
    if stray := sorted(set(arm_models) - set(names)):
        raise ValueError(f"--arm-model names arm(s) not in this run: {', '.join(stray)}; arms: {', '.join(names)}")
    for name in [n for n in names if n in arm_models and _arms.unavailable(n) is None]:
        models.check(arm_models[name])  # before the scorer and the other arms run, not when this arm opens
    threads = threads or _cpu.usable_count()
    check_block(tokens_per_block, context_tokens)
    loaded = _traces.load(trace)
    target = _verified_target(on_target, certified, [model, *(arm_models.get(n, model) for n in names)], loaded)
    tr = loaded.subset(sessions, turns)
    not_run: dict[str, str] = {}  # an arm's engine or model that cannot run here: said by its cell's open
    opened: list[_arms.CellArm] = []
    scorers: dict[str, _verify.Scorer] = {}  # one per precision the arms run at, by its model spec
    try:
        chosen = _open_scorers(scorers, names, rule.subject, model, arm_models, scorer_model,
                               context_tokens=context_tokens, threads=threads)
        scorer = next(iter(scorers.values()))
        rendered = _render(tr, scorer, context_tokens, tokens_per_block)
        opened = _open_arms(names, not_run, arm_models, model, (scorer.model.name, scorer.vocab),
                            threads=threads, context_tokens=context_tokens, drafter=drafter,
                            on_target=target is not None)
        total, done = len(rendered.turns) * len(opened), 0

        def step(row: dict) -> None:
            nonlocal done
            done += 1
            _progress.say(f"turn {done} of {total} (arm {row.get('arm')})")
            if progress:
                progress(row, done, total)

        work = work.for_arms(names, rule.subject, ran=[a.spec.name for a in opened])
        by_arm = {n: scorers[c.spec] for n, c in chosen.items()}
        rows = _equal.mark(pd.DataFrame(_replay.replay(rendered, opened, work.reference, by_arm, step)), work)
        descriptions = {a.spec.name: a.describe() for a in opened}
        resolved = opened[0].cell.model if opened and hasattr(opened[0].cell, "model") else None
    finally:
        for a in opened:
            a.close()
        for s in scorers.values():
            s.close()
    workload = {"trace": tr.name, "format": tr.format, "sha256": tr.sha256, "sessions": len(tr.sessions),
                "turns": len(rendered.turns), "dropped_turns": rendered.dropped, "rule": rendered.rule,
                "equal_work": work.as_dict(), "equal_work_rule": f"{work.describe()} (scorer: llama.cpp on "
                + "; ".join(f"{s.model.name}, {s.weights} weights, {s.chosen_by}" for s in scorers.values())
                + "; each arm scored at its own precision, decode-like)",
                "scorer": scorer.describe(), "scorers": {n: by_arm[n].describe() for n in by_arm if n in descriptions},
                "run": uuid.uuid4().hex[:12],  # the arm and gate findings of this run carry it: the gate is checked
                # against the arm findings written beside it (workbench.settle)
                "context_tokens": context_tokens, "threads": threads, "arms": names,
                "drafter": {"k": drafter.k, "max_ngram": drafter.max_ngram, "min_ngram": drafter.min_ngram},
                "interleaving": "arms serve each turn one after another, order rotated every turn"}
    params = {"trace": trace, "model": model, **({"arm_models": arm_models} if arm_models else {}),
              **({"scorer_model": scorer_model} if scorer_model else {}), "turns": turns,
              "sessions": sessions, "threads": threads, "context_tokens": context_tokens,
              "tokens_per_block": tokens_per_block, "on_target": on_target,
              **({"certified": str(certified)} if certified else {}), "equal_work": work.as_dict(), "seed": seed}
    summaries = _hash_only(tr, _results.summarise(rows, [a.spec.name for a in opened],
                                                  {n: not_run[n] for n in names if n in not_run}, seed=seed, work=work))
    # The subject's own figures (or why it did not run) live in the gate finding: one finding per
    # engine and claim, so the write-back never shows a bare arm in place of the verdict.
    found = [_results.arm_finding(s, rows, params, descriptions.get(s.arm), resolved if _arms.is_llamacpp(s.arm) else None,
                                  workload) for s in summaries if s.arm != rule.subject]
    on_gpu = [n for n, d in descriptions.items() if _arms.on_gpu(d)]
    # A run without the subject knows nothing of it: its gate finding, "not in this run", being the newest not-run,
    # would stand in place of the reason a run with the subject gave (e.g. `make run`'s vLLM pass after llama.cpp's).
    if rule.subject in names:
        found.append(_results.gate_finding(summaries, rule, params, workload, target, work, on_gpu, rows))
    result = LoopRun(rows, summaries, found, workload)
    if out is not None:
        result.paths = findings.write_all(found, out)  # a failure still keeps every finding
    return result


def _open_scorers(scorers: dict[str, _verify.Scorer], names: Sequence[str], subject: str, model: str,
                  arm_models: Mapping[str, str], given: str | None, **options: Any) -> dict[str, _verify.ScorerModel]:
    """Open one scorer per precision the arms run at into ``scorers`` (by model spec; the tokenizing one first) and
    return each arm's. The arms' thread count: llama.cpp's decode attention splits a long KV by thread, and another
    count reads other logits (0.018 σ on synthetic:tiny, 0.000 at the same count). Each arm is scored at its own
    precision (its own model, :func:`.verify.scorer_model`), so a quantised llama.cpp arm is held to greedy decoding of
    its quantised weights and a subject at FP16 to its FP16 ones (``given``, ``--scorer-model``, scores every arm).
    The subject's scorer tokenizes the trace; without the subject, the loop's model's does."""
    chosen = {n: _verify.scorer_model(model, n, arm_models.get(n), given) for n in names}
    first = chosen.get(subject) or _verify.scorer_model(model, subject, None, given)
    for c in [first, *chosen.values()]:
        if c.spec not in scorers:
            scorers[c.spec] = _verify.Scorer(c, **options)
    return chosen


def _hash_only(tr: _traces.Trace, summaries: list[_results.ArmSummary]) -> list[_results.ArmSummary]:
    """On a hash-only trace its text is made up, so a speculation arm's drafter copies it back: its figures say so."""
    if tr.block_tokens is not None:
        for s in summaries:
            if s.reason is None and _arms.get(s.arm).speculation != "none":
                s.caveat = HASH_ONLY
    return summaries


def run_in_child(engine: str, trace: str, *, arms: str | Sequence[str] = "auto", out: str | Path | None = None,
                 **kwargs: Any) -> LoopRun | None:
    """:func:`run` in a child process, as a probe runs (:func:`workbench.probes.run`): an engine that crashes
    raises :class:`~workbench.isolate.EngineCrashed` with its signal and log tail and leaves the caller (a
    notebook's kernel) alive, and the child forks from ``engine``'s forkserver, with that engine imported.
    ``arms="auto"`` is :func:`default_arms` of ``engine``, decided there too (it may import the engine); None
    when that is no arm. The findings are written here once the child has answered, so a crash leaves none.
    ``kwargs`` are :func:`run`'s, but ``progress``, which would be called in the child."""
    from .. import isolate, probes

    if "progress" in kwargs:
        raise ValueError("progress would be called in the child; call loop.run to watch the turns")
    result = isolate.call(_run_arms, engine, trace, arms, kwargs, preload=probes.preload(engine))
    if result is not None and out is not None:
        result.paths = findings.write_all(result.findings, out)  # a failure still keeps every finding
    return result


def _run_arms(engine: str, trace: str, arms: str | Sequence[str], kwargs: dict) -> LoopRun | None:
    chosen = default_arms(engine) if arms == "auto" else arms
    return run(trace, arms=chosen, out=None, **kwargs) if chosen else None


def _render(tr: _traces.Trace, scorer: _verify.Scorer, context_tokens: int,
            tokens_per_block: int | None) -> _replay.Workload:
    """The trace's turns as token ids, tokenized by the scorer's llama.cpp cell (the loop's ``model``, loaded
    once for both); no turn that fits the context is an error naming the fix."""
    rendered = _replay.build(tr, scorer.cell, context_tokens, scorer.vocab, tokens_per_block)
    if not rendered.turns:
        raise WorkbenchError(f"no turn of {tr.name} fits the {context_tokens}-token context "
                             f"({rendered.dropped} dropped); select other turns or a longer context")
    return rendered


def _open_arms(names: list[str], not_run: dict[str, str], arm_models: Mapping[str, str], model: str,
               tokenizer: tuple[str, int], **options: Any) -> list[_arms.CellArm]:
    """Open each arm of ``names``; one that cannot open here goes to ``not_run`` with its reason. On any other
    error the arms already open are closed before it propagates."""
    opened: list[_arms.CellArm] = []
    try:
        for n in names:
            if reason := _arms.unregistered(n):
                not_run[n] = reason
                continue
            try:
                opened.append(_arms.open_arm(n, arm_models.get(n, model), **options))
                _check_vocab(opened[-1], arm_models.get(n, model), *tokenizer)
            except (EngineUnavailable, UnsupportedFeature) as e:
                not_run[n] = getattr(e, "reason", None) or str(e)
            except TypeError as e:  # the engine's cell does not take this arm's options yet
                not_run[n] = f"the {_arms.get(n).engine} cell does not take this arm's options: {e}"
    except BaseException:
        for a in opened:
            a.close()
        raise
    return opened


def _verified_target(on_target: bool, certified: str | Path | None, specs: list[str],
                     trace: _traces.Trace) -> dict | None:
    """The target evidence for the gate (:func:`.target.verify`), checked before anything runs; None off target."""
    if on_target:
        return _target.verify(Path(certified) if certified else None, specs, environment.hardware(), trace)
    if certified is not None:
        raise ValueError("--certified is read only with --on-target; add --on-target or drop --certified")
    return None


def _check_vocab(arm: _arms.CellArm, arm_model: str, model: str, vocab: int) -> None:
    """The trace's token ids mean the same on every arm only if their vocabularies agree (read from each engine)."""
    got = arm.describe().extra.get("vocab_size")
    if got is not None and int(got) != int(vocab):
        raise WorkbenchError(f"arm {arm.spec.name} runs {arm_model} with a vocabulary of {got} tokens, but the trace is "
                             f"tokenized by {model} ({vocab} tokens): give every arm the same model, each in its "
                             "engine's format (--model for llama.cpp, --arm-model ARM=DIR for the others)")


__all__ = ["DEFAULT_CONTEXT", "LoopRun", "default_arms", "parse_arms", "run", "run_in_child"]
