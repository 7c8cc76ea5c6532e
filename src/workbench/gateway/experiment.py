"""The shapes on one pool: admission first, then every shape replays the same trace requests, repeats
interleaved (the shapes' order rotates each repeat, so machine noise falls on each alike)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from ..engine import WorkbenchError
from .pool import Pool
from .router import FULLPROXY, Router
from .workload import BestPlacement, Fault, Request, run_shape, waves


@dataclass(frozen=True)
class Plan:
    """What to replay and how: ``shapes`` (router policies); ``rule_block``: the router's block size (None: the
    one admission learned from the engine; another value is the wrong-block fault, admitted blind);
    ``kill``: (endpoint, wave) to kill mid-run in the last shape of the last repeat (every shape before it measured
    on the whole pool)."""

    shapes: tuple[str, ...] = (*FULLPROXY, "kv-exact")
    repeats: int = 2
    concurrency: int = 2
    rule_block: int | None = None
    kill: tuple[str, int] | None = None
    max_batch: int = 8


@dataclass
class Result:
    rows: list[dict] = field(default_factory=list)
    admission: list[dict] = field(default_factory=list)
    timeline: list[dict] = field(default_factory=list)
    gaps: dict[str, dict[str, int]] = field(default_factory=dict)  # per endpoint: gaps in the engine's own sequence
    # numbers, recovered from its replay buffer apart from cleared (Endpoint.resyncs)
    rule_block: int = 0
    divergence: dict[str, dict] = field(default_factory=dict)  # per endpoint: its inventory against the engine


def divergence(rows: Sequence[dict], gaps: Mapping[str, Mapping[str, int]]) -> dict[str, dict]:
    """Per endpoint, its inventory against the engine: the requests it served, those whose prediction (the router's
    match there, made before dispatch) differs from the engine's own ``cached_tokens``, the gaps in its event
    numbers the consumer could not recover (``lost``, by cause: ``causes``), and the served requests whose blocks
    never reached it (``unseen``, :func:`workload.unseen`: events drained by another consumer with no later event to
    show a gap). ``diverged``: some were lost or unseen, so the inventory is no longer the engine's (mispredictions
    alone do not say it: requests of one wave that share a prefix mispredict too)."""
    out = {}
    for name, g in gaps.items():
        served = [r for r in rows if r["endpoint"] == name]
        mine = [r for r in served if r["cached_tokens"] is not None]
        unseen = sum(bool(r.get("unseen")) for r in served)
        out[name] = {"requests": len(mine), "mispredicted": sum(r["predicted_tokens"] != r["cached_tokens"] for r in mine),
                     "gaps": g["gaps"], "lost": g["cleared"], "unseen": unseen,
                     "causes": {k.split(":", 1)[1]: v for k, v in g.items() if k.startswith("cleared:")},
                     "diverged": g["cleared"] > 0 or unseen > 0}
    return out


class AdmissionRefused(WorkbenchError):
    """The gate refused the rule on some endpoint before any request was routed: ``admission`` says what each endpoint
    answered (a probe turns it into its finding, never a traceback)."""

    def __init__(self, admission: list[dict], refused: list[dict]) -> None:
        self.admission, self.refused = admission, refused
        super().__init__(f"admission refused the rule on {', '.join(a['endpoint'] for a in refused)}: "
                         + "; ".join(f"{a['endpoint']}: {a['decision']} (engine block {a['engine_block']}, rule "
                                     f"{a['rule_block']})" for a in refused))


def run(pool: Pool, sessions: Sequence[Sequence[Request]], plan: Plan,
        on_wave: Callable[[str, int, int], None] | None = None) -> Result:
    """Admit the rule on every endpoint, then replay ``sessions`` under each shape ``plan.repeats`` times."""
    import httpx

    engine_block = pool.hasher().block_size
    rule_block = plan.rule_block or engine_block
    with httpx.Client(timeout=600.0) as http:
        admission = pool.admit(http, rule_block, check_events=plan.rule_block is None)
    refused = [a for a in admission if a["decision"].startswith("refused")]
    if refused:
        raise AdmissionRefused(admission, refused)
    out = Result(admission=admission, rule_block=rule_block)
    schedule = waves(sessions, plan.concurrency)
    nonce = uuid.uuid4().hex[:8]
    for k in range(plan.repeats):
        order = list(plan.shapes[k % len(plan.shapes):]) + list(plan.shapes[:k % len(plan.shapes)])
        for shape in order:
            router = Router(shape, {n: e.inventory for n, e in pool.endpoints.items()}, pool.hasher(rule_block),
                            plan.max_batch)
            for name in pool.endpoints:
                if not pool.endpoints[name].alive:
                    router.drop(name, "died earlier in the run")
            fault = Fault(*plan.kill) if plan.kill and k == plan.repeats - 1 and shape == order[-1] else None
            rows = run_shape(pool, router, schedule, salt=f"{shape}-{k}-{nonce}",
                             best=BestPlacement(pool.hasher()), fault=fault,
                             on_wave=(lambda w, s=shape, k=k: on_wave(s, k, w)) if on_wave else None)
            out.rows += [r | {"shape": shape, "repeat": k} for r in rows]
    out.timeline = [row for e in pool.endpoints.values() for row in e.timeline]
    out.gaps = {n: e.resyncs() for n, e in pool.endpoints.items()}
    out.divergence = divergence(out.rows, out.gaps)
    return out

