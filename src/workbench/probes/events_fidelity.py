"""events.inventory_fidelity — does an inventory built only from the engine's events predict its reuse?

A consumer subscribed from the engine's start builds the inventory (:mod:`workbench.events.inventory`); before
each request of an evicting workload it predicts the cached tokens, then the engine reports its own count
(vLLM ``num_cached_tokens``). Besides the right client (the engine's block size and hash seed), arms with a
wrong block size or a wrong ``PYTHONHASHSEED`` show the guide's diagnosis: with parity broken the inventory's
hits stay at zero while the engine's do not.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import Figure, Outcome, Probe, ProbeContext, Support, param
from ..events.consumer import Consumer
from ..events.inventory import Inventory
from .events_common import evicting_workload, hasher_for, new_consumer, open_stream_cell, salt_of


@dataclass(frozen=True)
class Params:
    requests: int = param(24, "requests in the workload")
    prefixes: int = param(4, "shared prefixes the requests draw from (Zipf-like)")
    prefix_tokens: int = param(70, "tokens per shared prefix")
    suffix_tokens: int = param(10, "fresh tokens after the prefix")
    budget_blocks: int = param(8, "KV pool of the cell, in blocks (small: the workload evicts)")
    context_tokens: int = param(128, "the cell's context")
    hash_seed: str = param("0", "PYTHONHASHSEED the engine starts with")
    wrong_block: int = param(16, "block size of the wrong-block-size arm (0: no such arm)")
    wrong_seed: str = param("1", "PYTHONHASHSEED of the wrong-seed arm ('': no such arm)")
    seed: int = param(0, "seed for the token ids")


RIGHT = "engine's block size and seed"


class InventoryFidelity(Probe):
    version = "1"
    claims = ("gateway.inventory", "gateway.diagnosis")
    figures = (Figure("predicted_vs_reported", "events_fidelity"),)
    Params = Params

    def run(self, ctx: ProbeContext, p: Params) -> Outcome:
        cell, absent = open_stream_cell(ctx, seed=p.hash_seed, buffer_steps=10_000,
                                        budget_tokens=p.budget_blocks * 32, context_tokens=p.context_tokens)
        if absent:
            return absent
        with cell:
            d0 = cell.describe()
            arms = {RIGHT: hasher_for(d0, seed=p.hash_seed)}
            if p.wrong_block:
                arms[f"block size {p.wrong_block}"] = hasher_for(d0, seed=p.hash_seed, block_size=p.wrong_block)
            if p.wrong_seed:
                arms[f"PYTHONHASHSEED {p.wrong_seed}"] = hasher_for(d0, seed=p.wrong_seed)
            # the right arm is the gateway: it holds the endpoint's lease and drains the stream; its mis-configured
            # twins are fed the same events (a second drain would take them from it on TensorRT-LLM)
            gateway = Consumer.open(new_consumer(cell), Inventory(arms.pop(RIGHT)), policy="replay")
            try:
                rows = _drive(cell, gateway, {name: Inventory(h) for name, h in arms.items()}, evicting_workload(
                    np.random.default_rng(p.seed), d0, prefixes=p.prefixes, prefix_tokens=p.prefix_tokens,
                    suffix_tokens=p.suffix_tokens, requests=p.requests))
            finally:
                gateway.close()
        return verdict(rows, gateway.removed_blocks, RIGHT)


def _drive(cell, gateway: Consumer, twins: dict[str, Inventory], w) -> list[dict]:
    rows = []
    salt = salt_of(cell, None)
    inventories = {RIGHT: gateway.inventory, **twins}
    for i, (prompt, prefix) in enumerate(zip(w.prompts, w.prefixes)):
        got = gateway.pump(0.3)
        for inv in twins.values():
            inv.apply_all(got)
        predicted = {name: inv.predict(prompt, salt=salt) for name, inv in inventories.items()}
        st = cell.ensure_prefix(prompt)
        for name, pred in predicted.items():
            rows.append({"request": i, "arm": name, "prefix": prefix, "prompt_tokens": len(prompt),
                         "predicted": pred, "reported": st.engine_reused_tokens,
                         "inventory_blocks": len(inventories[name])})
    gateway.pump(0.3)
    return rows


def verdict(rows: list[dict], evicted: int, right: str) -> Outcome:
    """``gateway.inventory`` from the right arm's rows: confirmed when every request's prediction equals the
    engine's count on a workload that evicted and hit; ``gateway.diagnosis`` from the wrong arms: confirmed when
    each predicts no hit at all while the engine reported some."""
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
    notes = [f"{a}: the inventory predicted {n} cached tokens in all" for a, n in wrong_hits.items()]
    if len(counted) < len(mine) or not mine:
        return Outcome("inconclusive", "The engine returned no cached-token count on some requests, so the "
                       "inventory's prediction has nothing to be compared with.", metrics, rows, notes, diag)
    if evicted == 0 or reported == 0:
        what = "evicted nothing" if evicted == 0 else "reused nothing"
        return Outcome("inconclusive", f"The workload {what}, so it cannot show the inventory following the "
                       "engine; shrink the pool or add requests.", metrics, rows, notes, diag,
                       claim_rests_on=diag_support)
    support = (Support("engine_evicted_blocks", ">", 0), Support("engine_reused_tokens", ">", 0))
    if exact == 1.0:
        return Outcome("confirmed", f"Every one of {len(mine)} requests got exactly the cached tokens the event "
                       f"inventory predicted ({reported} tokens reused in all), while the engine evicted {evicted} "
                       "blocks.", metrics, rows, notes, diag, claim_rests_on=diag_support,
                       rests_on=(*support, Support("inventory_exact_fraction", ">=", 1.0)))
    worst = next(r for r in mine if r["predicted"] != r["reported"])
    return Outcome("refuted" if exact < 0.5 else "partial",
                   f"The inventory's prediction matched the engine on {exact:.0%} of requests (first miss: request "
                   f"{worst['request']}, predicted {worst['predicted']}, engine {worst['reported']}).",
                   metrics, rows, notes, diag, claim_rests_on=diag_support, rests_on=(*support, Support("inventory_exact_fraction", "<", 1.0)))


def _diagnosis(wrong_hits: dict[str, int], reported: int) -> dict[str, str]:
    if not wrong_hits or reported == 0:
        return {"gateway.diagnosis": "inconclusive"}
    return {"gateway.diagnosis": "confirmed" if all(n == 0 for n in wrong_hits.values()) else "refuted"}
