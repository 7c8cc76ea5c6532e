"""Per-miss attribution: why a token that could have been reused was recomputed.

The *theoretical* reusable prefix of a turn is the token LCP of its prompt with everything the
engine has seen in this loop (every earlier prompt, and each prompt followed by what the engine
decoded). Each turn's prompt splits exactly as

    prompt      = theoretical + template_rerender + new_content
    theoretical = reused + salt_or_manifest + eviction + block_rounding + last_token + unexplained

and the causes inside the theoretical prefix are charged in this order, each on what the previous
ones left:

1. ``salt_or_manifest``: seen only under another cache key (salt, manifest, adapters);
2. ``eviction``: seen under this key, but the engine no longer holds it (evicted, overwritten by
   another sequence, or dropped by the arm's policy);
3. ``block_rounding``: held, but the engine reuses whole blocks only;
4. ``last_token``: a prompt's last token always gets recomputed for its logits, and a sampled
   token that ended a decode was never fed back, so it has no KV;
5. ``unexplained``: whatever the engine reported beyond that (must be zero; negative when the
   engine claims more reuse than it could have had).

Outside the theoretical prefix, ``template_rerender`` counts tokens of messages the loop had
already sent whose tokens changed when the longer conversation was rendered again; the rest is
``new_content``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Sequence

from ..engine import common_prefix

INSIDE = ("salt_or_manifest", "eviction", "block_rounding", "last_token", "unexplained")
OUTSIDE = ("template_rerender", "new_content")
CATEGORIES = INSIDE + OUTSIDE


@dataclass(frozen=True)
class Ledger:
    """One turn's prompt tokens, split by cause."""

    prompt: int
    theoretical: int
    reused: int
    salt_or_manifest: int = 0
    eviction: int = 0
    block_rounding: int = 0
    last_token: int = 0
    unexplained: int = 0
    template_rerender: int = 0
    new_content: int = 0

    def as_row(self) -> dict:
        return asdict(self)


@dataclass
class Seen:
    """Everything an engine has been given or has produced in one loop, with the cache key it was under."""

    entries: list[tuple[str, list[int]]] = field(default_factory=list)

    def add(self, key: str, tokens: Sequence[int]) -> None:
        self.entries.append((key, list(tokens)))

    def lcp(self, prompt: Sequence[int], key: str | None = None) -> int:
        """Longest token prefix of ``prompt`` in any entry (under ``key`` only, when given)."""
        return max((common_prefix(prompt, t) for k, t in self.entries if key is None or k == key), default=0)


@dataclass(frozen=True)
class Held:
    """What the engine holds for the slot just before the turn: KV-resident tokens and their key,
    plus the sampled token that ended the last decode (never fed back, so without KV)."""

    key: str | None
    tokens: Sequence[int]
    unfed: int | None = None

    def as_engine_held(self, resident: int | None) -> "Held":
        """What the engine itself still held, given the run of tokens it reports resident (read back from
        it: an eviction, or a hole anywhere, ends the run there); unchanged when it cannot say."""
        if resident is None or resident >= len(self.tokens):
            return self
        return Held(self.key, list(self.tokens[:max(resident, 0)]), None)


def attribute(prompt: Sequence[int], seen: Seen, key: str, held: Held, reused: int, *, block_tokens: int = 1,
              previous: Sequence[int] | None = None) -> Ledger:
    """Split ``prompt`` (see the module docstring). ``previous`` is the last prompt whose messages
    this prompt extends (chat traces), for telling template re-render divergence from new content."""
    n = len(prompt)
    theoretical = seen.lcp(prompt)
    same_key = seen.lcp(prompt, key)
    resident = common_prefix(prompt, held.tokens) if held.key == key else 0
    reachable = resident
    if held.key == key and held.unfed is not None and resident == len(held.tokens) < n \
            and prompt[resident] == held.unfed:
        reachable = resident + 1  # the unfed sampled token: in what the engine saw, not in its KV
    reachable = min(reachable, same_key)
    blocks = resident // block_tokens * block_tokens
    expected = min(blocks, n - 1)  # the last prompt token is always computed (its logits start the decode)
    rerender = 0
    if previous is not None:
        rerender = max(0, min(len(previous), n) - theoretical)
    return Ledger(
        prompt=n, theoretical=theoretical, reused=reused,
        salt_or_manifest=theoretical - same_key,
        eviction=same_key - reachable,
        block_rounding=min(resident, reachable) - blocks,
        last_token=(reachable - min(resident, reachable)) + (blocks - expected),
        unexplained=expected - reused,
        template_rerender=rerender,
        new_content=n - theoretical - rerender,
    )


def check(ledger: Ledger) -> None:
    """The two identities hold by construction; raise if a caller built a ledger that breaks them."""
    inside = ledger.reused + sum(getattr(ledger, c) for c in INSIDE)
    outside = ledger.theoretical + ledger.template_rerender + ledger.new_content
    if inside != ledger.theoretical or outside != ledger.prompt:
        raise AssertionError(f"attribution does not add up: {ledger}")


__all__ = ["CATEGORIES", "INSIDE", "OUTSIDE", "Held", "Ledger", "Seen", "attribute", "check"]
