"""events.admission — does ``GET /server_info`` report the block size and hash contract a routing rule must match?

The probe reads the served engine's ``/server_info`` (``?config_format=json``: vLLM's dev router, present only
with ``VLLM_SERVER_DEV_MODE=1``; TensorRT-LLM 1.2 answers only ``disaggregated_params``, 1.3+ adds
``tokens_per_block`` and ``kv_cache_hash_algo``), learns the engine's real block size from its own stored
events, and applies the gateway's admission gate (LoxiLB ``kvTrtllmAdmissionGate``: refuse a reported block
size or hash that differs from the rule's; admit as "legacy" when neither is reported) to a rule with the
engine's block size and to one with ``wrong_block``. An engine without events: not-applicable; an engine run
in-process (its served twin has the endpoint): not-run, with the command that runs the served one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from . import absence_again, NotRunnable, Outcome, Probe, ProbeContext, Support, param, COUNT, TOKENS, SEED
from .. import cells
from ..engine import KvEvent
from ..events.sources import CellSource
from .common import token_ids
from .events_common import absent, open_with, salt_of


@dataclass(frozen=True)
class Params:
    wrong_block: int = param(16, "block size of the mismatched rule", TOKENS)
    budget_tokens: int = param(1024, "KV budget of the cell, in tokens", COUNT)
    seed: int = param(0, "seed for the token ids", SEED)


@dataclass(frozen=True)
class Contract:
    """What ``/server_info`` said: the block size and hash algorithm, where it names them."""

    status: int
    block_size: int | None
    hash_algo: str | None


def read_contract(status: int, doc: Mapping[str, Any] | None, plane: Any) -> Contract:
    """The block size and hash algorithm where the engine's event plane reads them (its ``rule``)."""
    block, algo = plane.rule(doc if isinstance(doc, Mapping) else {})
    return Contract(status, int(block) if block else None, str(algo) if algo else None)


def gate(c: Contract, rule_block: int) -> str:
    """The gateway's admission decision for a rule of ``rule_block`` tokens per block."""
    if c.block_size is None and c.hash_algo is None:
        return "admitted (legacy: nothing reported)"
    if c.block_size is not None and c.block_size != rule_block:
        return "refused"
    return "admitted"


class Admission(Probe):
    version = "3"
    claims = ("gateway.admission",)
    rests = {(c, v): ((Support("engine_block_tokens", ">", 0),),) for c in ("*",) for v in ("confirmed", "refuted", "partial")}
    Params = Params
    measures = ("budget_tokens", "seed")  # wrong_block sizes the mismatched rule: exploratory

    def from_evidence(self, evidence, p) -> Outcome:
        return absence_again(evidence) or verdict(evidence["rows"])

    def run(self, ctx: ProbeContext, p: Params) -> Outcome:
        rng = np.random.default_rng(p.seed)
        with open_with(ctx, dict(kv_budget_tokens=p.budget_tokens, context_tokens=256, hash_seed=HASH_SEED),
                       dict(kv_budget_tokens=p.budget_tokens, context_tokens=256), {}) as cell:
            d = cell.describe()
            url = d.extra.get("endpoint") if d.extra.get("transport") == "http" else None
            if "kv_events" not in d.observers:
                return absent(d)
            if not url:  # the claim is about the server: this run's configuration lacks it, the engine does not
                raise NotRunnable(f"{d.engine} runs in-process here: there is no /server_info for a gateway to admit "
                                  f"it by, so the claim is not tested; run the served engine: {served_command(ctx)}")
            import httpx

            r = httpx.get(f"{url}/server_info", params={"config_format": "json"}, timeout=30.0)
            doc = r.json() if r.headers.get("content-type", "").startswith("application/json") else None
            plane = cells.event_plane(d.engine)
            contract = read_contract(r.status_code, doc, plane)
            source = CellSource(cell)
            source.poll(0.3)
            prompt = token_ids(rng, 4 * d.block_tokens + 1, d)
            cell.ensure_prefix(prompt)
            stored = [e for e in source.poll(1.0) if e.kind == "stored"]
            reproduces = _reproduces(contract, plane, d, prompt, salt_of(cell, None), stored)
        actual = engine_block_size(stored)
        wrong = p.wrong_block if p.wrong_block != actual else 2 * (actual or p.wrong_block)
        rows = [{"rule_block": b, "reported_block": contract.block_size, "reported_hash": contract.hash_algo,
                 "reported_hash_reproduces": reproduces, "engine_block": actual, "status": contract.status,
                 "decision": gate(contract, b)} for b in (actual or d.block_tokens, wrong)]
        return verdict(rows)


def served_command(ctx: ProbeContext) -> str:
    """The command that runs this probe on the served twin of the engine run in-process here."""
    served = [s for s, runs in cells.SERVED.items() if runs == cells.runs(ctx.engine)]
    return (f"workbench probe events.admission --engine {served[0]} --model {ctx.model} --out findings" if served
            else f"no served twin of {ctx.engine} is registered")


HASH_SEED = "0"  # the PYTHONHASHSEED a served vLLM starts with, so the reported hash can be recomputed


def engine_block_size(stored: list[KvEvent]) -> int | None:
    """Tokens per block as the engine's own stored events show them: the size of a block another block chains
    onto (a full one; TensorRT-LLM also stores a request's partial tail, which is never a parent)."""
    sizes = {len(toks) for e in stored for toks in e.block_tokens[:-1]}
    parents = {e.parent_hash for e in stored}
    sizes |= {len(toks) for e in stored for h, toks in zip(e.block_hashes[-1:], e.block_tokens[-1:]) if h in parents}
    return max(sizes) if sizes else None


def _reproduces(c: Contract, plane: Any, d, prompt: list[int], salt: str | None, stored: list[KvEvent]) -> bool | None:
    """Whether the hash ``/server_info`` names, at the block size it names, recomputes the engine's stored hashes
    from the prompt (None: nothing named, or a hash this workbench does not reproduce)."""
    if not c.hash_algo or not stored:
        return None
    B = c.block_size or d.block_tokens
    try:
        hasher = plane.rule_hasher(B, c.hash_algo, d)
    except ValueError:  # a hash this workbench does not reproduce
        return None
    engine = {h for e in stored for h in e.block_hashes}
    return bool(engine) and set(hasher.chain(prompt, salt=salt)) <= engine


def verdict(rows: list[dict]) -> Outcome:
    """Confirmed when ``/server_info`` names the block size the engine's own events show and a hash that
    recomputes the engine's stored hashes, so the gate refuses the mismatched rule (seen in its row); refuted
    when it names none (the mismatched rule is admitted as legacy), a wrong size or a hash that does not
    reproduce the engine's."""
    r = rows[0]
    metrics = {"engine_block_tokens": r["engine_block"] or 0}
    wrong = [x for x in rows if x["rule_block"] != r["engine_block"]]
    if r["engine_block"] is None:
        return Outcome("inconclusive", "The engine stored no block another block chains onto, so its real block "
                       "size is unknown; send a longer prompt.", metrics, rows)
    if r["status"] >= 500:
        return Outcome("inconclusive", f"/server_info failed ({r['status']}).", metrics, rows)
    support = (Support("engine_block_tokens", ">", 0),)
    if r["reported_block"] is None:
        admitted = [x["rule_block"] for x in wrong if x["decision"].startswith("admitted")]
        return Outcome("refuted", f"/server_info (HTTP {r['status']}) names no block size"
                       f"{'' if r['reported_hash'] else ' and no hash'}: a rule of {admitted or '?'} tokens per block "
                       f"is admitted against the engine's {r['engine_block']}.", metrics, rows, rests_on=support)
    if r["reported_block"] != r["engine_block"]:
        return Outcome("refuted", f"/server_info reports {r['reported_block']} tokens per block, but the engine's own "
                       f"events store {r['engine_block']}.", metrics, rows, rests_on=support)
    if r["reported_hash"] and r.get("reported_hash_reproduces") is False:
        return Outcome("refuted", f"/server_info names hash {r['reported_hash']!r}, but that hash does not recompute "
                       "the engine's stored block hashes from the prompt: a rule matching it routes on keys the "
                       "engine never publishes.", metrics, rows, rests_on=support)
    refused = [x["rule_block"] for x in wrong if x["decision"] == "refused"]
    if not r["reported_hash"] or not refused or r.get("reported_hash_reproduces") is None:
        what = ("no hash algorithm" if not r["reported_hash"] else
                "no mismatched rule was refused" if not refused else
                f"a hash ({r['reported_hash']!r}) that could not be recomputed here")
        return Outcome("partial", f"/server_info reports the block size ({r['reported_block']}) but {what}.",
                       metrics, rows, rests_on=support)
    return Outcome("confirmed", f"/server_info reports {r['reported_block']} tokens per block (as the engine's events "
                   f"store) and hash {r['reported_hash']!r} (it recomputes the engine's stored hashes): the gate "
                   f"refuses a rule of {', '.join(map(str, refused))}.", metrics, rows, rests_on=support)
