"""gateway.routing — does KV-exact routing beat fullproxy on engine-read hit rate and TTFT?

A pool of served endpoints with their KV events (:mod:`workbench.gateway.pool`), admission first (the rule's
block size and hash against ``/server_info`` and the engine's own stored events), then the loop's trace replayed
under each shape (round robin, least load, KV-exact: :mod:`workbench.gateway.router`), sessions interleaved a
few at a time, repeats rotating the shapes' order. Per request the engine reports ``cached_tokens``; the gateway
times TTFT. The verdict rests on the KV-exact shape's engine-read hit-rate gain over the better fullproxy shape
(a paired 95% bootstrap interval over the same requests); TTFT, a timing, only makes a gain ``confirmed`` rather
than ``partial``. Faults: ``router_block`` (a router hashing with another block size, admitted blind as a gateway
does where ``/server_info`` names nothing: its inventory never matches) and ``kill_wave`` (an endpoint killed
mid-run: dropped, its requests retried elsewhere and named in the rows).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from . import Bound, COUNT, Decision, Figure, NotRunnable, Outcome, Probe, ProbeContext, SEED, Support, TOKENS, param
from .. import cells, models
from ..cells.served import default_log_dir
from ..gateway import experiment, measure
from ..gateway.pool import Pool, PoolSpec
from ..gateway.router import FULLPROXY
from ..gateway.workload import Request, sessions_from_trace
from ..certify.classes import ResultClass

MARGIN = 0.01
"""A hit-rate gain below one percentage point of prompt tokens is no gain."""

_GAIN = Support("routing_hit_gain_ci_low", ">", 0.0)
TTFT_LOW = "routing_ttft_speedup_ci_low"
"""What tells confirmed from partial: a timing, so no support (supports are engine readings), but recorded and
re-checked (:meth:`GatewayRouting.rederive`)."""


def _check_trace(value: str, what: str) -> None:
    from ..loop import traces

    try:
        traces.resolve(value)
    except traces.TraceError as e:
        raise ValueError(f"{what}: {e}") from None


@dataclass(frozen=True)
class Params:
    endpoints: int = param(2, "served endpoints in the pool", Bound(1, 4))
    trace: str = param("claude-code", "the loop's trace replayed: claude-code, mooncake (hash-only), taubench (chat: "
                       "the model's own tokenizer folder renders it), or a path", check=_check_trace)
    sessions: int = param(3, "sessions of the trace (claude-code has 3: the main one and two sub-agents)", COUNT)
    turns: int = param(4, "turns per session", COUNT)
    concurrency: int = param(2, "sessions in flight at once", Bound(1, 16))
    repeats: int = param(2, "repeats of every shape (their order rotates)", Bound(1, 20))
    context_tokens: int = param(2048, "each endpoint's context; the trace is scaled into it", TOKENS)
    max_tokens: int = param(4, "output tokens per request at most (the trace's own length when shorter)", TOKENS)
    kv_budget_tokens: int = param(16384, "each endpoint's KV budget, in tokens", COUNT)
    router_block: int = param(0, "fault: the router's block size (0: the one admission learned from the engine)",
                              Bound(0, 4096))
    kill_wave: int = param(-1, "fault: kill endpoint ep0 once this wave of the run's last shape is in flight "
                           "(-1: none)", Bound(-1, 10_000))
    seed: int = param(0, "seed for the admission prompts", SEED)


@dataclass(frozen=True)
class Summary:
    shapes: list[dict]
    gain: dict  # KV-exact against the better fullproxy shape (measure.paired)
    best_rate: float
    unread: int  # requests whose answer carried no cached_tokens
    retried: int
    kill_wave: int
    lost: int = 0  # events the inventories never got (experiment.divergence), over the pool


class GatewayRouting(Probe):
    version = "3"
    result_class = ResultClass.RAW.value  # a pool of served endpoints driven over HTTP: a raw backend control
    claims = ("shapes.kv_routing",)
    outcome_params = ("router_block", "kill_wave")  # a killed endpoint's retried requests time from their retry
    rests = {("*", "confirmed"): ((_GAIN,),),
             ("*", "partial"): ((_GAIN,),),
             ("*", "refuted"): ((Support("routing_hit_gain_ci_high", "<=", MARGIN),),)}
    figures = (Figure("hit_rate", "gateway_hit_rate"), Figure("ttft", "gateway_ttft"), Figure("inventory", "gateway_inventory"))
    Params = Params

    def rederive(self, f, claim) -> list[str]:
        """The rule's supports, then :func:`decide`'s ladder again on what the finding recorded: every request
        read; a refutation only where the gain's interval stays at or under no gain and no event was lost (a lost
        event empties KV-exact's inventory, so it routes as fullproxy does); the TTFT speed-up's lower bound,
        a timing and so no support, telling confirmed (above 1) from partial."""
        why = super().rederive(f, claim)
        verdict = f.verdict_on(claim.id)
        if why or verdict not in ("confirmed", "partial", "refuted"):
            return why
        got = {k: (f.metrics.get(k) or {}).get("value") for k in ("routing_unread_requests", "routing_events_lost",
                                                                   "routing_hit_gain_ci_low", TTFT_LOW)}
        missing = [k for k, v in got.items() if not isinstance(v, (int, float)) or not math.isfinite(v)
                   if verdict != "refuted" or k != TTFT_LOW]
        if missing:
            return [f"{', '.join(missing)} not recorded, which the rule decides {verdict} on"]
        if got["routing_unread_requests"]:
            return [f"{got['routing_unread_requests']:g} request(s) unread: the rule says inconclusive, not {verdict}"]
        if verdict == "refuted":
            if got["routing_hit_gain_ci_low"] > 0:
                return [f"the hit gain's lower bound is {got['routing_hit_gain_ci_low']:g}: the rule says a gain"]
            if got["routing_events_lost"]:
                return [f"{got['routing_events_lost']:g} event(s) lost: the rule says inconclusive, not refuted"]
            return []
        if (got[TTFT_LOW] > 1) != (verdict == "confirmed"):
            return [f"{TTFT_LOW} is {got[TTFT_LOW]:g}: the rule says {'confirmed' if got[TTFT_LOW] > 1 else 'partial'}, "
                    f"not {verdict}"]
        return []

    def run(self, ctx: ProbeContext, p: Params) -> Outcome:
        engine = pool_engine(ctx.engine)
        if cells.event_plane(ctx.engine) is None:
            return Outcome("not-applicable", f"{ctx.engine} publishes no KV event stream: there is no inventory to "
                           "route by.", notes=["KV-exact routing needs each endpoint's KV events"])
        if engine is None:
            raise NotRunnable(f"{ctx.engine} has no served twin registered: a gateway routes over served endpoints")
        avail = cells.availability(engine)
        if not avail.available:
            raise NotRunnable(f"{engine} (the pool's endpoints) cannot run here: {avail.reason}; run `workbench probe "
                              f"gateway.routing --engine {engine} --model HF_DIR` where it can")
        spec = PoolSpec(p.endpoints, engine, ctx.model, {
            "kv_budget_tokens": p.kv_budget_tokens, "context_tokens": p.context_tokens} | ctx.cell_options)
        folder = default_log_dir() / f"gateway-{time.time_ns()}"  # kept: a crash's log must outlive the probe
        plan = experiment.Plan(repeats=p.repeats, concurrency=p.concurrency, rule_block=p.router_block or None,
                               kill=("ep0", p.kill_wave) if p.kill_wave >= 0 and p.endpoints > 1 else None)
        with Pool(spec, folder) as pool:
            first = next(iter(pool.endpoints.values()))
            ctx.description, ctx.resolved = first.cell.describe(), getattr(first.cell, "model", None)
            sessions = _sessions(p, ctx.description, ctx.resolved)
            result = experiment.run(pool, sessions, plan)
            said = [f"pool: {p.endpoints} × {engine} on {ctx.model}, started and stopped by the workbench",
                    *(f"endpoint {e.name} log: {e.log_path}" for e in pool.endpoints.values())]
        return verdict(result, p, said)


def pool_engine(engine: str) -> str | None:
    """The served engine a pool of ``engine`` runs: itself where it is served, else its served twin (a pool is of
    served endpoints; the finding stays ``engine``'s, which runs the same engine)."""
    if engine in cells.SERVED:
        return engine
    return next((s for s, runs in cells.SERVED.items() if runs == engine), None)


def _sessions(p: Params, d, model) -> list[list[Request]]:
    vocab = d.extra.get("vocab_size")
    if not vocab:
        raise NotRunnable(f"{d.engine} states no vocabulary size, which rendering the trace into token ids needs")
    folder = models.hf_directory(model) if model is not None else None
    sessions, _rule = sessions_from_trace(p.trace, sessions=p.sessions, turns=p.turns, context_tokens=p.context_tokens,
                                          vocab_size=int(vocab), tokenizer=folder)
    return [[Request(r.session, r.turn, r.prompt, min(r.max_tokens, p.max_tokens)) for r in s] for s in sessions]


def summarise(result: experiment.Result, p: Params) -> Summary:
    shapes = measure.shape_rows(result.rows)
    fullproxy = [s for s in shapes if s["shape"] in FULLPROXY]
    better = max(fullproxy, key=lambda s: s["engine_hit_rate"])["shape"]
    return Summary(shapes, measure.paired(result.rows, "kv-exact", better),
                   max((s["best_hit_rate"] for s in shapes), default=0.0),
                   sum(1 for r in result.rows if r["cached_tokens"] is None),
                   sum(1 for r in result.rows if r.get("retried_from")), p.kill_wave,
                   sum(d["lost"] + d.get("unseen", 0) for d in result.divergence.values()))


def decide(s: Summary) -> Decision:
    """The ladder: reuse possible → every request read → a gain on the engine's hit rate, with TTFT → no event
    lost (a lost event empties KV-exact's inventory, so it routes as fullproxy: no refutation then) → none."""
    g = s.gain
    if s.best_rate <= 0:
        return Decision("inconclusive", "no-sharing")
    if s.unread:
        return Decision("inconclusive", "unread")
    if g["hit_gain_ci_low"] > 0:
        faster = g["ttft_speedup_ci_low"] > 1
        return Decision("confirmed" if faster else "partial", "gain" if faster else "hit-only",
                        rests_on=(_GAIN,))
    if s.lost:
        return Decision("inconclusive", "diverged")
    if g["hit_gain_ci_high"] <= MARGIN:
        return Decision("refuted", "no-gain", rests_on=(Support("routing_hit_gain_ci_high", "<=", MARGIN),))
    return Decision("inconclusive", "overlap")


def explain(d: Decision, s: Summary, rule_block: int) -> str:
    g = s.gain
    kv = next(x for x in s.shapes if x["shape"] == "kv-exact")
    other = next(x for x in s.shapes if x["shape"] == g["against"])
    said = (f"KV-exact (rule {rule_block} tokens per block) hit {kv['engine_hit_rate']:.1%} of prompt tokens on the "
            f"engine's own count against {g['against']}'s {other['engine_hit_rate']:.1%} (gain {g['hit_gain']:+.1%}, "
            f"95% CI {g['hit_gain_ci_low']:+.1%}…{g['hit_gain_ci_high']:+.1%}; best placement, workbench-computed: "
            f"{s.best_rate:.1%}); TTFT p50 {kv['ttft_p50_s'] * 1e3:.0f} ms against {other['ttft_p50_s'] * 1e3:.0f} ms "
            f"(speed-up {g['ttft_speedup']:.2f}×, CI {g['ttft_speedup_ci_low']:.2f}…{g['ttft_speedup_ci_high']:.2f}).")
    retried = f" {s.retried} request(s) of the killed endpoint were retried elsewhere, none lost." if s.retried else ""
    lead = {"no-sharing": "The replayed requests share no prefix, so no placement can reuse anything: choose a trace "
                          "whose sessions repeat their prefix. ",
            "unread": f"{s.unread} request(s) carried no cached_tokens (start the server with prompt-token details). ",
            "gain": "KV-exact routing beats fullproxy on engine-read hit rate and TTFT. ",
            "hit-only": "KV-exact routing beats fullproxy on engine-read hit rate; TTFT does not separate here. ",
            "no-gain": "KV-exact routing gains nothing over fullproxy on engine-read hit rate. ",
            "overlap": "The hit-rate gain's interval straddles no gain: more sessions or repeats. ",
            "diverged": f"{s.lost} event(s) never reached the inventories (see the divergence note), so KV-exact "
                        "routed on an inventory that was not the engine's: no gain says nothing of the rule. "}[d.case]
    return lead + said + retried


def gap_note(gaps: dict[str, dict[str, int]]) -> str:
    """The event gaps per endpoint, those its replay buffer recovered counted apart from those that cleared it."""
    def one(name: str, g: dict[str, int]) -> str:
        if not g["gaps"]:
            return f"{name} none"
        return (f"{name} {g['gaps']} ({g['recovered']} recovered from the engine's replay buffer, {g['cleared']} "
                "lost: inventory cleared and rebuilt)")

    return ("event gaps per endpoint (the engine's own sequence numbers): "
            + (", ".join(one(n, g) for n, g in gaps.items()) or "not read"))


_CAUSES = {"no-replay": "lost for good: the engine keeps no replay buffer (another consumer of its drain took them)",
           "beyond-buffer": "lost: past the engine's replay buffer",
           "regression": "where the engine's numbering went backwards (a restart)",
           "policy": "cleared by the consumer's policy"}


def divergence_note(divergence: dict[str, dict]) -> str:
    """Each endpoint's inventory against the engine, and where events it never got made it diverge."""
    def one(name: str, d: dict) -> str:
        said = (f"{name} {d['mispredicted']} of {d['requests']} predicted otherwise than the engine counted"
                if d["requests"] else f"{name} no request's cached_tokens read")
        if d["diverged"]:
            lost = [f"{n} gap(s) {_CAUSES.get(c, c)}" for c, n in d.get("causes", {}).items()]
            if d.get("unseen"):
                lost.append(f"{d['unseen']} served request(s) whose blocks never reached it (their events were "
                            "drained by another consumer, with no later event to show a gap)")
            said += f"; DIVERGED: {'; '.join(lost) or str(d['lost']) + ' gap(s) lost'}"
        return said

    return ("inventory against the engine per endpoint: "
            + ("; ".join(one(n, d) for n, d in divergence.items()) or "not read"))


def verdict(result: experiment.Result, p: Params, said: list[str] | None = None) -> Outcome:
    s = summarise(result, p)
    d = decide(s)
    kv = next(x for x in s.shapes if x["shape"] == "kv-exact")
    other = next(x for x in s.shapes if x["shape"] == s.gain["against"])
    metrics = {"routing_hit_gain": s.gain["hit_gain"], "routing_hit_gain_ci_low": s.gain["hit_gain_ci_low"],
               "routing_hit_gain_ci_high": s.gain["hit_gain_ci_high"], "routing_kv_hit_rate": kv["engine_hit_rate"],
               "routing_fullproxy_hit_rate": other["engine_hit_rate"], "routing_best_hit_rate": s.best_rate,
               "routing_ttft_speedup": s.gain["ttft_speedup"], TTFT_LOW: s.gain["ttft_speedup_ci_low"],
               "routing_retried_requests": s.retried, "routing_unread_requests": s.unread,
               "routing_events_lost": s.lost}
    rows = ([r | {"kind": "request"} for r in result.rows] + [x | {"kind": "shape"} for x in s.shapes]
            + [a | {"kind": "admission"} for a in result.admission] + [t | {"kind": "inventory"} for t in result.timeline])
    notes = [f"rule: {result.rule_block} tokens per block "
             + ("(the fault: another block size than the engine's, admitted blind)" if p.router_block else
                "(learned from the engine's events at admission)"),
             "hit rate: engine-read cached_tokens / prompt tokens; best placement and predicted hits are "
             "workbench-computed; TTFT is timed by the gateway around the stream",
             gap_note(result.gaps), divergence_note(result.divergence),
             *(said or [])]
    return Outcome(d.verdict, explain(d, s, result.rule_block), metrics, rows, notes, dict(d.claim_verdicts),
                   d.rests_on)
