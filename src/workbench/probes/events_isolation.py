"""events.inventory_isolation — do salted tenants stay apart in an inventory built from events?

Tenant A sends a prompt, then tenant B (another salt) sends the same tokens, then A again. The inventory keyed on
the engine's hashes predicts B's and A's repeat; the engine reports both. ``client_salt=False`` is a client that
keys blocks on its own hash of their tokens (LoxiLB's ``blockhash_trtllm`` uses the engine's hash only as a handle):
it merges the tenants.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import Outcome, Probe, ProbeContext, Support, param
from ..events.consumer import Consumer
from ..events.inventory import Inventory
from .common import token_ids
from .events_common import hasher_for, new_consumer, open_stream_cell, salt_of


@dataclass(frozen=True)
class Params:
    prompts: int = param(3, "prompts, each sent by tenant A, then B, then A")
    prompt_tokens: int = param(70, "tokens per prompt")
    client_salt: bool = param(True, "the client mixes the tenant's salt into its hashes as the engine does")
    hash_seed: str = param("0", "PYTHONHASHSEED the engine starts with")
    seed: int = param(0, "seed for the token ids")


class InventoryIsolation(Probe):
    version = "1"
    claims = ("gateway.isolation",)
    Params = Params

    def run(self, ctx: ProbeContext, p: Params) -> Outcome:
        cell, absent = open_stream_cell(ctx, seed=p.hash_seed, buffer_steps=10_000, budget_tokens=32 * 32,
                                        context_tokens=128)
        if absent:
            return absent
        rng = np.random.default_rng(p.seed)
        rows = []
        with cell:
            d = cell.describe()
            # client_salt=False: a gateway keying blocks on its own hash of their tokens (the salt unseen)
            c = Consumer.open(new_consumer(cell), Inventory(hasher_for(d, seed=p.hash_seed), rekey=not p.client_salt))
            try:
                for i in range(p.prompts):
                    prompt = token_ids(rng, p.prompt_tokens, d)
                    for step, tenant in enumerate(("A", "B", "A")):
                        c.pump(0.3)
                        predicted = c.inventory.predict(prompt, salt=salt_of(cell, f"tenant-{tenant}-{i}"))
                        st = cell.ensure_prefix(prompt, salt=f"tenant-{tenant}-{i}")
                        rows.append({"prompt": i, "step": step, "tenant": tenant, "predicted": predicted,
                                     "reported": st.engine_reused_tokens})
            finally:
                c.close()
        return verdict(rows)


def verdict(rows: list[dict]) -> Outcome:
    cross = [r for r in rows if r["step"] == 1]
    repeat = [r for r in rows if r["step"] == 2]
    metrics = {"cross_tenant_predicted_tokens": sum(r["predicted"] for r in cross),
               "engine_cross_tenant_reused_tokens": sum(r["reported"] or 0 for r in cross),
               "engine_reused_tokens": sum(r["reported"] or 0 for r in repeat)}
    if any(r["reported"] is None for r in rows):
        return Outcome("inconclusive", "The engine returned no cached-token count on some requests.", metrics, rows)
    if metrics["engine_reused_tokens"] == 0:
        return Outcome("inconclusive", "Not even a tenant's own repeat hit the cache, so isolation cannot be told "
                       "from no reuse at all.", metrics, rows)
    if metrics["engine_cross_tenant_reused_tokens"] > 0:
        return Outcome("refuted", "The engine itself served one tenant's blocks to another: there is no isolation "
                       "for an inventory to keep.", metrics, rows,
                       rests_on=(Support("engine_cross_tenant_reused_tokens", ">", 0),))
    if metrics["cross_tenant_predicted_tokens"] > 0:
        return Outcome("refuted", f"The engine kept the tenants apart, but the inventory predicted "
                       f"{metrics['cross_tenant_predicted_tokens']} cached tokens across tenants: its hashes leave "
                       "the salt out, so salted requests merge.", metrics, rows,
                       rests_on=(Support("engine_cross_tenant_reused_tokens", "<=", 0),
                                 Support("engine_reused_tokens", ">", 0)))
    exact = all(r["predicted"] == r["reported"] for r in rows)
    return Outcome("confirmed" if exact else "partial",
                   "Salted tenants stayed apart in the inventory as in the engine (no cross-tenant prediction or "
                   f"reuse; each tenant's repeat reused {metrics['engine_reused_tokens']} tokens in all)"
                   + ("." if exact else ", but some same-tenant predictions missed the engine's count."),
                   metrics, rows, rests_on=(Support("engine_cross_tenant_reused_tokens", "<=", 0),
                                            Support("engine_reused_tokens", ">", 0)))
