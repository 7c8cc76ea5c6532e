"""events.inventory_isolation — do salted or LoRA requests stay apart in an inventory built from events?

Tenant A sends a prompt, then tenant B (another salt) sends the same tokens, then A again. The LoRA arm does the
same on an engine with a LoRA adapter loaded (one written from the model's geometry, as ``isolation.cache_salt``
does): the prompt without the adapter, then with it, twice, all under one salt, so only the adapter tells them
apart. The inventory keyed on the engine's hashes predicts each request; the engine reports each. ``client_salt=
False`` is a client that keys blocks on its own hash of their tokens (LoxiLB's ``blockhash_trtllm`` uses the
engine's hash only as a handle): it merges tenants and adapters.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass

import numpy as np

from ..params import check_hash_seed
from . import absence_again, Outcome, Probe, ProbeContext, Support, param, COUNT, TOKENS, SEED
from .. import adapters, models
from ..engine import Cell, UnsupportedFeature, WorkbenchError
from ..events.consumer import Consumer
from ..events.inventory import Inventory
from .common import fresh_salt, token_ids
from .events_common import hasher_for, kept_out, lora_key, new_consumer, on_stream, open_stream_cell, salt_of


@dataclass(frozen=True)
class Params:
    prompts: int = param(3, "prompts, each sent by tenant A, then B, then A", COUNT)
    prompt_tokens: int = param(70, "tokens per prompt", TOKENS)
    client_salt: bool = param(True, "the client mixes the tenant's salt (and adapter) into its hashes as the engine does")
    lora: bool = param(True, "also send the prompts without and with a LoRA adapter (a second engine)")
    hash_seed: str = param("0", "PYTHONHASHSEED the engine starts with", check=check_hash_seed)
    seed: int = param(0, "seed for the token ids", SEED)


class InventoryIsolation(Probe):
    version = "2"
    claims = ("gateway.isolation",)
    _apart = ((Support("engine_cross_tenant_reused_tokens", "<=", 0), Support("engine_reused_tokens", ">", 0)),)
    rests = {("*", "refuted"): ((Support("engine_cross_tenant_reused_tokens", ">", 0),), *_apart),
             ("*", "confirmed"): _apart, ("*", "partial"): _apart}
    # a client that leaves the salt out merges tenants by construction: client_salt (and every other parameter but
    # these) is exploratory
    measures = ("prompts", "prompt_tokens", "seed")
    Params = Params

    def from_evidence(self, evidence, p) -> Outcome:
        return absence_again(evidence) or verdict(evidence["rows"])

    def run(self, ctx: ProbeContext, p: Params) -> Outcome:
        return on_stream(ctx, p, self._measure)

    def _measure(self, ctx: ProbeContext, p: Params, cell: Cell, rng: np.random.Generator) -> Outcome:
        rows = []
        with cell:
            d = cell.describe()
            # client_salt=False: a gateway keying blocks on its own hash of their tokens (the salt unseen)
            c = Consumer.open(new_consumer(cell), Inventory(hasher_for(d, seed=p.hash_seed), rekey=not p.client_salt),
                              skip=kept_out(cell))
            try:
                for i in range(p.prompts):
                    prompt = token_ids(rng, p.prompt_tokens, d)
                    for step, tenant in enumerate(("A", "B", "A")):
                        c.pump(0.3)
                        predicted = c.inventory.predict(prompt, salt=salt_of(cell, f"tenant-{tenant}-{i}"))
                        st = cell.ensure_prefix(prompt, salt=f"tenant-{tenant}-{i}")
                        rows.append({"arm": "salt", "prompt": i, "step": step, "tenant": tenant,
                                     "predicted": predicted, "reported": st.engine_reused_tokens})
            finally:
                c.close()
        notes = []
        if p.lora:
            got, why = self._lora_arm(ctx, p, rng)
            rows += got
            notes += [why] if why else []
        return verdict(rows, notes)

    def _lora_arm(self, ctx: ProbeContext, p: Params, rng: np.random.Generator) -> tuple[list[dict], str | None]:
        """The prompts without and with the engine's loaded adapter, one salt throughout; (rows, why not run)."""
        rows = []
        with tempfile.TemporaryDirectory(prefix="workbench-lora-") as tmp:
            try:
                path = str(adapters.write_lora(models.hf_directory(ctx.resolved), tmp))
                cell, absent = open_stream_cell(ctx, seed=p.hash_seed, buffer_steps=10_000, budget_tokens=32 * 32,
                                                context_tokens=128, adapters=[path])
            except (WorkbenchError, ValueError) as e:  # no adapter for this model, or the engine takes none
                return [], f"LoRA arm not run: {e}"
            if absent:
                return [], "LoRA arm not run: the engine with an adapter has no event stream"
            with cell:
                d = cell.describe()
                c = Consumer.open(new_consumer(cell), Inventory(hasher_for(d, seed=p.hash_seed),
                                                                rekey=not p.client_salt), skip=kept_out(cell))
                try:
                    for i in range(p.prompts):
                        prompt, key = token_ids(rng, p.prompt_tokens, d), fresh_salt("lora")
                        for step, adapter in enumerate((False, True, True)):
                            c.pump(0.3)
                            predicted = c.inventory.predict(prompt, salt=key, lora=lora_key(cell) if adapter else None)
                            reply = cell.adapter_request(prompt, key=key, adapter=adapter, max_tokens=1)
                            rows.append({"arm": "lora", "prompt": i, "step": step,
                                         "tenant": "adapter" if adapter else "base", "predicted": predicted,
                                         "reported": reply.reused_tokens})
                except UnsupportedFeature as e:
                    return [], f"LoRA arm not run: {e}"
                finally:
                    c.close()
        return rows, None


def verdict(rows: list[dict], notes: list[str] = ()) -> Outcome:
    """Over every arm (salted tenants, and base against adapter): step 1 is the cross request (another tenant or
    adapter), step 2 the repeat. Confirmed when neither the engine nor the inventory carries anything across and
    every prediction equals the engine's count; refuted when either merges them."""
    notes = list(notes) + [f"arms: {', '.join(dict.fromkeys(r.get('arm', 'salt') for r in rows))}"]
    cross = [r for r in rows if r["step"] == 1]
    repeat = [r for r in rows if r["step"] == 2]
    metrics = {"cross_tenant_predicted_tokens": sum(r["predicted"] for r in cross),
               "engine_cross_tenant_reused_tokens": sum(r["reported"] or 0 for r in cross),
               "engine_reused_tokens": sum(r["reported"] or 0 for r in repeat)}
    if any(r["reported"] is None for r in rows):
        return Outcome("inconclusive", "The engine returned no cached-token count on some requests.", metrics, rows, notes)
    if metrics["engine_reused_tokens"] == 0:
        return Outcome("inconclusive", "Not even a tenant's own repeat hit the cache, so isolation cannot be told "
                       "from no reuse at all.", metrics, rows, notes)
    if metrics["engine_cross_tenant_reused_tokens"] > 0:
        return Outcome("refuted", "The engine itself served one tenant's blocks to another: there is no isolation "
                       "for an inventory to keep.", metrics, rows, notes,
                       rests_on=(Support("engine_cross_tenant_reused_tokens", ">", 0),))
    if metrics["cross_tenant_predicted_tokens"] > 0:
        merged = sorted({r.get("arm", "salt") for r in cross if r["predicted"] > 0})
        return Outcome("refuted", f"The engine kept them apart, but the inventory predicted "
                       f"{metrics['cross_tenant_predicted_tokens']} cached tokens across {' and '.join(merged)} "
                       "boundaries: its hashes leave the salt or adapter out, so those requests merge.",
                       metrics, rows, notes,
                       rests_on=(Support("engine_cross_tenant_reused_tokens", "<=", 0),
                                 Support("engine_reused_tokens", ">", 0)))
    exact = all(r["predicted"] == r["reported"] for r in rows)
    what = "Salted tenants and LoRA requests" if any(r.get("arm") == "lora" for r in rows) else "Salted tenants"
    return Outcome("confirmed" if exact else "partial",
                   f"{what} stayed apart in the inventory as in the engine (no cross-tenant prediction or "
                   f"reuse; each tenant's repeat reused {metrics['engine_reused_tokens']} tokens in all)"
                   + ("." if exact else ", but some same-tenant predictions missed the engine's count."),
                   metrics, rows, notes, rests_on=(Support("engine_cross_tenant_reused_tokens", "<=", 0),
                                            Support("engine_reused_tokens", ">", 0)))
