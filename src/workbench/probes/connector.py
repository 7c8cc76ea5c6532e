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

from ..contract import common_prefix
from . import NotRunnable, Outcome, Probe, ProbeContext, param
from .common import fresh_salt, token_ids


@dataclass(frozen=True)
class Params:
    prefix_tokens: int = param(96, "tokens in the exported prefix")
    shift: int = param(37, "positions to shift the imported KV by")
    continuation: int = param(8, "greedy tokens compared after import")
    seed: int = param(0, "seed for the probe's own token ids")

    def __post_init__(self) -> None:
        if self.prefix_tokens < 2 or self.shift < 1 or self.continuation < 1:
            raise ValueError("prefix_tokens ≥ 2, shift ≥ 1 and continuation ≥ 1 are required")


class ExportGranularity(Probe):
    name = "connector.export_granularity"
    claim = ("Whether the Connector API can export blocks with positions usable for shifted import, or only "
             "whole-prefix onboard.")
    claims = ("unknown.connector_granularity", "contract.snapshot")
    Params = Params

    def run(self, ctx: ProbeContext, p: Params) -> Outcome:
        with ctx.open() as cell:
            observers = cell.describe().observers
        if "state_export" in observers:
            return self._state_export(ctx, p)
        if "connector" in observers:
            return self._connector(ctx, p)
        raise NotRunnable("the cell offers neither per-sequence state export nor a KV connector")

    # ---------------------------------------------------------------- llama.cpp: sequence state

    def _state_export(self, ctx: ProbeContext, p: Params) -> Outcome:
        rng = np.random.default_rng(p.seed)
        with ctx.open() as src:
            d = src.describe()
            prefix = token_ids(rng, p.prefix_tokens, d)
            src.ensure_prefix(prefix[: p.prefix_tokens // 2])
            half = src.export_state()
            src.ensure_prefix(prefix)
            blob = src.export_state()
            reference = src.decode(max_tokens=p.continuation).tokens
        rows = [{"arm": "original", "shift": 0, "state_bytes": len(blob), "tokens": reference, "identical": True}]
        for arm, shift in (("import at 0", 0), (f"import shifted +{p.shift}", p.shift)):
            with ctx.open() as dst:
                dst.import_state(blob, prefix, position_shift=shift)
                got = dst.decode(max_tokens=p.continuation).tokens
                pos = dst.position_range() if hasattr(dst, "position_range") else None
            rows.append({"arm": arm, "shift": shift, "state_bytes": len(blob), "tokens": got,
                         "identical": got == reference, "positions_after": pos})
        per_token = (len(blob) - len(half)) / (p.prefix_tokens - p.prefix_tokens // 2)
        restored, shifted = rows[1]["identical"], rows[2]["identical"]
        metrics = {"export_unit_tokens": p.prefix_tokens, "state_bytes": len(blob),
                   "restored_identical": restored, "shifted_import_exact": shifted,
                   "kv_bytes_per_token": per_token}
        notes = [f"state grows {per_token:.0f} bytes per token (geometry says {d.geometry.bytes_per_token} of KV); "
                 "the engine exports whole sequences — there is no sub-range or block export",
                 f"greedy continuation after import: at 0 {'identical' if restored else 'DIFFERENT'}, "
                 f"shifted +{p.shift} {'identical' if shifted else 'DIFFERENT'}"]
        if restored and shifted:
            return Outcome("partial", f"{d.engine} exports KV per whole sequence (not per block) with positions: "
                           f"a {p.prefix_tokens}-token state imported at a +{p.shift} shift continues with identical "
                           "greedy tokens, so shifted import works, at sequence granularity.", metrics,
                           _jsonable(rows), notes, {"contract.snapshot": "confirmed"})
        if restored:
            agree = common_prefix(rows[2]["tokens"], reference)
            return Outcome("partial", f"{d.engine} exports KV per whole sequence (not per block); a state imported at a "
                           f"+{p.shift} shift is accepted but not exact: the greedy continuation agreed for {agree} of "
                           f"{len(reference)} tokens (the shifted K is re-rotated, with rounding), while an import at "
                           "the original positions continues identically.", metrics, _jsonable(rows), notes,
                           {"contract.snapshot": "confirmed"})
        return Outcome("refuted", f"Exported state does not even restore identically on {d.engine}.", metrics,
                       _jsonable(rows), notes, {"contract.snapshot": "refuted"})

    # ---------------------------------------------------------------- TensorRT-LLM: KV connector

    def _connector(self, ctx: ProbeContext, p: Params) -> Outcome:
        rng = np.random.default_rng(p.seed)
        with ctx.open(connector="record") as cell:
            d = cell.describe()
            prefix = token_ids(rng, p.prefix_tokens, d)
            salt = fresh_salt("export")
            cell.ensure_prefix(prefix, salt=salt)
            cell.ensure_prefix(token_ids(rng, p.shift, d) + prefix, salt=salt)
            log = cell.connector_log()
        if not any(c.get("method") == "update_state_after_alloc" for c in log):
            raise NotRunnable("the recording connector did not record: no allocation call reached its log (the "
                              "engine's worker processes may not see the log path; see observe/trtllm_connector.py)")
        rows = [_call_row(c) for c in log]
        B = d.block_tokens
        allocs = [r for r in rows if r["method"] == "update_state_after_alloc"]
        matched = [r for r in rows if r["method"] == "get_num_new_matched_tokens"]
        saves = [r for r in rows if r["method"] in ("save_kv_layer", "request_finished")]
        unit_blocks = {r["n_blocks"] for r in allocs if r["n_blocks"]}
        positions = sorted({r["computed_position"] for r in rows if r.get("computed_position") is not None})
        metrics = {"export_unit_tokens": B, "block_tokens": B}
        notes = [f"connector calls: {len(rows)} ({', '.join(sorted({r['method'] for r in rows}))})",
                 f"block-id lists per allocation: {sorted(unit_blocks)}; computed positions seen: {positions[:8]}",
                 f"get_num_new_matched_tokens was offered num_computed_tokens "
                 f"{[r.get('num_computed_tokens') for r in matched]}"]
        if not allocs or not saves:
            return Outcome("inconclusive", "The recording connector saw no allocation or save calls; the export unit "
                           "could not be observed.", metrics, rows, notes)
        shifted_offered = any((r.get("num_computed_tokens") or 0) % B and r.get("num_computed_tokens") for r in matched)
        metrics["shifted_import_exact"] = False
        return Outcome("refuted" if not shifted_offered else "partial",
                       f"The connector exports whole blocks of {B} tokens (all layers) identified by block ids in "
                       "sequence order; import is offered only as a continuation of the device-matched prefix "
                       "(get_num_new_matched_tokens), so the same prefix behind a shifted lead-in is not importable: "
                       "whole-prefix onboard only.", metrics, rows, notes, {"contract.snapshot": "partial"})


def _call_row(call: dict) -> dict:
    args = call.get("args", {})
    block_ids = args.get("block_ids") or args.get("cache_block_ids") or args.get("new_block_ids")
    return {"method": call.get("method"), "request_id": args.get("request_id"),
            "n_blocks": len(block_ids) if block_ids is not None else None,
            "num_computed_tokens": args.get("num_computed_tokens"),
            "computed_position": args.get("computed_position"), "layer": args.get("layer_idx")}


def _jsonable(rows: list[dict]) -> list[dict]:
    return [{k: (list(v) if isinstance(v, tuple) else v) for k, v in r.items()} for r in rows]
