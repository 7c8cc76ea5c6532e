"""Turns into token ids: what every arm is asked to prefill and how many tokens it decodes.

Chat traces go through the model's own chat template (the cell's renderer). The recorded assistant
reply is what the next turn sees (teacher forcing), so every arm does the same work whatever it
decoded. Templates that render ``tool_calls`` themselves get them as structured messages; for
the others the calls become the ChatML family's tool-call text (Hermes/Qwen convention, one
``<tool_call>`` element per call), which is the family SmolLM2 belongs to.

Hash-only traces become deterministic tokens per block id: the same id gives the same tokens in
every request, so the trace's reuse structure survives. Blocks are scaled to the model's context
by one rule (:class:`BlockScale`), recorded in every finding.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any, Mapping, Protocol, Sequence

import numpy as np

from ..engine import common_prefix
from .traces import BlockTurn, ChatTurn, Trace, TraceError

TOKEN_LO = 260  # above the control and byte tokens of every vocabulary we use (probes.common uses the same bound)


class Tokenizer(Protocol):
    """What rendering needs from a cell: its template renderer and tokenizer (the llama.cpp cell has both)."""

    def render(self, messages: Sequence[Mapping[str, Any]], *, add_generation_prompt: bool = True) -> str: ...

    def prompt_tokens(self, prompt: Any) -> list[int]: ...

    def tokenize(self, text: str, *, special: bool = True, add_bos: bool | None = None) -> list[int]: ...


@dataclass(frozen=True)
class Rendered:
    """One turn as the arms see it."""

    prompt: list[int]
    max_tokens: int  # the recorded reply's length in this model's tokens
    reply: list[int]  # the recorded reply's tokens (for copy-heaviness), empty for hash-only traces
    messages: int = 0  # messages in the prompt (chat traces): lets attribution tell re-render from new content


def tool_call_text(call: Mapping[str, Any]) -> str:
    """One call in the ChatML family's tool-call text: ``<tool_call>`` + JSON name/arguments."""
    fn = call.get("function", call)
    args = fn.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            pass  # keep the recorded string as is
    return "<tool_call>\n" + json.dumps({"name": fn.get("name"), "arguments": args}, ensure_ascii=False) + "\n</tool_call>"


class ChatRenderer:
    """τ-bench turns through the model's chat template."""

    def __init__(self, tok: Tokenizer, native_tools: bool) -> None:
        self.tok = tok
        self.native_tools = native_tools  # the template renders structured tool_calls itself

    def message(self, m: Mapping[str, Any]) -> dict:
        """A trace message as the template gets it: content never None, tool calls as text or structured."""
        content = m.get("content") or ""
        out = {"role": m["role"], "content": content}
        calls = m.get("tool_calls") or []
        if calls and self.native_tools:
            out["tool_calls"] = [{"type": "function", "id": c.get("id"), "function": {
                "name": c["function"]["name"], "arguments": _arguments(c["function"].get("arguments"))}} for c in calls]
        elif calls:
            out["content"] = "\n".join(([content] if content else []) + [tool_call_text(c) for c in calls])
        for key in ("name", "tool_call_id"):
            if key in m and self.native_tools:
                out[key] = m[key]
        return out

    def messages(self, turn: ChatTurn) -> list[dict]:
        return [self.message(m) for m in turn.messages]

    def render(self, turn: ChatTurn) -> Rendered:
        msgs = self.messages(turn)
        prompt = self.tok.prompt_tokens(msgs)
        closed = self.tok.tokenize(self.tok.render(msgs + [self.message(turn.reply)], add_generation_prompt=False),
                                   add_bos=False)
        opened = self.tok.tokenize(self.tok.render(msgs, add_generation_prompt=True), add_bos=False)
        reply = closed[common_prefix(closed, opened):]
        return Rendered(prompt, max(1, len(reply)), reply, len(msgs))


def _arguments(a: Any) -> Any:
    if isinstance(a, str):
        try:
            return json.loads(a)
        except ValueError:
            return a
    return a


@dataclass(frozen=True)
class BlockScale:
    """The rule that fits a hash-only trace into a model's context."""

    trace_block: int  # tokens per block in the trace
    tokens_per_block: int  # tokens each block id becomes here
    context_tokens: int

    @property
    def factor(self) -> float:
        return self.tokens_per_block / self.trace_block

    def scaled(self, n: int) -> int:
        """A trace token count (tail, output) in rendered tokens: same factor, rounded up."""
        return math.ceil(n * self.factor)

    def describe(self) -> str:
        return (f"each {self.trace_block}-token block id → {self.tokens_per_block} deterministic tokens "
                f"(factor {self.factor:.4g}); tails and output lengths scaled by the same factor, rounded up; "
                f"{self.tokens_per_block} is the largest that fits the longest selected request and its output "
                f"in the {self.context_tokens}-token context")


def check_block(tokens_per_block: int | None, context_tokens: int) -> None:
    """A block given (``--tokens-per-block``) is at least one token and fits the context: a larger one can hold
    no turn (99,999,999,999 tokens was a 745 GiB MemoryError traceback once the scorer had started)."""
    if tokens_per_block is not None and not 1 <= tokens_per_block <= context_tokens:
        raise TraceError(f"tokens_per_block must be 1 to the {context_tokens}-token context, got {tokens_per_block}")


def fit_scale(trace: Trace, context_tokens: int, tokens_per_block: int | None = None) -> BlockScale:
    """The largest tokens-per-block (≤ the trace's own block) at which every selected turn fits the context."""
    if trace.block_tokens is None:
        raise TraceError(f"{trace.name} is a chat trace; block scaling applies to hash-only traces")
    turns = [t for s in trace.sessions for t in s.turns]
    if tokens_per_block is not None:
        check_block(tokens_per_block, context_tokens)
        return BlockScale(trace.block_tokens, tokens_per_block, context_tokens)
    for tpb in range(trace.block_tokens, 0, -1):
        s = BlockScale(trace.block_tokens, tpb, context_tokens)
        if all(len(t.blocks) * tpb + s.scaled(t.tail_tokens) + s.scaled(t.output_tokens) <= context_tokens
               for t in turns):
            return s
    raise TraceError(f"{trace.name}: even one token per block does not fit the {context_tokens}-token context; "
                     "select fewer turns (--turns) or a model with a longer context")


class BlockRenderer:
    """Hash-only turns as deterministic token ids: block id → the same tokens everywhere in the trace."""

    def __init__(self, trace: Trace, scale: BlockScale, vocab_size: int) -> None:
        self.scale = scale
        self.hi = min(vocab_size, 30000)
        if self.hi <= TOKEN_LO:
            raise TraceError(f"the model's vocabulary ({vocab_size}) is too small for block rendering")
        self.seed = int.from_bytes(hashlib.sha256(trace.sha256.encode()).digest()[:8], "little")
        self._cache: dict[int, list[int]] = {}

    def block(self, block_id: int) -> list[int]:
        toks = self._cache.get(block_id)
        if toks is None:
            rng = np.random.default_rng([self.seed, 0, block_id])
            toks = self._cache[block_id] = rng.integers(TOKEN_LO, self.hi, self.scale.tokens_per_block).tolist()
        return toks

    def render(self, turn: BlockTurn, where: tuple[int, int]) -> Rendered:
        """``where`` (session, turn) seeds an unhashed tail, which is this request's own content."""
        prompt = [t for b in turn.blocks for t in self.block(b)]
        n_tail = self.scale.scaled(turn.tail_tokens)
        if turn.tail_id is not None:
            prompt += self.block(turn.tail_id)[:n_tail]
        elif n_tail:
            prompt += np.random.default_rng([self.seed, 1, *where]).integers(TOKEN_LO, self.hi, n_tail).tolist()
        return Rendered(prompt, max(1, self.scale.scaled(turn.output_tokens)), [])


__all__ = ["BlockRenderer", "BlockScale", "ChatRenderer", "Rendered", "fit_scale", "tool_call_text"]
