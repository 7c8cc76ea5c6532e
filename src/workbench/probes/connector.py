"""connector.export_granularity — can KV be exported with positions usable for shifted import?

Two channels, chosen by what the cell offers (never by engine name):

* ``state_export`` (llama.cpp): export one sequence's KV, import it into a fresh cell of the same
  manifest at position 0 and at a shifted position, and compare the greedy continuations with the
  original. The export unit is whatever the engine exports (llama.cpp: a whole sequence).
* ``connector`` (TensorRT-LLM KV Cache Connector): a recording connector logs every scheduler and
  worker call; the probe reads the unit (block ids, tokens per block) and the positions it is
  handed, then asks a fresh engine for the same prefix behind a shifted lead-in and records
  whether the connector is offered any shifted match.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..engine import common_prefix
from . import NotRunnable, Outcome, Probe, ProbeContext, Support, param, Bound, CONTEXT, TOKENS, SEED
from .common import fresh_salt, token_ids


@dataclass(frozen=True)
class Params:
    prefix_tokens: int = param(96, "tokens in the exported prefix", Bound(2, CONTEXT))
    shift: int = param(37, "positions to shift the imported KV by", TOKENS)
    continuation: int = param(8, "greedy tokens compared after import", TOKENS)
    logits_tolerance: float = param(0.05, "largest |logit| difference after the last prompt token that an import may "
                                          "show against the original and still count as exact (re-rotating K by "
                                          "a shift rounds; on SmolLM2-class models that stays near 0.003)")
    seed: int = param(0, "seed for the probe's own token ids", SEED)

    def __post_init__(self) -> None:
        if self.logits_tolerance < 0:
            raise ValueError("logits_tolerance must be ≥ 0")


class ExportGranularity(Probe):
    version = "3"
    claims = ("unknown.connector_granularity", "contract.snapshot")
    _held = Support("restored_identical", "==", True)
    _sub, _shift = "subrange_export", "shifted_import_exact"
    _calls = ((Support("connector_calls", ">", 0),),)
    rests = {
        ("*", "refuted"): ((Support("restored_identical", "==", False),), *_calls),
        ("*", "confirmed"): ((_held, Support(_sub, "==", True), Support(_shift, "==", True)),),
        ("*", "partial"): ((_held, Support(_sub, "==", True)), (_held, Support(_shift, "==", True)),
                           (_held, Support(_sub, "==", False), Support(_shift, "==", False)), *_calls),
        # the Snapshot row: a blob that does not restore leaves "not exportable" standing; one that left refutes it
        ("contract.snapshot", "confirmed"): ((Support("restored_identical", "==", False),),),
        ("contract.snapshot", "refuted"): ((_held, Support(_sub, "==", True), Support(_shift, "==", True)),
                                           (_held, Support(_sub, "==", True)), (_held, Support(_shift, "==", True)),
                                           (_held, Support(_sub, "==", False), Support(_shift, "==", False)), *_calls),
    }
    Params = Params
    measures = ("prefix_tokens", "shift", "continuation", "seed")  # logits_tolerance is the rule's bound

    def from_evidence(self, evidence, p) -> Outcome:
        """The rule of the channel the rows came from: sequence-state arms (``arm``), or connector calls (``method``,
        with the engine's block size recorded beside them)."""
        rows = evidence["rows"]
        if rows and "arm" in rows[0]:
            return export_verdict(rows, p, "the engine", 0)
        return _connector_outcome(rows, int(evidence["inputs"]["block_tokens"]), [])

    def run(self, ctx: ProbeContext, p: Params) -> Outcome:
        with ctx.open() as cell:
            d = cell.describe()
        if "state_export" in d.observers:
            return self._state_export(ctx, p)
        if d.offers("connector"):  # on, or switchable: _connector opens its cells with it on
            return self._connector(ctx, p)
        raise NotRunnable("the cell offers neither per-sequence state export nor a KV connector")

    # ---------------------------------------------------------------- llama.cpp: sequence state

    def _state_export(self, ctx: ProbeContext, p: Params) -> Outcome:
        rng = np.random.default_rng(p.seed)
        keep = p.prefix_tokens // 2
        with ctx.open(slots=2) as src:
            d = src.describe()
            prefix = token_ids(rng, p.prefix_tokens, d)
            src.ensure_prefix(prefix)
            blob = src.export_state()
            # the last token's logits recomputed alone, as an import's first decode does: same arithmetic path
            src.recompute_range(p.prefix_tokens - 1, p.prefix_tokens)
            reference = src.decode(max_tokens=p.continuation).tokens
            ref_logits = _logits(src, prefix)
            # sub-range: copy the sequence into another slot, trim it there, export what is left
            src.import_state(blob, prefix, slot=1)
            src.remove_tail(p.prefix_tokens - keep, slot=1)
            part = src.export_state(slot=1)
        rows = [{"arm": "original", "shift": 0, "state_bytes": len(blob), "tokens": reference, "identical": True}]
        for arm, shift in (("import at 0", 0), (f"import shifted +{p.shift}", p.shift)):
            with ctx.open() as dst:
                dst.import_state(blob, prefix, position_shift=shift)
                got = dst.decode(max_tokens=p.continuation).tokens
                diff = _diff(_logits(dst, prefix), ref_logits)
                pos = dst.position_range() if hasattr(dst, "position_range") else None
            rows.append({"arm": arm, "shift": shift, "state_bytes": len(blob), "tokens": got,
                         "identical": got == reference, "logits_max_abs_diff": diff, "positions_after": pos})
        with ctx.open() as dst:  # the trimmed export must restore exactly the kept range
            dst.import_state(part, prefix[:keep])
            held = dst.resident_tokens() if "kv_readback" in d.observers else None
            # every cell the engine holds, not only the run the cell can name (capped at the tokens it gave)
            cells = len(dst.engine_positions()) if hasattr(dst, "engine_positions") else None
        rows.append({"arm": f"sub-range 0..{keep}", "shift": 0, "state_bytes": len(part), "tokens": None,
                     "identical": None, "resident_after_import": held, "engine_cells_after_import": cells,
                     "kept_tokens": keep})
        return export_verdict(rows, p, d.engine, d.geometry.bytes_per_token)

    # ---------------------------------------------------------------- TensorRT-LLM: KV connector

    def _connector(self, ctx: ProbeContext, p: Params) -> Outcome:
        rng = np.random.default_rng(p.seed)
        with ctx.open(connector="record") as cell:
            d = cell.describe()
            prefix = token_ids(rng, p.prefix_tokens, d)
            salt = fresh_salt("export")
            shifted = token_ids(rng, p.shift, d) + prefix
            cell.ensure_prefix(prefix, salt=salt)
            cell.ensure_prefix(shifted, salt=salt)
            log = cell.connector_log()
        if not any(c.get("method") == "update_state_after_alloc" for c in log):
            raise NotRunnable("the recording connector did not record: no allocation call reached its log (the "
                              "engine's worker processes may not see the log path; see cells/trtllm/connector.py)")
        # what the device may match of each request at the same positions: the tokens it shares from position 0
        # with the request before it (the first request has a fresh salt: nothing)
        shared = {len(prefix): 0, len(shifted): common_prefix(shifted, prefix)}
        rows = [_call_row(c, shared) for c in log]
        B = d.block_tokens
        allocs = [r for r in rows if r["method"] == "update_state_after_alloc"]
        matched = [r for r in rows if r["method"] == "get_num_new_matched_tokens"]
        unit_blocks = {r["n_blocks"] for r in allocs if r["n_blocks"]}
        positions = sorted({r["computed_position"] for r in rows if r.get("computed_position") is not None})
        notes = [f"connector calls: {len(rows)} ({', '.join(sorted({r['method'] for r in rows}))})",
                 f"block-id lists per allocation: {sorted(unit_blocks)}; computed positions seen: {positions[:8]}",
                 f"get_num_new_matched_tokens was offered num_computed_tokens "
                 f"{[r.get('num_computed_tokens') for r in matched]}"]
        caches = [c["args"] for c in log if c.get("method") == "register_kv_caches" and c["args"].get("bytes")]
        if caches:  # the engine's own KV tensors, as the connector was handed them
            c = caches[0]
            notes.append(f"engine KV tensors: {len(caches)} layers of shape {c['shape']}; one block of one layer is "
                         f"{c['bytes'] // c['shape'][0]} bytes (measured by the connector)")
        out = _connector_outcome(rows, B, notes)
        out.inputs = {"block_tokens": B}
        return out


def _connector_outcome(rows: list[dict], B: int, notes: list[str]) -> Outcome:
    """The connector channel's rule on its call rows: no allocation or save seen is inconclusive, else
    :func:`connector_verdict`."""
    metrics = {"export_unit_tokens": B, "block_tokens": B}
    allocs = [r for r in rows if r["method"] == "update_state_after_alloc"]
    saves = [r for r in rows if r["method"] in ("save_kv_layer", "request_finished")]
    if not allocs or not saves:
        return Outcome("inconclusive", "The recording connector saw no allocation or save calls; the export unit "
                       "could not be observed.", metrics, rows, notes)
    return connector_verdict(rows, B, metrics, notes)


def _logits(cell, prefix: list[int]):
    """The engine's logits after the prefix, with the decode's appended tokens trimmed off first."""
    if not hasattr(cell, "last_logits"):
        return None
    cell.remove_tail(cell.explain_context().tokens - len(prefix))
    return np.asarray(cell.last_logits())


def _diff(a, b) -> float | None:
    return None if a is None or b is None else float(np.max(np.abs(a - b)))


def export_verdict(rows: list[dict], p: Params, engine: str, geometry_bytes: int) -> Outcome:
    """Confirmed: a sub-range of a sequence exports on its own and a shifted import continues exactly.
    Partial: only one of the two, or a shifted import that is accepted but not exact. Refuted: the
    state does not even restore at its own positions. The Snapshot row ("engine KV blobs are not
    exportable") is refuted whenever a blob restored, confirmed when none did."""
    original, at0, shifted, sub = rows[0], rows[1], rows[2], rows[3]
    per_token = (original["state_bytes"] - sub["state_bytes"]) / (p.prefix_tokens - sub["kept_tokens"])
    subrange = (sub["state_bytes"] < original["state_bytes"]
                and sub["resident_after_import"] in (None, sub["kept_tokens"])
                and sub.get("engine_cells_after_import") in (None, sub["kept_tokens"]))
    def close(r: dict) -> bool:  # same greedy tokens and, where read back, the same logits within tolerance
        return bool(r["identical"]) and (r.get("logits_max_abs_diff") is None
                                         or r["logits_max_abs_diff"] <= p.logits_tolerance)

    restored, exact = close(at0), close(shifted)
    metrics = {"export_unit_tokens": sub["kept_tokens"] if subrange else p.prefix_tokens,
               "state_bytes": original["state_bytes"], "restored_identical": restored,
               "shifted_import_exact": exact, "subrange_export": subrange, "state_bytes_per_token": per_token}
    if shifted.get("logits_max_abs_diff") is not None:
        metrics["shifted_logits_max_abs_diff"] = shifted["logits_max_abs_diff"]
    notes = [f"state grows {per_token:.0f} bytes per token: the K/V rows (geometry says {geometry_bytes}) plus the "
             "cell's position and sequence ids",
             f"sub-range export (copy, trim to {sub['kept_tokens']} tokens, export): "
             + (f"{sub['state_bytes']} bytes, restored {sub['resident_after_import']} tokens" if subrange
                else "not smaller than the whole sequence"),
             f"greedy continuation after import: at 0 {'identical' if restored else 'DIFFERENT'}, "
             f"shifted +{p.shift} {'identical' if exact else 'DIFFERENT'} (logits max |Δ| "
             f"{shifted.get('logits_max_abs_diff')})"]
    rows = [{k: (list(v) if isinstance(v, tuple) else v) for k, v in r.items()} for r in rows]
    if not restored:
        return Outcome("refuted", f"Exported state does not even restore identically on {engine}.", metrics, rows,
                       notes, {"contract.snapshot": "confirmed"}, rests_on=(Support("restored_identical", "==", False),),
                       claim_reasons={"contract.snapshot": f"KV blobs are not exportable, as the row says: the "
                                      f"state {engine} exported did not restore identically, so no usable KV blob "
                                      "left it."})
    held = Support("restored_identical", "==", True)
    what = {"subrange_export": subrange, "shifted_import_exact": exact}  # each branch rests on the parts that held
    rests = (held, *(Support(k, "==", True) for k, v in what.items() if v)) if subrange or exact else (
        held, *(Support(k, "==", False) for k in what))
    snapshot = {"contract.snapshot": "refuted"}  # a KV blob was exported and restored
    said = {"contract.snapshot": (f"KV blobs are exportable, against the row's \"not exportable\": {engine} "
                                  f"exported a {original['state_bytes']}-byte KV state and restored it with identical "
                                  "greedy tokens, so KV can leave the engine.")}
    if subrange and exact:
        return Outcome("confirmed", f"{engine} exports KV with positions: a trimmed sub-range of a sequence exports "
                       f"on its own, and a {p.prefix_tokens}-token state imported at a +{p.shift} shift continues "
                       "with identical greedy tokens.", metrics, rows, notes, snapshot, rests_on=rests,
                       claim_reasons=said)
    if exact or subrange:
        return Outcome("partial", f"{engine} exports KV with positions only in part: sub-range export "
                       f"{'works' if subrange else 'does not work'}, shifted import "
                       f"{'is exact' if exact else 'is not exact'}.", metrics, rows, notes, snapshot, rests_on=rests,
                       claim_reasons=said)
    agree = common_prefix(shifted["tokens"], original["tokens"])
    return Outcome("partial", f"{engine} exports whole sequences only; a state imported at a +{p.shift} shift is "
                   f"accepted but not exact (greedy continuation agreed for {agree} of {len(original['tokens'])} "
                   "tokens; the shifted K is re-rotated, with rounding).", metrics, rows, notes, snapshot, rests_on=rests,
                   claim_reasons=said)


def connector_verdict(rows: list[dict], B: int, metrics: dict, notes: list[str]) -> Outcome:
    """Each ``get_num_new_matched_tokens`` offer is read against ``shared_tokens``, what its request shares from
    position 0 with the request before it. An offer within that is a continuation of the device-matched prefix;
    one not on a block boundary is partial-block reuse (TensorRT-LLM 1.2, ``enable_partial_reuse`` on by default:
    ``WindowBlockManager::loadOrAllocateBlocks`` adds the leading tokens a stored block shares, ``BlockKey::
    partialMatch``, cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp), still at the same positions. Every offer a
    continuation: whole-prefix onboard only (refuted). An offer beyond the shared tokens, i.e. KV matched behind
    the shifted lead-in: positions usable for shifted import reach the connector, in part (partial; no import was
    tried). No offer whose request is known: inconclusive. Blocks saved through the connector contradict the
    Snapshot row's "engine KV blobs are not exportable" (refuted there)."""
    matched = [r for r in rows if r["method"] == "get_num_new_matched_tokens"]
    judged = [r for r in matched if r.get("shared_tokens") is not None]
    beyond = [r for r in judged if (r.get("num_computed_tokens") or 0) > r["shared_tokens"]]
    partial_block = [r for r in judged if r not in beyond and (r.get("num_computed_tokens") or 0) % B]
    metrics = metrics | {"connector_calls": len(rows)}  # no shifted import was tried: nothing to call exact
    notes = notes + [f"partial-block reuse (a match inside a block at the same positions, not a shifted offer): "
                     f"num_computed_tokens {[r['num_computed_tokens'] for r in partial_block]}"] if partial_block else notes
    snapshot = {"contract.snapshot": "refuted"}  # KV blocks left the engine through the connector
    said = {"contract.snapshot": ("KV blobs are exportable, against the row's \"not exportable\": the "
                                  "engine handed KV blocks to the connector to save, so KV can leave the engine.")}
    if not judged:
        return Outcome("inconclusive", "No get_num_new_matched_tokens call could be tied to a probe request; what the "
                       "connector was offered cannot be read against the shifted lead-in.", metrics, rows, notes)
    if beyond:
        r = beyond[0]
        return Outcome("partial", f"The connector was offered {r['num_computed_tokens']} matched tokens for a request "
                       f"that shares only {r['shared_tokens']} with the one before it at the same positions: KV behind "
                       "a shifted lead-in reaches it, but no exact shifted import was shown.", metrics, rows, notes,
                       snapshot, rests_on=(Support("connector_calls", ">", 0),), claim_reasons=said)
    unit = (f"; offers inside a block ({len(partial_block)}) are partial-block reuse at the same positions"
            if partial_block else "")
    return Outcome("refuted", f"The connector exports whole blocks of {B} tokens (all layers) identified by block ids in "
                   "sequence order; import is offered only as a continuation of the device-matched prefix "
                   f"(get_num_new_matched_tokens){unit}, so the same prefix behind a shifted lead-in is not "
                   "importable: whole-prefix onboard only.", metrics, rows, notes, snapshot, rests_on=(Support("connector_calls", ">", 0),),
                   claim_reasons=said)


def _call_row(call: dict, shared: dict[int, int]) -> dict:
    """One connector call; ``shared_tokens``: for a match offer, what its request (known by its prompt length)
    shares from position 0 with the request before it, None for a request the probe did not send."""
    args = call.get("args", {})
    block_ids = args.get("block_ids") or args.get("cache_block_ids") or args.get("new_block_ids")
    offer = call.get("method") == "get_num_new_matched_tokens"
    return {"method": call.get("method"), "request_id": args.get("request_id"),
            "n_blocks": len(block_ids) if block_ids is not None else None,
            "num_computed_tokens": args.get("num_computed_tokens"),
            "shared_tokens": shared.get(args.get("tokens")) if offer else None,
            "computed_position": args.get("computed_position"), "layer": args.get("layer_idx")}


