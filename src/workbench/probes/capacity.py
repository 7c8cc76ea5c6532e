"""capacity.budget_policy — can the KV budget be driven in bytes from the capacity policy?

For each byte budget of a fixed set, open a cell with ``kv_budget_bytes`` and read from the engine what it
really took: the capacity it accepts (filled until it refuses or evicts, ``capacity`` observer, or its
``created`` KV event) and its KV bytes (``capacity`` observer's :class:`~workbench.engine.KvMemory`: the
bytes per token the engine states and, where it exposes them, the bytes it allocated). The verdict grades the
engine's KV bytes against each byte budget, never a token count times the model config's geometry.

The budgets are a fixed set, sized in the engine's own bytes per token, that includes sizes aligned to no power
of two and one not even to a whole token, so the verdict grades the engine's rounding rather than the budgets a
user happened to choose.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..engine import KvMemory, UnsupportedFeature
from . import Decision, Figure, NotRunnable, Outcome, Probe, ProbeContext, Support, param

BUDGETS = (256, 300, 1000.5, 1536, 2500)
"""Budgets in tokens of the engine's own KV bytes: 300, 1000.5 and 2500 align to no power of two, 1000.5 not even
to a whole token (half a token of bytes over 1000)."""


@dataclass(frozen=True)
class Params:
    tolerance: float = param(0.05, "a budget missed by at most this fraction of its bytes, either way, is met exactly")
    max_overshoot: float = param(0.25, "engine KV bytes over a budget, or usable capacity under it, by more than this "
                                       "fraction of the budget: the budget does not bound the engine (confirmed)")

    def __post_init__(self) -> None:
        if not 0 <= self.tolerance < 1:
            raise ValueError("tolerance must be in [0, 1)")
        if not self.tolerance < self.max_overshoot:
            raise ValueError("max_overshoot must be larger than tolerance")


class BudgetPolicy(Probe):
    version = "4"
    claims = ("risk.memory_fraction", "contract.describe")
    _over = ((Support("engine_kv_bytes", ">", None),), (Support("measured_capacity_tokens", "<", None),))
    _within = ((Support("engine_kv_bytes", "<=", None), Support("measured_capacity_tokens", ">=", None)),)
    rests = {("*", "confirmed"): _over, ("contract.describe", "refuted"): _over, ("*", "partial"): _within,
             ("*", "refuted"): _within, ("contract.describe", "confirmed"): _within}
    figures = (Figure("capacity", "capacity"),)
    Params = Params
    measures = ()  # tolerance and max_overshoot are the rule's bounds: a run that moves them is exploratory

    def from_evidence(self, evidence, p) -> Outcome:
        return verdict(evidence["rows"], p)

    def run(self, ctx: ProbeContext, p: Params) -> Outcome:
        with ctx.open(kv_budget_tokens=int(min(BUDGETS))) as probe_cell:
            d = probe_cell.describe()
            memory, unread = _memory(probe_cell, d)
        # without a capacity observer, the pool tensor the engine hands a KV connector states its bytes
        opts = {"connector": "record"} if "capacity" not in d.observers and d.offers("connector") else {}
        if opts:
            with ctx.open(kv_budget_tokens=int(min(BUDGETS)), **opts) as probe_cell:
                memory, unread = _memory(probe_cell, probe_cell.describe())
        # the budgets are sized in the engine's own bytes per token where it states them
        bpt = memory.bytes_per_token if memory is not None else d.geometry.bytes_per_token
        rows = []
        for tokens in BUDGETS:
            budget = round(tokens * bpt)
            with ctx.open(kv_budget_bytes=budget, **opts) as cell:
                d = cell.describe()
                measured, how = _capacity(cell, d)
                rows.append(budget_row(budget, tokens, d.kv_capacity_tokens, measured, how,
                                       d.geometry.bytes_per_token, _memory(cell, d)[0], d.extra.get("kv_buffer_bytes")))
        out = verdict(rows, p)
        if unread:  # what the cell could not read, in its own words
            out.notes.append(f"engine KV bytes unread: {unread}")
        return out


def _capacity(cell, d) -> tuple[int, str]:
    if "capacity" in d.observers:
        absent = "eviction" in d.absent  # an engine that never evicts refuses instead
        return cell.measure_capacity(), f"filled until the engine {'refused' if absent else 'evicted'}"
    if "kv_events" in d.observers:
        created = [e for e in cell.drain_kv_events() if e.kind == "created"]
        if created and created[0].num_blocks:
            return created[0].num_blocks[0] * d.block_tokens, "created event (primary blocks × tokens_per_block)"
    raise NotRunnable("the cell offers neither a capacity measurement nor KV events; capacity would be a config echo")


def _memory(cell, d) -> tuple[KvMemory | None, str | None]:
    """The engine's statement of its KV bytes, or None and why the cell has no channel to it."""
    try:
        if "capacity" in d.observers:
            return cell.kv_memory(), None
        if "connector" in d.observers:
            return pool_memory(cell.connector_log(), d.block_tokens), None
    except UnsupportedFeature as e:
        return None, str(e)
    return None, "the cell offers neither the capacity observer's KV bytes nor a KV connector's pool"


def pool_memory(log: list[dict], block_tokens: int) -> KvMemory | None:
    """TensorRT-LLM: the KV bytes of the one primary pool tensor the engine hands a KV connector
    (``register_kv_caches``; shape [primary blocks, layers, 2, kv_heads · tokens_per_block · head_dim],
    ``kv_cache_manager.get_unique_primary_pool()`` in ``PyExecutor._maybe_init_kv_connector_manager``,
    tensorrt_llm/_torch/pyexecutor/py_executor.py, 1.2 line). None unless exactly one pool with its bytes."""
    pools = [c.get("args", {}) for c in log if c.get("method") == "register_kv_caches"]
    if len(pools) != 1 or not pools[0].get("bytes") or not pools[0].get("shape"):
        return None
    pool = pools[0]
    return KvMemory(bytes_per_token=pool["bytes"] / (pool["shape"][0] * block_tokens), pool_bytes=int(pool["bytes"]),
                    how="the primary pool tensor the engine handed the KV connector (register_kv_caches: "
                        "numel × element size); per token: its bytes / (its blocks × tokens_per_block)")


def budget_row(budget: int, tokens: float, reported: int, measured: int, how: str, geometry_bpt: int, memory,
               log_bytes: int | None) -> dict:
    """One budget's evidence, each figure labelled by where it came from (the metric sources of
    :mod:`workbench.metrics`): engine-read, the cell's, or derived from those."""
    row = {"budget_bytes": budget, "budget_tokens": tokens, "reported_capacity_tokens": reported,
           "measured_capacity_tokens": measured, "measured_by": how, "kv_bytes_per_token": geometry_bpt,
           "engine_kv_bytes_per_token": None, "engine_kv_bytes": None, "engine_kv_bytes_how": None,
           "usable_bytes": None, "over_budget_bytes": None, "overshoot": None, "capacity_error": None,
           "log_kv_buffer_bytes_rounded": log_bytes,  # a log line in MiB to 0.01: context only
           "sources": "engine: measured_capacity_tokens, engine_kv_bytes_per_token, engine_kv_bytes; cell: "
                      "reported_capacity_tokens, kv_bytes_per_token (config geometry); derived: the rest"}
    if memory is None:
        return row
    ebpt = memory.bytes_per_token
    usable = measured * ebpt
    engine = memory.pool_bytes if memory.pool_bytes is not None else usable
    return row | {"engine_kv_bytes_per_token": ebpt, "engine_kv_bytes": engine,
                  "engine_kv_bytes_how": memory.how if memory.pool_bytes is not None
                  else f"measured capacity × the engine's bytes per token ({memory.how})",
                  "usable_bytes": usable, "over_budget_bytes": engine - budget,
                  "overshoot": (engine - budget) / budget, "capacity_error": (usable - budget) / budget}


@dataclass(frozen=True)
class Budgets:
    """What the byte-budget rule reads, summarised from the budget rows: the budget the engine's bytes overshot
    most, the one whose usable capacity fell furthest short, how many missed the tolerance, and the rule's bounds."""

    rows: tuple[dict, ...]
    unread: int  # budgets without engine-read bytes (then none of the rows below is graded)
    tolerance: float
    max_overshoot: float
    over: dict | None = None  # the budget with the highest overshoot (engine KV bytes over the budget)
    short: dict | None = None  # the budget with the lowest capacity_error (usable capacity against the budget)
    missed: int = 0  # budgets missed by more than the tolerance, either way
    geometry_off: dict | None = None  # the first budget whose config bytes per token are not the engine's

    @property
    def nearest(self) -> dict:
        """Of the two, the budget missed by more (the overshoot on a tie)."""
        return self.over if abs(self.over["overshoot"]) >= abs(self.short["capacity_error"]) else self.short

    def within(self, share: float) -> tuple[Support, ...]:
        """The engine's bytes and the capacity it took, within ``share`` of the :attr:`nearest` budget."""
        b, per_token = self.nearest["budget_bytes"], self.nearest["engine_kv_bytes_per_token"]
        return (Support("engine_kv_bytes", "<=", b * (1 + share)),
                Support("measured_capacity_tokens", ">=", b * (1 - share) / per_token))


def summarise(rows: list[dict], p: Params) -> Budgets:
    unread = sum(1 for r in rows if r["engine_kv_bytes"] is None or r["engine_kv_bytes_per_token"] is None)
    if unread:
        return Budgets(tuple(rows), unread, p.tolerance, p.max_overshoot)
    return Budgets(tuple(rows), 0, p.tolerance, p.max_overshoot, over=max(rows, key=lambda r: r["overshoot"]),
                   short=min(rows, key=lambda r: r["capacity_error"]),
                   missed=sum(1 for r in rows if abs(r["overshoot"]) > p.tolerance or r["capacity_error"] < -p.tolerance),
                   geometry_off=next((r for r in rows if r["kv_bytes_per_token"] != r["engine_kv_bytes_per_token"]),
                                     None))


def decide(s: Budgets) -> Decision:
    """The ladder: bytes read → bytes over the budget beyond max_overshoot → capacity short of it beyond that →
    any budget missed beyond the tolerance → every budget met."""
    if s.unread:
        return Decision("inconclusive", "unread")
    m = s.max_overshoot
    if s.over["overshoot"] > m:
        return Decision("confirmed", "over", {"contract.describe": "refuted"},
                        (Support("engine_kv_bytes", ">", s.over["budget_bytes"] * (1 + m)),))
    if s.short["capacity_error"] < -m:
        return Decision("confirmed", "short", {"contract.describe": "refuted"},
                        (Support("measured_capacity_tokens", "<",
                                 s.short["budget_bytes"] * (1 - m) / s.short["engine_kv_bytes_per_token"]),))
    if s.missed:
        return Decision("partial", "missed", {"contract.describe": "partial"}, s.within(m))
    return Decision("refuted", "met", {"contract.describe": "partial" if s.geometry_off else "confirmed"},
                    s.within(s.tolerance))


def explain(d: Decision, s: Budgets) -> str:
    """The verdict's summary in words."""
    n = len(s.rows)
    if d.case == "unread":
        return (f"The engine stated no KV bytes for {s.unread}/{n} budgets (the cell has no channel to them here); "
                "capacity in tokens times the config's geometry would be the workbench's arithmetic, so the byte "
                "budget cannot be graded.")
    over, short = s.over, s.short
    if d.case in ("over", "short"):
        if d.case == "over":
            what = (f"the engine took {over['engine_kv_bytes']:,.0f} B of KV for a budget of {over['budget_bytes']:,} B "
                    f"({over['overshoot']:+.0%}, {over['budget_tokens']:g} tokens' worth)")
        else:
            what = (f"the engine accepted {short['usable_bytes']:,.0f} B of KV for a budget of "
                    f"{short['budget_bytes']:,} B ({short['capacity_error']:+.0%})")
        return (f"A byte budget does not bound the engine's KV: {what}, beyond the {s.max_overshoot:.0%} a byte-based "
                "policy can absorb; a policy cannot set its capacity in bytes.")
    if d.case == "missed":
        return (f"The byte budget drives the engine's KV up to its allocation unit: {s.missed}/{n} budgets missed by "
                f"more than {s.tolerance:.0%} but at most {s.max_overshoot:.0%} (bytes over the budget at most "
                f"{over['overshoot']:+.1%}, usable capacity at worst {short['capacity_error']:+.1%}); a policy must "
                "budget in the engine's unit.")
    return (f"Every byte budget ({n}, non-aligned ones included) got the KV bytes it asked for, within "
            f"{s.tolerance:.0%}, read from the engine: capacity can be driven in bytes from the policy.")


def _metrics(d: Decision, s: Budgets) -> dict:
    if d.case == "unread":  # the budget whose capacity in tokens is furthest from it
        far = max(s.rows, key=lambda r: abs(r["measured_capacity_tokens"] - r["budget_tokens"]))
        return {"budget_bytes": far["budget_bytes"], "measured_capacity_tokens": far["measured_capacity_tokens"],
                "kv_bytes_per_token": far["kv_bytes_per_token"]}
    worst = {"over": s.over, "short": s.short}.get(d.case, s.nearest)  # the budget that speaks for the verdict
    return {"budget_bytes": worst["budget_bytes"], "budget_tokens": worst["budget_tokens"],
            "engine_kv_bytes": worst["engine_kv_bytes"], "over_budget_bytes": worst["over_budget_bytes"],
            "measured_capacity_tokens": worst["measured_capacity_tokens"],
            "engine_kv_bytes_per_token": worst["engine_kv_bytes_per_token"],
            "kv_bytes_per_token": worst["kv_bytes_per_token"], "capacity_error": s.short["capacity_error"],
            "max_overshoot": s.over["overshoot"]}


def _notes(s: Budgets) -> list[str]:
    notes = [_note(r) for r in s.rows] + [f"engine KV bytes: {h}" for h in dict.fromkeys(
        r["engine_kv_bytes_how"] for r in s.rows if r["engine_kv_bytes_how"])]
    if s.geometry_off:
        r = s.geometry_off
        notes.append(f"the config's geometry says {r['kv_bytes_per_token']} B/token, the engine "
                     f"{r['engine_kv_bytes_per_token']:g}: Describe's geometry is not the engine's")
    return notes


def verdict(rows: list[dict], p: Params) -> Outcome:
    """Graded in bytes over the fixed budgets: ``overshoot`` is the engine's KV bytes over the budget, and
    ``capacity_error`` the bytes of the capacity it really accepts against the budget. Either beyond
    ``max_overshoot``: the budget does not bound the engine (confirmed). Beyond ``tolerance`` only: the engine
    follows the budget up to its allocation unit (partial). Every budget within tolerance: bytes drive capacity
    (refuted). Any budget without engine-read bytes: inconclusive. The Describe row ("KV geometry from config.json,
    enforced via max_tokens") is confirmed only when the budget is met and the config's bytes per token are the
    engine's."""
    s = summarise(rows, p)
    d = decide(s)
    return Outcome(d.verdict, explain(d, s), _metrics(d, s), rows, _notes(s), dict(d.claim_verdicts),
                   rests_on=d.rests_on, claim_reasons=_describe_reason(d, s))


def _describe_reason(d: Decision, s: Budgets) -> dict[str, str]:
    """The Describe row's own reason ("KV geometry from config.json, enforced via max_tokens"): the budget's grade
    read as that row's, and whether the config's bytes per token are the engine's."""
    row = d.claim_verdicts.get("contract.describe")
    if row is None:
        return {}
    geometry = (f"the config's geometry says {s.geometry_off['kv_bytes_per_token']} B/token, the engine "
                f"{s.geometry_off['engine_kv_bytes_per_token']:g}" if s.geometry_off else
                "the config's bytes per token are the engine's")
    enforced = {"over": "a capacity set from the config is not what the engine holds (bytes over the budget)",
                "short": "a capacity set from the config is not what the engine holds (capacity short of the budget)",
                "missed": "the engine follows the budget only up to its allocation unit",
                "met": "the capacity set from the config is what the engine holds"}[d.case]
    return {"contract.describe": f"{enforced[:1].upper()}{enforced[1:]}; {geometry}."}


def _note(r: dict) -> str:
    head = f"budget {r['budget_bytes']:,} B ({r['budget_tokens']:g} tok) → {r['measured_capacity_tokens']} tok ({r['measured_by']})"
    if r["measured_capacity_tokens"] != r["reported_capacity_tokens"]:
        head += f", the engine declares {r['reported_capacity_tokens']}"
    if r["engine_kv_bytes"] is None:
        return head + "; the engine stated no KV bytes"
    log = r["log_kv_buffer_bytes_rounded"]
    return (head + f"; engine KV {r['engine_kv_bytes']:,.0f} B ({r['overshoot']:+.1%} against the budget), usable "
            f"{r['capacity_error']:+.1%}" + (f"; engine log ≈{log:,} B, rounded to 0.01 MiB" if log else ""))
