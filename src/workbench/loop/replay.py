"""Replay a trace through the arms, turn by turn, interleaved.

Each turn is rendered once (the same token ids for every arm); the arms then serve it one after the
other, in an order that rotates every turn, so machine noise hits every arm alike. Each arm keeps its
own engine, its own record of what that engine has seen, and one row per turn.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from . import attribution as attr
from .arms import CellArm
from .equal import output_match
from .render import BlockRenderer, ChatRenderer, Rendered, fit_scale
from .traces import ChatTurn, Trace
from . import verify


@dataclass(frozen=True)
class WorkTurn:
    session: int
    session_id: str
    turn: int
    rendered: Rendered
    previous: list[int] | None  # the session's previous prompt (chat traces), for re-render attribution
    copy_fraction: float | None  # share of the recorded reply's 4-grams already in the prompt (chat traces)


@dataclass(frozen=True)
class Workload:
    trace: Trace
    turns: list[WorkTurn]
    rule: str  # how the trace became tokens (recorded in every finding)
    dropped: int  # turns left out because prompt + reply exceed the context
    context_tokens: int


def copy_fraction(prompt: Sequence[int], reply: Sequence[int], n: int = 4) -> float | None:
    """How much of the reply repeats the prompt: its n-grams found in the prompt, as a share."""
    grams = [tuple(reply[i:i + n]) for i in range(len(reply) - n + 1)]
    if not grams:
        return None
    have = {tuple(prompt[i:i + n]) for i in range(len(prompt) - n + 1)}
    return sum(g in have for g in grams) / len(grams)


def native_tool_calls(tok) -> bool:
    """Whether the chat template renders structured ``tool_calls`` itself (probe: does the call's name appear?)."""
    probe = [{"role": "user", "content": "x"},
             {"role": "assistant", "content": "", "tool_calls": [
                 {"type": "function", "id": "c0", "function": {"name": "workbench_probe_fn", "arguments": {}}}]}]
    try:
        return "workbench_probe_fn" in tok.render(probe, add_generation_prompt=False)
    except Exception:  # noqa: BLE001 - a template that chokes on tool_calls does not support them
        return False


def build(trace: Trace, tok, context_tokens: int, vocab_size: int, tokens_per_block: int | None = None) -> Workload:
    """Render every selected turn with ``tok`` (a llama.cpp cell: template and tokenizer)."""
    turns: list[WorkTurn] = []
    dropped = 0
    if trace.block_tokens is None:
        renderer = ChatRenderer(tok, native_tool_calls(tok))
        rule = ("chat template of the model; recorded replies fed back (teacher forcing); tool calls "
                + ("rendered by the template" if renderer.native_tools else "as <tool_call>{json}</tool_call> text"))
    else:
        scale = fit_scale(trace, context_tokens, tokens_per_block)
        block_renderer = BlockRenderer(trace, scale, vocab_size)
        rule = scale.describe()
    for si, session in enumerate(trace.sessions):
        previous = None
        for ti, turn in enumerate(session.turns):
            if isinstance(turn, ChatTurn):
                r = renderer.render(turn)
                cf = copy_fraction(r.prompt, r.reply)
            else:
                r, cf = block_renderer.render(turn, (si, ti)), None
            if len(r.prompt) + r.max_tokens > context_tokens:
                dropped += 1
                continue
            turns.append(WorkTurn(si, session.id, ti, r, previous, cf))
            previous = r.prompt if isinstance(turn, ChatTurn) else None
    return Workload(trace, turns, rule, dropped, context_tokens)


def replay(work: Workload, arms: Sequence[CellArm], reference: str | None,
           scorer: verify.Scorer | Mapping[str, verify.Scorer], on_row: Callable[[dict], None] | None = None
           ) -> list[dict]:
    """Serve every turn on every arm, interleaved; one row per (turn, arm), its output scored for greedy
    consistency by its scorer (``scorer``, or each arm's own, at its precision, by arm name) once the turn's arms
    are done (:mod:`.verify`) and shown beside the ``reference`` arm's (:mod:`.equal`)."""
    of = (lambda name: scorer[name]) if isinstance(scorer, Mapping) else (lambda name: scorer)  # noqa: E731
    seen = {a.spec.name: attr.Seen() for a in arms}
    blocks = {a.spec.name: a.describe().block_tokens for a in arms}  # fixed while the arm is open
    rows: list[dict] = []
    for i, wt in enumerate(work.turns):
        order = list(arms[i % len(arms):]) + list(arms[:i % len(arms)]) if arms else []
        outputs: dict[str, list[int]] = {}
        for arm in order:
            name = arm.spec.name
            kept = arm.held()
            prompt = wt.rendered.prompt
            res = arm.turn(prompt, wt.rendered.max_tokens)
            held = kept.as_engine_held(res.engine_resident_before)  # a loss the engine reported is its loss
            ledger = attr.attribute(prompt, seen[name], res.key, held, res.reused, block_tokens=blocks[name],
                                    previous=wt.previous)
            seen[name].add(res.key, prompt)
            seen[name].add(res.key, prompt + res.tokens)
            outputs[name] = res.tokens
            times = res.token_times_s
            rows.append({
                "session": wt.session, "session_id": wt.session_id, "turn": wt.turn, "step": i, "arm": name,
                "position": order.index(arm),
                **ledger.as_row(),
                "computed": res.computed, "reuse_source": res.reuse_source,
                "engine_lost_before": len(kept.tokens) - len(held.tokens) if kept.key == res.key else 0,
                "engine_resident": res.engine_resident, "held_after": len(arm.held().tokens),
                "max_tokens": wt.rendered.max_tokens, "decode_tokens": len(res.tokens), "finish": res.finish,
                "ttft_s": res.ttft_s, "e2e_s": res.e2e_s, "decode_s": res.e2e_s - res.ttft_s,
                "itl_s": (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else None,
                "drafted": res.drafted, "accepted": res.accepted, "drafted_steps": res.drafted_steps,
                "speculation_source": res.speculation_source,
                "copy_fraction": wt.copy_fraction, "own_copy_fraction": copy_fraction(prompt, res.tokens),
            })
        plain = outputs.get(reference) if reference else None
        wanted = {(id(of(n)), tuple(o)): of(n) for n, o in outputs.items()}  # each output once per scorer
        scores = {key: s.score(wt.rendered.prompt, key[1]) for key, s in wanted.items()}
        for arm, row in zip(order, rows[-len(order):]):
            mine = of(row["arm"])
            greedy = scores[(id(mine), tuple(outputs[row["arm"]]))]
            row |= greedy.as_row() | {"scorer_weights": mine.weights}
            row["numeric_gap_sd"] = mine.numeric_gap(wt.rendered.prompt, outputs[row["arm"]], wt.rendered.max_tokens,
                                                     arm.drafter, greedy) if arm.spec.verified_in_batches else None
            row["same_tokens_as_reference"] = None if plain is None else outputs[row["arm"]] == plain
            row["output_match"] = None if plain is None else output_match(outputs[row["arm"]], plain)
            if on_row:
                on_row(row)
    return rows


__all__ = ["WorkTurn", "Workload", "build", "copy_fraction", "native_tool_calls", "replay"]
