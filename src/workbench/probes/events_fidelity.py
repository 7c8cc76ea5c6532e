"""events.inventory_fidelity — does an inventory built only from the engine's events predict its reuse?

A consumer subscribed from the engine's start builds the inventory (:mod:`workbench.events.inventory`); before
each request of an evicting workload it predicts the cached tokens, then the engine reports its own count
(vLLM ``num_cached_tokens``). Beside it runs a twin that ignores ``removed`` events: unless the engine's count
falls below that twin's prediction on some request, no request asked for an evicted block and the workload
never tested eviction. Besides the right client (the engine's block size and hash seed), arms with a wrong block
size, a wrong ``PYTHONHASHSEED`` or a wrong tokenizer (the request's text, as the engine's tokenizer decodes its
ids, read with another model's tokenizer) show the guide's diagnosis: with parity broken the inventory's hits
stay at zero while the engine's do not. The diagnosis also names wrong event ownership, which no arm tests (a
second drain would split the gateway's own stream): it is settled as partial at most, its note saying so.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from ..params import check_hash_seed
from . import absence_again, Figure, Outcome, Probe, ProbeContext, Support, param, Bound, CONTEXT, COUNT, TOKENS, SEED
from .. import models
from ..engine import Cell, WorkbenchError
from ..events.consumer import Consumer
from ..events.inventory import Inventory
from .events_common import evicting_workload, hasher_for, kept_out, new_consumer, on_stream, salt_of


@dataclass(frozen=True)
class Params:
    requests: int = param(24, "requests in the workload", COUNT)
    prefixes: int = param(4, "shared prefixes the requests draw from (Zipf-like)", COUNT)
    prefix_tokens: int = param(70, "tokens per shared prefix", TOKENS)
    suffix_tokens: int = param(10, "fresh tokens after the prefix", TOKENS)
    budget_blocks: int = param(8, "KV pool of the cell, in blocks (small: the workload evicts)", COUNT)
    context_tokens: int = param(128, "the cell's context", TOKENS)
    hash_seed: str = param("0", "PYTHONHASHSEED the engine starts with", check=check_hash_seed)
    wrong_block: int = param(16, "block size of the wrong-block-size arm (0: no such arm)",
                             Bound(0, CONTEXT))
    wrong_seed: str = param("1", "PYTHONHASHSEED of the wrong-seed arm ('': no such arm)", check=check_hash_seed)
    wrong_tokenizer: str = param("synthetic:vocab=384", "model whose tokenizer the wrong-tokenizer arm reads each "
                                 "request's text with ('': no such arm)")
    seed: int = param(0, "seed for the token ids", SEED)


RIGHT = "engine's block size and seed"


class InventoryFidelity(Probe):
    version = "3"  # 3: the diagnosis is partial, event ownership untested
    claims = ("gateway.inventory", "gateway.diagnosis")
    _seen = (Support("engine_evicted_blocks", ">", 0), Support("engine_reused_tokens", ">", 0))
    _reused = ((Support("engine_reused_tokens", ">", 0),),)
    rests = {("*", "confirmed"): ((*_seen, Support("inventory_exact_fraction", ">=", 1.0)),),
             ("*", "refuted"): ((*_seen, Support("inventory_exact_fraction", "<", 1.0)),),
             ("*", "partial"): ((*_seen, Support("inventory_exact_fraction", "<", 1.0)),),
             ("gateway.diagnosis", "partial"): _reused, ("gateway.diagnosis", "refuted"): _reused}
    figures = (Figure("predicted_vs_reported", "events_fidelity"),)
    Params = Params
    # the workload's size and seed: measurement; the engine's hash seed and the wrong arms are not
    measures = ("requests", "prefixes", "prefix_tokens", "suffix_tokens", "budget_blocks", "context_tokens", "seed")

    def from_evidence(self, evidence, p) -> Outcome:
        return absence_again(evidence) or verdict(evidence["rows"], evidence["inputs"]["evicted_blocks"], RIGHT)

    def run(self, ctx: ProbeContext, p: Params) -> Outcome:
        return on_stream(ctx, p, self._measure, budget_tokens=p.budget_blocks * 32, context_tokens=p.context_tokens)

    def _measure(self, ctx: ProbeContext, p: Params, cell: Cell, rng: np.random.Generator) -> Outcome:
        notes = []
        with cell:
            d0 = cell.describe()
            right = hasher_for(d0, seed=p.hash_seed)
            arms: dict[str, tuple[Inventory, Callable[[list[int]], list[int]]]] = {}
            if p.wrong_block:
                arms[f"block size {p.wrong_block}"] = (
                    Inventory(hasher_for(d0, seed=p.hash_seed, block_size=p.wrong_block)), list)
            if p.wrong_seed:
                arms[f"PYTHONHASHSEED {p.wrong_seed}"] = (Inventory(hasher_for(d0, seed=p.wrong_seed)), list)
            w = evicting_workload(rng, d0, prefixes=p.prefixes,
                                  prefix_tokens=p.prefix_tokens, suffix_tokens=p.suffix_tokens, requests=p.requests)
            if p.wrong_tokenizer:
                try:
                    texts = Retokenizer.load(ctx, p.wrong_tokenizer)
                    arms[f"tokenizer of {p.wrong_tokenizer}"] = (Inventory(right), texts.view)
                    w = dataclasses.replace(w, prompts=[texts.canonical(x) for x in w.prompts])
                except WorkbenchError as e:
                    notes.append(f"wrong-tokenizer arm not run: {e}")
            # the right arm is the gateway: it holds the endpoint's lease and drains the stream; its mis-configured
            # twins, and one that ignores removals, are fed the same events (a second drain would take them from
            # it on TensorRT-LLM)
            gateway = Consumer.open(new_consumer(cell), Inventory(right), policy="replay", skip=kept_out(cell))
            try:
                rows = _drive(cell, gateway, Inventory(right), arms, w)
            finally:
                gateway.close()
        out = verdict(rows, gateway.removed_blocks, RIGHT, notes)
        out.inputs = {"evicted_blocks": gateway.removed_blocks}  # the engine's removal events the gateway consumed
        return out


@dataclass(frozen=True)
class Retokenizer:
    """A request's text read by two tokenizers: the engine's (its Hugging Face ``tokenizer.json``) and another
    model's. The workload is first made the engine tokenizer's own reading of its text (``canonical``), so a
    gateway with the right tokenizer would get the very ids the engine got; ``view`` is what a gateway holding
    the other tokenizer gets for the same text."""

    engine: object
    other: object

    @classmethod
    def load(cls, ctx: ProbeContext, spec: str) -> "Retokenizer":
        from tokenizers import Tokenizer

        def one(model: models.ResolvedModel):
            path = Path(models.hf_directory(model)) / "tokenizer.json"
            if not path.is_file():
                raise WorkbenchError(f"{model.name} ships no tokenizer.json")
            return Tokenizer.from_file(str(path))

        return cls(one(ctx.resolved), one(models.resolve(spec)))

    def canonical(self, ids: Sequence[int]) -> list[int]:
        return self.engine.encode(self.engine.decode(list(ids)), add_special_tokens=False).ids

    def view(self, ids: Sequence[int]) -> list[int]:
        return self.other.encode(self.engine.decode(list(ids)), add_special_tokens=False).ids


def _drive(cell, gateway: Consumer, blind: Inventory,
           arms: dict[str, tuple[Inventory, Callable[[list[int]], list[int]]]], w) -> list[dict]:
    rows = []
    salt = salt_of(cell, None)
    for i, (prompt, prefix) in enumerate(zip(w.prompts, w.prefixes)):
        got = gateway.pump(0.3)
        blind.apply_all(e for e in got if e.kind != "removed")
        for inv, _ in arms.values():
            inv.apply_all(got)
        predicted = {RIGHT: (gateway.inventory.predict(prompt, salt=salt), len(gateway.inventory))}
        predicted |= {name: (inv.predict(view(prompt), salt=salt), len(inv)) for name, (inv, view) in arms.items()}
        unremoved = blind.predict(prompt, salt=salt)
        st = cell.ensure_prefix(prompt)
        for name, (pred, held) in predicted.items():
            rows.append({"request": i, "arm": name, "prefix": prefix, "prompt_tokens": len(prompt),
                         "predicted": pred, "reported": st.engine_reused_tokens, "inventory_blocks": held}
                        | ({"predicted_ignoring_removals": unremoved} if name == RIGHT else {}))
    gateway.pump(0.3)
    return rows


def verdict(rows: list[dict], evicted: int, right: str, notes: Sequence[str] = ()) -> Outcome:
    """``gateway.inventory`` from the right arm's rows: confirmed when every request's prediction equals the
    engine's count on a workload that evicted and hit, and on which eviction mattered (the engine reported less
    than an inventory ignoring removals predicted, on some request); ``gateway.diagnosis`` from the wrong arms:
    confirmed when each predicts no hit at all while the engine reported some."""
    mine = [r for r in rows if r["arm"] == right]
    counted = [r for r in mine if r["reported"] is not None]
    reported = sum(r["reported"] for r in counted)
    exact = sum(r["predicted"] == r["reported"] for r in counted) / len(counted) if counted else float("nan")
    metrics = {"inventory_exact_fraction": exact, "engine_evicted_blocks": evicted, "engine_reused_tokens": reported,
               "inventory_predicted_hit_tokens": sum(r["predicted"] for r in mine)}
    wrong = {r["arm"] for r in rows} - {right}
    wrong_hits = {a: sum(r["predicted"] for r in rows if r["arm"] == a) for a in sorted(wrong)}
    diag = _diagnosis(wrong_hits, reported)
    diag_support = {"gateway.diagnosis": (Support("engine_reused_tokens", ">", 0),)}
    notes = list(notes) + [f"{a}: the inventory predicted {n} cached tokens in all" for a, n in wrong_hits.items()]
    notes.append(f"gateway.diagnosis tested {', '.join(wrong_hits) or 'no wrong arm'}; not tested: {UNTESTED_CAUSE}")
    removal_tested = sum(r["reported"] < r.get("predicted_ignoring_removals", -1) for r in counted)
    metrics["removal_tested_requests"] = removal_tested
    if len(counted) < len(mine) or not mine:
        return Outcome("inconclusive", "The engine returned no cached-token count on some requests, so the "
                       "inventory's prediction has nothing to be compared with.", metrics, rows, notes, diag)
    if evicted == 0 or reported == 0:
        what = "evicted nothing" if evicted == 0 else "reused nothing"
        return Outcome("inconclusive", f"The workload {what}, so it cannot show the inventory following the "
                       "engine; shrink the pool or add requests.", metrics, rows, notes, diag,
                       claim_rests_on=diag_support)
    support = (Support("engine_evicted_blocks", ">", 0), Support("engine_reused_tokens", ">", 0))
    if exact == 1.0 and not removal_tested:
        return Outcome("inconclusive", f"Every request got the predicted cached tokens and the engine evicted "
                       f"{evicted} blocks, but no request asked for an evicted block: an inventory that ignored "
                       "removals would have predicted the same, so eviction was never put to the test.",
                       metrics, rows, notes, diag, claim_rests_on=diag_support)
    if exact == 1.0:
        return Outcome("confirmed", f"Every one of {len(mine)} requests got exactly the cached tokens the event "
                       f"inventory predicted ({reported} tokens reused in all), while the engine evicted {evicted} "
                       f"blocks; on {removal_tested} of them an inventory ignoring removals would have predicted "
                       "reuse the engine no longer had.", metrics, rows, notes, diag, claim_rests_on=diag_support,
                       rests_on=(*support, Support("inventory_exact_fraction", ">=", 1.0)))
    worst = next(r for r in mine if r["predicted"] != r["reported"])
    return Outcome("refuted" if exact < 0.5 else "partial",
                   f"The inventory's prediction matched the engine on {exact:.0%} of requests (first miss: request "
                   f"{worst['request']}, predicted {worst['predicted']}, engine {worst['reported']}).",
                   metrics, rows, notes, diag, claim_rests_on=diag_support, rests_on=(*support, Support("inventory_exact_fraction", "<", 1.0)))


UNTESTED_CAUSE = ("event ownership: no arm lets another consumer drain the gateway's events (the gateway holds the "
                  "stream's lease here), so the claim's third cause is never put to the test")


def _diagnosis(wrong_hits: dict[str, int], reported: int) -> dict[str, str]:
    """The claim names block size, tokenizer and event ownership; the arms test the first two (and the seed), so
    every wrong arm at zero hits settles it in part, never whole."""
    if not wrong_hits or reported == 0:
        return {"gateway.diagnosis": "inconclusive"}
    return {"gateway.diagnosis": "partial" if all(n == 0 for n in wrong_hits.values()) else "refuted"}
