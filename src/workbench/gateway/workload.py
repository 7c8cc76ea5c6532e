"""The loop's traces as a gateway's traffic: sessions interleaved across the pool, a few at a time, each request
routed, sent and read back from the engine.

Each selected turn of a trace is rendered once into token ids by the loop's renderer
(:func:`workbench.loop.replay.build`: a hash-only trace's blocks as deterministic tokens; a chat trace through a
tokenizer); a session's turns go in order, and a *wave* sends the next turn of up to ``concurrency`` sessions at
once, the sessions taken in rotation. Every shape replays the same requests under a salt of its own, so no
shape reuses another's blocks on the engine. Per request the engine reports ``cached_tokens``; the gateway times
TTFT and end to end; the best placement (the longest prefix any earlier request of the run shares, in whole
reusable blocks, with unbounded KV) is workbench-computed and labelled so.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from ..events.hashing import Hasher
from .client import EndpointFailed, Served, complete
from .pool import Pool
from .router import Router


@dataclass(frozen=True)
class Request:
    session: int
    turn: int
    prompt: list[int]
    max_tokens: int


def sessions_from_trace(trace: str, *, sessions: int, turns: int, context_tokens: int, vocab_size: int,
                        tokens_per_block: int | None = None, tokenizer: str | Path | None = None
                        ) -> tuple[list[list[Request]], str]:
    """The first ``sessions`` sessions of ``trace`` (each cut to ``turns`` turns) as requests, and the rendering
    rule; a chat trace (τ-bench) is rendered with the tokenizer folder ``tokenizer`` (the model's own)."""
    from ..loop import replay, traces

    tr = traces.load(trace).subset(sessions, turns)
    tok = None
    if tr.block_tokens is None:
        if tokenizer is None:
            raise traces.TraceError(f"{trace} is a chat trace: rendering it needs the model's tokenizer folder")
        from .tokenizer import LocalChat

        tok = LocalChat(tokenizer)
    work = replay.build(tr, tok, context_tokens, vocab_size, tokens_per_block)
    out: list[list[Request]] = [[] for _ in tr.sessions]
    for t in work.turns:
        out[t.session].append(Request(t.session, t.turn, list(t.rendered.prompt), t.rendered.max_tokens))
    return [s for s in out if s], work.rule


def waves(sessions: Sequence[Sequence[Request]], concurrency: int) -> list[list[Request]]:
    """The requests in the order they are sent: each wave the next turn of up to ``concurrency`` sessions that
    have turns left, starting where the last wave stopped."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    cursor = [0] * len(sessions)
    out, start = [], 0
    while any(c < len(s) for c, s in zip(cursor, sessions)):
        order = [(start + i) % len(sessions) for i in range(len(sessions))]
        picked = [s for s in order if cursor[s] < len(sessions[s])][:concurrency]
        out.append([sessions[s][cursor[s]] for s in picked])
        for s in picked:
            cursor[s] += 1
        start = (picked[-1] + 1) % len(sessions)
    return out


class BestPlacement:
    """Workbench-computed upper bound: the reusable leading blocks of a request that any earlier request of the
    run holds (one endpoint with every prefix, unbounded KV)."""

    def __init__(self, hasher: Hasher) -> None:
        self.hasher, self.seen = hasher, set()

    def see(self, tokens: Sequence[int]) -> int:
        chain = self.hasher.chain(tokens)
        n = 0
        for h in chain[:self.hasher.reusable_blocks(len(tokens))]:
            if h not in self.seen:
                break
            n += 1
        self.seen.update(chain)
        return n * self.hasher.block_size


@dataclass
class Fault:
    """Kill endpoint ``endpoint`` once wave ``wave`` is in flight (its requests fail mid-stream)."""

    endpoint: str
    wave: int


def _send(pool: Pool, http: Any, name: str, r: Request, salt: str) -> Served | EndpointFailed:
    e = pool.endpoints[name]
    try:
        return complete(http, e.url, e.served_model, r.prompt, r.max_tokens, salt)
    except EndpointFailed as err:
        return err


def unseen(inventory: Any, prompt: Sequence[int], salt: str | None) -> bool:
    """Whether a request the engine just served left blocks its endpoint's inventory never got. Once its wave's
    events are pumped, an inventory that is the engine's holds every reusable block of a prompt the engine just
    computed (unless the engine evicted some since: the caller checks no removal came): a consumer that drained
    those events elsewhere, or lost them with no gap to show it (the last events, or all of them), leaves a hole."""
    h = inventory.hasher
    return inventory.predict(prompt, salt) < h.reusable_blocks(len(prompt)) * h.block_size


def run_shape(pool: Pool, router: Router, plan: Sequence[Sequence[Request]], *, salt: str, best: BestPlacement,
              fault: Fault | None = None, on_wave: Callable[[int], None] | None = None) -> list[dict]:
    """Send every wave of ``plan`` through ``router``; one row per request. A request whose endpoint fails is
    retried on the router's next choice once that endpoint is dropped, and its row names where it failed."""
    import httpx

    rows: list[dict] = []
    t0 = time.perf_counter()  # the shape's start: a row's done_s is when its wave completed, since then
    with httpx.Client(timeout=600.0) as http, ThreadPoolExecutor(max(len(w) for w in plan)) as ex:
        for wi, wave in enumerate(plan):
            removed = {n: e.consumer.removed_blocks for n, e in pool.endpoints.items()}
            bests = [best.see(r.prompt) for r in wave]
            choices = [router.route(r.prompt, salt) for r in wave]
            futures = [ex.submit(_send, pool, http, c.endpoint, r, salt) for c, r in zip(choices, wave)]
            if fault is not None and fault.wave == wi:
                time.sleep(0.05)
                pool.kill(fault.endpoint)
            results = [f.result() for f in futures]
            for c in choices:
                router.finish(c.endpoint)
            for r, c, got, b in zip(wave, choices, results, bests):
                rows.append(_row(pool, router, http, wi, r, c, got, b, salt, t0))
            pool.pump(0.3)
            for r, row in zip(wave, rows[-len(wave):]):
                e = pool.endpoints[row["endpoint"]]
                row["unseen"] = (e.alive and e.consumer.removed_blocks == removed[e.name]
                                 and unseen(e.inventory, r.prompt, salt))
            if on_wave:
                on_wave(wi)
    return rows


def _row(pool: Pool, router: Router, http: Any, wi: int, r: Request, c: Any, got: Served | EndpointFailed,
         best_tokens: int, salt: str, t0: float) -> dict:
    """One request's row; a failed send is retried (the dead endpoint dropped first) until one endpoint serves."""
    failed: list[str] = []
    while isinstance(got, EndpointFailed):
        if pool.died(c.endpoint):
            pool.check()  # a death the plan's fault did not cause is a crash: the experiment ends, no verdict
            pool.endpoints[c.endpoint].alive = False
            router.drop(c.endpoint, str(got))
        failed.append(c.endpoint)
        if len(failed) > len(pool.endpoints):
            raise EndpointFailed(f"request session {r.session} turn {r.turn} failed on {failed}: {got}")
        c = router.route(r.prompt, salt)
        got = _send(pool, http, c.endpoint, r, salt)
        router.finish(c.endpoint)
    return {"wave": wi, "session": r.session, "turn": r.turn, "endpoint": c.endpoint, "prompt_tokens": got.prompt_tokens,
            "cached_tokens": got.cached_tokens, "predicted_tokens": c.matched_tokens.get(c.endpoint),
            "best_tokens": best_tokens, "ttft_s": got.ttft_s, "e2e_s": got.e2e_s,
            "done_s": time.perf_counter() - t0, "retried_from": ",".join(failed) or None}
