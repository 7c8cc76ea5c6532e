"""Turns into tokens: τ-bench through the real chat template, hash-only traces by block id."""

from __future__ import annotations

import json

import pytest

from workbench import models, open_cell
from workbench.loop import render, replay, traces
from workbench.loop.traces import BlockTurn

TOOL_CALL = '<tool_call>\n{"name": "get_user_details", "arguments": {"user_id": "mia_li_3668"}}\n</tool_call>'


@pytest.fixture(scope="module")
def smollm2():
    try:
        spec = models.resolve(models.DEFAULT_MODEL)
    except models.ModelSpecError as e:  # pragma: no cover - make setup installs it
        pytest.skip(str(e))
    with open_cell("llamacpp", models.DEFAULT_MODEL, context_tokens=256, threads=1) as tok:
        yield tok, spec


def test_taubench_turns_render_exactly_as_the_chat_template_does(smollm2):
    """Our prompts equal llama-cpp-python's own Jinja2 rendering of the GGUF's template, tokenized."""
    from llama_cpp import Llama
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    tok, spec = smollm2
    llm = Llama(str(spec.path), vocab_only=True, verbose=False)
    fmt = Jinja2ChatFormatter(llm.metadata["tokenizer.chat_template"], eos_token="<|im_end|>",
                              bos_token="<|im_start|>")
    trace = traces.load("taubench").subset(sessions=1, turns=6)
    work = replay.build(trace, tok, 8192, tok.describe().extra["vocab_size"])
    assert len(work.turns) == 6 and "tool_call" in work.rule
    for wt, turn in zip(work.turns, trace.sessions[0].turns):
        expected = []
        for m in turn.messages:  # the ChatML family's tool-call text, spelled out here independently
            calls = [f'<tool_call>\n{{"name": "{c["function"]["name"]}", "arguments": '
                     f'{json.dumps(json.loads(c["function"]["arguments"]), ensure_ascii=False)}}}\n</tool_call>'
                     for c in m.get("tool_calls") or []]
            expected.append({"role": m["role"], "content": "\n".join(([m["content"]] if m.get("content") else []) + calls)})
        text = fmt(messages=expected).prompt
        assert wt.rendered.prompt == llm.tokenize(text.encode(), add_bos=llm._model.add_bos_token(), special=True)
    rendered = tok.detokenize(work.turns[-1].rendered.prompt)  # special tokens (<|im_start|>, …) print empty
    assert TOOL_CALL.split("\n")[1] in rendered and "\ntool\n{" in rendered


def test_teacher_forcing_feeds_the_recorded_reply(smollm2):
    """Turn k+1 starts with turn k's prompt followed by the recorded reply, which is also the decode budget."""
    tok, _ = smollm2
    work = replay.build(traces.load("taubench").subset(sessions=1, turns=3), tok, 8192, 49152)
    for a, b in zip(work.turns, work.turns[1:]):
        p, reply = a.rendered.prompt, a.rendered.reply
        assert b.rendered.prompt[:len(p) + len(reply)] == p + reply
        assert a.rendered.max_tokens == len(reply)
    assert work.turns[0].rendered.reply[-2:] == tok.tokenize("<|im_end|>\n", add_bos=False)


def test_chat_rendering_on_a_synthetic_template():
    with open_cell("llamacpp", "synthetic:tiny", context_tokens=256) as tok:
        trace = traces.load("taubench").subset(sessions=1, turns=2)
        work = replay.build(trace, tok, 100_000, tok.describe().extra["vocab_size"])
        text = tok.detokenize(work.turns[1].rendered.prompt)
        assert text.lstrip().startswith("<|system|># Airline Agent Policy") and text.endswith("<|assistant|>")


def _blocks(trace, tpb, vocab=49152):
    return render.BlockRenderer(trace, render.BlockScale(trace.block_tokens, tpb, 8192), vocab)


def test_block_rendering_is_deterministic(hand_trace):
    t = traces.load(str(hand_trace))
    a, b = _blocks(t, 4), _blocks(t, 4)
    assert a.block(7) == b.block(7) and a.block(7) != a.block(8)
    assert all(render.TOKEN_LO <= x < 30000 for x in a.block(7))
    turns = t.sessions[0].turns
    r1, r2 = a.render(turns[0], (0, 0)).prompt, b.render(turns[1], (0, 1)).prompt
    assert r2[:len(r1)] == r1 and len(r2) == 16  # [0,1,2] is a prefix of [0,1,2,3]
    # a partial last block is the start of that block's tokens; an unhashed tail is the request's own
    part = BlockTurn((0,), 100, 10, tail_id=3)
    assert a.render(part, (0, 9)).prompt == a.block(0) + a.block(3)[:1]
    own = BlockTurn((0,), 100, 10)
    assert a.render(own, (0, 1)).prompt != a.render(own, (0, 2)).prompt


def test_block_scale_fits_the_context_and_says_how():
    t = traces.load("claude-code").subset(sessions=1, turns=10)
    s = render.fit_scale(t, 8192)
    longest = max(len(x.blocks) * s.tokens_per_block + s.scaled(x.tail_tokens) + s.scaled(x.output_tokens)
                  for x in t.sessions[0].turns)
    assert longest <= 8192
    bigger = render.BlockScale(64, s.tokens_per_block + 1, 8192)
    assert max(len(x.blocks) * bigger.tokens_per_block + bigger.scaled(x.tail_tokens) + bigger.scaled(x.output_tokens)
               for x in t.sessions[0].turns) > 8192
    assert f"→ {s.tokens_per_block} deterministic tokens" in s.describe()
    with pytest.raises(traces.TraceError, match="does not fit"):
        render.fit_scale(t, 10)
