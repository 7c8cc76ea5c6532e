"""events.hash_parity — can a client recompute the engine's block hashes from the token ids it sent?

Each request's stored events are compared with the hashes the client computes (:mod:`workbench.events.hashing`)
from the prompt, the engine's block size and the ``PYTHONHASHSEED`` the client believes the engine has
(``client_seed``; empty: the engine's). A different seed must break parity: that is the test that can fail.
Where the declared scheme misses, each other known scheme (``hasher.variants()``, e.g. TensorRT-LLM's salt
hashed another way) is tried: one that recomputes every block names a release whose scheme changed, not an
engine whose hashes cannot be recomputed.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np

from ..params import check_hash_seed
from . import absence_again, Outcome, Probe, ProbeContext, Support, param, COUNT, TOKENS, SEED
from ..engine import Cell, KvEvent
from ..events.hashing import Hasher
from .common import token_ids
from .events_common import hasher_for, new_consumer, on_stream, salt_of


@dataclass(frozen=True)
class Params:
    requests: int = param(4, "requests, each with fresh tokens", COUNT)
    prompt_tokens: int = param(100, "tokens per request", TOKENS)
    hash_seed: str = param("0", "PYTHONHASHSEED the engine starts with", check=check_hash_seed)
    client_seed: str = param("", "PYTHONHASHSEED the client hashes with ('': the engine's)", check=check_hash_seed)
    salted: bool = param(True, "send each request under a salt (the client must mix it in)")
    seed: int = param(0, "seed for the token ids", SEED)


class HashParity(Probe):
    version = "3"  # 3: a release whose salt scheme changed reads partial, naming the change
    claims = ("gateway.hash_parity",)
    rests = {("*", "confirmed"): ((Support("hash_parity_fraction", ">=", 1.0),),),
             ("*", "refuted"): ((Support("hash_parity_fraction", "<", 1.0),),),
             ("*", "partial"): ((Support("hash_parity_fraction", "<", 1.0),),)}
    Params = Params
    # the client's and the engine's seeds and the salt build the outcome (a wrong seed breaks parity by construction)
    measures = ("requests", "prompt_tokens", "seed")

    def from_evidence(self, evidence, p) -> Outcome:
        """The rule on its rows, with the scheme and its known variants it recorded beside them."""
        given = evidence["inputs"]
        if (absent := absence_again(evidence)) is not None:
            return absent
        return verdict(evidence["rows"], p.client_seed or p.hash_seed, p.hash_seed, given["release"],
                       Recorded(given["scheme"], tuple(SimpleNamespace(**v) for v in given["variants"])))

    def run(self, ctx: ProbeContext, p: Params) -> Outcome:
        return on_stream(ctx, p, self._measure, context_tokens=max(128, p.prompt_tokens + 32))

    def _measure(self, ctx: ProbeContext, p: Params, cell: Cell, rng: np.random.Generator) -> Outcome:
        rows = []
        with cell:
            d = cell.describe()
            hasher = hasher_for(d, seed=p.client_seed or p.hash_seed)
            source = new_consumer(cell)
            try:
                source.poll(0.3)
                for i in range(p.requests):
                    prompt = token_ids(rng, p.prompt_tokens, d)
                    salt = f"parity-{i}" if p.salted else None
                    cell.ensure_prefix(prompt, salt=salt)
                    stored = [e for e in source.poll(0.5) if e.kind == "stored"]
                    rows.append({"request": i, **request_row(stored, prompt, salt_of(cell, salt), hasher),
                                 "salted": p.salted})
            finally:
                source.close()
        out = verdict(rows, p.client_seed or p.hash_seed, p.hash_seed, f"{d.engine} {d.engine_version}", hasher)
        out.inputs = {"release": f"{d.engine} {d.engine_version}", "scheme": hasher.scheme,
                      "variants": [{"name": s.name, "difference": s.difference, "source": s.source}
                                   for s, _ in hasher.variants()]}
        return out


@dataclass(frozen=True)
class Recorded:
    """A hasher's scheme and its variants as a finding recorded them: what :func:`changed_scheme` reads."""

    scheme: str
    schemes: tuple[Any, ...]

    def variants(self) -> list[tuple[Any, None]]:
        return [(s, None) for s in self.schemes]


def request_row(stored: list[KvEvent], prompt: list[int], salt: str | None, hasher: Hasher) -> dict:
    """One request's stored blocks against the declared scheme's chain, and (``equal_<scheme>``) each variant's."""
    other = {f"equal_{s.name}": compare(stored, h.chain(prompt, salt=salt), h.block_size)["equal"]
             for s, h in hasher.variants()}
    return {**compare(stored, hasher.chain(prompt, salt=salt), hasher.block_size), **other}


def compare(stored: list[KvEvent], client: list[int], block_size: int) -> dict:
    """One request's stored blocks against the client's chain. Only full blocks are compared: TensorRT-LLM also
    stores a request's partial tail when it finishes (``releaseBlocks``), a block no prompt-side chain predicts;
    those are counted apart, never as a mismatch. A block counts as recomputed when its hash is in the chain."""
    pairs = [(h, toks) for e in stored for h, toks in zip(e.block_hashes, e.block_tokens or ((),) * len(e.block_hashes))]
    full = [h for h, toks in pairs if not toks or len(toks) == block_size]
    mine = set(client)
    return {"engine_blocks": len(full), "partial_blocks": len(pairs) - len(full), "client_blocks": len(client),
            "equal": sum(h in mine for h in full), "first_engine": full[0] if full else None,
            "first_client": client[0] if client else None}


def changed_scheme(rows: list[dict], blocks: int, hasher: Hasher | None) -> Any:
    """The known variant scheme (``hasher.variants()``) under which the client recomputed every block."""
    variants = [s for s, _ in hasher.variants()] if hasher is not None else []
    return next((s for s in variants if blocks and sum(r.get(f"equal_{s.name}", 0) for r in rows) == blocks), None)


def verdict(rows: list[dict], client_seed: str, engine_seed: str, release: str = "",
            hasher: Hasher | None = None) -> Outcome:
    """``hasher``: the declared scheme the rows were computed under, whose variants name a changed scheme."""
    blocks = sum(r["engine_blocks"] for r in rows)
    equal = sum(r["equal"] for r in rows)
    frac = equal / blocks if blocks else float("nan")
    metrics = {"hash_parity_fraction": frac}
    notes = [f"client PYTHONHASHSEED {client_seed!r}, engine {engine_seed!r}"]
    if not blocks:
        return Outcome("inconclusive", "The engine reported no stored block, so there was nothing to recompute.",
                       metrics, rows, notes)
    if frac == 1.0:
        return Outcome("confirmed", f"All {blocks} stored-block hashes the engine published were recomputed from the "
                       "token ids by the client.", metrics, rows, notes,
                       rests_on=(Support("hash_parity_fraction", ">=", 1.0),))
    if (scheme := changed_scheme(rows, blocks, hasher)) is not None:
        # parity then holds for the engine under another scheme: what changed is the scheme, named, not refuted
        return Outcome("partial", f"The hash scheme changed in {release or 'this release'}: {scheme.difference}. "
                       f"Under that scheme the client recomputed all {blocks} stored-block hashes; under "
                       f"{hasher.scheme}'s, {equal}. A gateway written to {hasher.scheme} must change its hashing.",
                       metrics, rows,
                       notes + [f"scheme {scheme.name}: {scheme.source}"],
                       rests_on=(Support("hash_parity_fraction", "<", 1.0),))
    return Outcome("refuted" if equal == 0 else "partial",
                   f"The client recomputed {equal} of {blocks} of the engine's block hashes ({frac:.0%}); with "
                   f"PYTHONHASHSEED {client_seed!r} against the engine's {engine_seed!r} the chains "
                   f"{'never meet' if equal == 0 else 'diverge'}.", metrics, rows, notes,
                   rests_on=(Support("hash_parity_fraction", "<", 1.0),))
