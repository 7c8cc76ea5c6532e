"""capacity.budget_policy — can the KV budget be driven in bytes from the capacity policy?

For each byte budget (given as tokens × the model's KV bytes per token), open a cell with
``kv_budget_bytes`` and measure the capacity the engine really has: by filling the cache until the
engine refuses (``capacity`` observer), or from the engine's ``created`` KV event; and its KV memory
from the engine's own allocation report. The budget is honoured when the real capacity neither
exceeds the byte budget nor falls short of it by more than ``tolerance``.

The budgets are a fixed set that includes sizes aligned to no power of two, so the verdict grades the
engine's rounding (its overshoot) rather than the budgets a user happened to choose.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import Figure, NotRunnable, Outcome, Probe, ProbeContext, param


BUDGETS = (256, 300, 1000, 1536, 2500)  # tokens × KV bytes/token; 300, 1000 and 2500 align to nothing


@dataclass(frozen=True)
class Params:
    tolerance: float = param(0.05, "allowed miss of real capacity against the budget, either way (fraction)")

    def __post_init__(self) -> None:
        if not 0 <= self.tolerance < 1:
            raise ValueError("tolerance must be in [0, 1)")


class BudgetPolicy(Probe):
    version = "2"
    claims = ("risk.memory_fraction", "contract.describe")
    figures = (Figure("capacity", "capacity"),)
    Params = Params

    def run(self, ctx: ProbeContext, p: Params) -> Outcome:
        rows = []
        with ctx.open(kv_budget_tokens=min(BUDGETS)) as probe_cell:
            bpt = probe_cell.describe().geometry.bytes_per_token
        for tokens in BUDGETS:
            budget = tokens * bpt
            with ctx.open(kv_budget_bytes=budget) as cell:
                d = cell.describe()
                measured, how = _capacity(cell, d)
                kv_bytes = d.extra.get("kv_buffer_bytes")
                rows.append({
                    "budget_bytes": budget, "budget_tokens": budget // bpt, "reported_capacity_tokens": d.kv_capacity_tokens,
                    "measured_capacity_tokens": measured, "measured_by": how, "kv_bytes_per_token": bpt,
                    "log_kv_buffer_bytes_rounded": kv_bytes,  # from a log line in MiB to 0.01: context only
                    "measured_bytes": measured * bpt,
                    "over_budget_bytes": measured * bpt - budget,
                    "capacity_error": (measured - budget // bpt) / (budget // bpt),
                })
        return _verdict(rows, p)


def _capacity(cell, d) -> tuple[int, str]:
    if "capacity" in d.observers:
        return cell.measure_capacity(), "filled until the engine refused"
    if "kv_events" in d.observers:
        created = [e for e in cell.drain_kv_events() if e.kind == "created"]
        if created and created[0].num_blocks:
            return created[0].num_blocks[0] * d.block_tokens, "created event (primary blocks × tokens_per_block)"
    raise NotRunnable("the cell offers neither a capacity measurement nor KV events; capacity would be a config echo")


def _verdict(rows: list[dict], p: Params) -> Outcome:
    """Short of a budget beyond tolerance: the risk is real (confirmed). Over a budget beyond tolerance:
    the engine rounds up (partial). Every budget within tolerance: capacity follows bytes (refuted)."""
    over = [r for r in rows if r["capacity_error"] > p.tolerance]
    short = [r for r in rows if r["capacity_error"] < -p.tolerance]
    worst = max(rows, key=lambda r: abs(r["capacity_error"]))
    metrics = {"budget_bytes": worst["budget_bytes"], "budget_tokens": worst["budget_tokens"],
               "measured_capacity_tokens": worst["measured_capacity_tokens"], "kv_bytes_per_token": worst["kv_bytes_per_token"],
               "capacity_error": worst["capacity_error"],
               "max_overshoot": max(r["capacity_error"] for r in rows)}
    notes = [f"budget {r['budget_tokens']} tok → measured {r['measured_capacity_tokens']} tok "
             f"({r['capacity_error']:+.1%}; {r['measured_by']}; engine log: KV buffer ≈{r['log_kv_buffer_bytes_rounded']} B, rounded)"
             for r in rows]
    if short:
        return Outcome("confirmed", f"The byte budget does not drive capacity: {len(short)}/{len(rows)} budgets got "
                       f"less than {1 - p.tolerance:.0%} of their tokens (worst {worst['capacity_error']:+.1%}).",
                       metrics, rows, notes, {"contract.describe": "refuted"}, rests_on=("measured_capacity_tokens",))
    if over:
        r = max(over, key=lambda r: r["capacity_error"])
        return Outcome("partial", f"The byte budget drives capacity but the engine rounds up: {len(over)}/{len(rows)} "
                       f"budgets overshot by more than {p.tolerance:.0%} (worst: {r['budget_tokens']} → "
                       f"{r['measured_capacity_tokens']} tokens, {r['capacity_error']:+.0%}, {r['over_budget_bytes']} "
                       "bytes over); a policy must budget in the engine's allocation unit.",
                       metrics, rows, notes, {"contract.describe": "partial"}, rests_on=("measured_capacity_tokens",))
    return Outcome("refuted", f"Every byte budget ({len(rows)}) gave exactly the capacity it asked for, within "
                   f"{p.tolerance:.0%}: capacity can be driven in bytes from the policy.", metrics, rows, notes,
                   {"contract.describe": "confirmed"}, rests_on=("measured_capacity_tokens",))
