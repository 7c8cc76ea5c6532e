"""gateway.pd — does the sequential P/D shape hold on real engines, and does the decode use the transferred KV?

Two served endpoints of the engine: a context (prefill) side and a generation (decode) side that share a KV
transfer (vLLM: ExampleConnector's store folder, this run's own). One request runs on one engine (the reference, with
its TTFT), then through the gateway's relay (:func:`workbench.gateway.pd.relay`): context leg, state relayed,
generation leg on the original prompt, streamed. The generation endpoint's own counters say how many prompt tokens
its connector supplied. The zeroed-store control zeroes the stored tensors through the connector's own files and
sends the generation leg again (a fresh salt, so no local hit): the output changes only if the decode reads them. A
request whose context leg already finished (a stop on its first token) must never reach generation: the generation
endpoint's own request counter is read around it. ``fault`` drives each verdict otherwise: the prompt rewritten on
the generation leg, the state dropped (the store entry removed) or altered (zeroed) between the legs, a relay with
no early exit.
"""

from __future__ import annotations

import contextlib
import functools
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from .. import cells
from ..engine import Cell, UnsupportedFeature
from ..cells.served import default_log_dir
from ..gateway import pd
from ..gateway.pool import started
from ..registry import UnknownName
from . import SEED, TOKENS, Bound, Figure, NotRunnable, Outcome, Probe, ProbeContext, Support, param
from .common import fresh_salt, token_ids
from ..certify.classes import ResultClass

FAULTS = ("none", "prompt_rewritten", "state_dropped", "state_altered", "no_early_exit")


def _check_fault(v: str, what: str) -> None:
    if v not in FAULTS:
        raise ValueError(f"{what} must be one of {', '.join(FAULTS)}, got {v!r}")


@dataclass(frozen=True)
class Params:
    prompt_tokens: int = param(200, "tokens of the request's prompt", TOKENS)
    max_tokens: int = param(8, "tokens the request decodes", Bound(2, 256))
    repeats: int = param(3, "timed pairs (one engine, then P/D), each on a fresh prompt: TTFT medians", Bound(1, 50))
    fault: str = param("none", f"a fault on the relay or the transfer: {' | '.join(FAULTS)}", check=_check_fault)
    seed: int = param(0, "seed for the token ids", SEED)


class NoTransfer(UnsupportedFeature):
    """The engine has no KV transfer between two servers mapped (no P/D wire): not-applicable off the subject."""


@dataclass
class Pair:
    """The two endpoints of one P/D shape, their wire and the transfer's files."""

    context: Cell
    generation: Cell
    wire: pd.Wire
    store: Any
    client: Any

    def url(self, cell: Cell) -> str:
        return str(getattr(cell, "url"))

    def counts(self, cell: Cell) -> pd.Counts:
        r = self.client.get(f"{self.url(cell)}/metrics")
        return self.wire.counts(r.text)

    def body(self, tokens: list[int], max_tokens: int, salt: str | None, **more: Any) -> dict:
        model = self.context.describe().extra.get("served_model")
        return self.wire.request(str(model), tokens, max_tokens, salt, **more)


def served_twin(engine: str) -> str:
    """The served engine that runs ``engine`` (itself when served): P/D is a shape of HTTP endpoints."""
    if engine in cells.SERVED:
        return engine
    return next((s for s, runs in cells.SERVED.items() if runs == engine), engine)


@contextlib.contextmanager
def open_pair(ctx: ProbeContext, p: Params) -> Iterator[Pair]:
    """The context and generation endpoints of ``ctx``'s engine, sharing a store folder of this run, sized for
    ``p``'s requests (the run's cell options win); NoTransfer where the engine has no P/D wire."""
    import httpx

    engine = served_twin(ctx.engine)
    try:
        wire = pd.wire_for(cells.runs(engine))
    except UnknownName:
        raise NoTransfer("P/D disaggregation", ctx.engine, "no KV transfer between two servers is mapped "
                         "(no connector or transceiver)") from None
    store = ctx.scratch("workbench-pd-")
    context = -(-(p.prompt_tokens + p.max_tokens + 1) // 32) * 32
    opts = {"context_tokens": context, "kv_budget_tokens": 4 * context} | ctx.fixed_threads(1) | ctx.cell_options
    logs = Path(opts.get("log_dir") or default_log_dir()) / f"pd-{time.time_ns()}"

    def side(role: str) -> Callable[[], Cell]:
        return functools.partial(cells.open_cell, engine, ctx.model,
                                 **(opts | wire.cell_options(role, store) | {"log_dir": str(logs / role)}))

    with started({role: side(role) for role in ("context", "generation")}, logs) as sides, \
            httpx.Client(timeout=600.0) as client:
        if ctx.description is None:
            ctx.description, ctx.resolved = sides["context"].describe(), getattr(sides["context"], "model", None)
        yield Pair(sides["context"], sides["generation"], wire, wire.store(store), client)


class PdShape(Probe):
    version = "1"
    result_class = ResultClass.RAW.value  # a pool of served endpoints driven over HTTP: a raw backend control
    claims = ("shapes.pd_lifecycle", "shapes.pd_transferred_kv")
    outcome_params = ("fault",)
    rests = {
        ("shapes.pd_lifecycle", "confirmed"): ((Support("pd_external_exact", "==", True),
                                                Support("pd_output_matches_single", "==", True),
                                                Support("pd_early_exit_generation_requests", "<=", 0)),),
        ("shapes.pd_lifecycle", "refuted"): ((Support("pd_external_exact", "==", False),),
                                             (Support("pd_output_matches_single", "==", False),),
                                             (Support("pd_early_exit_generation_requests", ">", 0),)),
        ("shapes.pd_transferred_kv", "confirmed"): ((Support("pd_external_tokens", ">", 0),
                                                     Support("pd_zeroed_output_changed", "==", True)),),
        ("shapes.pd_transferred_kv", "refuted"): ((Support("pd_external_tokens", "<=", 0),),
                                                  (Support("pd_zeroed_output_changed", "==", False),)),
    }
    figures = (Figure("ttft_split", "pd_ttft_split"), Figure("cached_tokens", "pd_cached_tokens"))
    Params = Params

    def run(self, ctx: ProbeContext, p: Params) -> Outcome:
        try:
            with open_pair(ctx, p) as pair:
                return measure(pair, p, np.random.default_rng(p.seed), ctx.description)
        except NoTransfer as e:  # any other refusal (a model format, a counter not mapped) is the run's not-run
            if cells.runs(served_twin(ctx.engine)) == self.claim.subject:
                raise NotRunnable(str(e)) from None
            return Outcome("not-applicable", f"No P/D transfer on {ctx.engine}: {e}.", notes=[str(e)])


def measure(pair: Pair, p: Params, rng: np.random.Generator, d: Any) -> Outcome:
    """The experiment on an open pair (tests share one pair across faults): each call draws its own prompt, and
    no stored entry of it is left from before."""
    tokens, block = token_ids(rng, p.prompt_tokens, d), int(d.block_tokens)
    entry = pair.store.entry(tokens, block) if pair.store is not None else None
    single = _single(pair, tokens, p.max_tokens, entry)
    before = pair.counts(pair.generation)
    ex = pd.relay(pair.client, pair.wire, pair.body(tokens, p.max_tokens, fresh_salt("pd")),
                  context_url=pair.url(pair.context), generation_url=pair.url(pair.generation),
                  tamper=pd.rewrite_prompt if p.fault == "prompt_rewritten" else None,
                  between=lambda ex: _fault(pair, entry, p.fault))
    after = pair.counts(pair.generation)
    zeroed = _zeroed_control(pair, entry, tokens, p.max_tokens)
    exits = _early_exit(pair, rng, d, p)
    rows = [_row("single", single, single), _row("P/D", ex, single), _row("zeroed store", zeroed, single),
            {"run": "early exit", "finish_reason": exits["finish_reason"], "early_exit": exits["early_exit"],
             "generation_requests": exits["generation_requests"]}]
    external = after.external_tokens - before.external_tokens
    m = {"pd_external_tokens": external, "pd_expected_external_tokens": pair.wire.transferable(len(tokens), block),
         "pd_decode_cached_tokens": _cached(ex.usage), "pd_output_matches_single": ex.token_ids == single.token_ids,
         "pd_zeroed_output_changed": zeroed.token_ids != single.token_ids if zeroed else None,
         "pd_early_exit_generation_requests": exits["generation_requests"], "pd_early_exits": exits["counted"],
         "pd_ttft_s": ex.ttft_s, "pd_context_s": ex.context_s, "single_ttft_s": single.ttft_s}
    m["pd_external_exact"] = external == m["pd_expected_external_tokens"]
    rows += _repeats(pair, rng, d, p, m)
    notes = [f"fault: {p.fault}", f"relayed state (the context answer's, untouched): {ex.state!r}",
             f"generation leg prompt kept: {ex.generation_body.get('prompt') == tokens if ex.generation_body else None}",
             f"zeroed-store control: {'ran' if zeroed else 'not run (no stored entry of the prompt to zero)'}"]
    return decide(m, rows, notes)


def _repeats(pair: Pair, rng: np.random.Generator, d: Any, p: Params, m: dict) -> list[dict]:
    """``p.repeats - 1`` more timed pairs on fresh prompts (no fault): the TTFT metrics become medians."""
    timed = {"single_ttft_s": [m["single_ttft_s"]], "pd_ttft_s": [m["pd_ttft_s"]], "pd_context_s": [m["pd_context_s"]]}
    rows = []
    for i in range(1, p.repeats):
        tokens = token_ids(rng, p.prompt_tokens, d)
        entry = pair.store.entry(tokens, int(d.block_tokens)) if pair.store is not None else None
        single = _single(pair, tokens, p.max_tokens, entry)
        ex = pd.relay(pair.client, pair.wire, pair.body(tokens, p.max_tokens, fresh_salt("pd")),
                      context_url=pair.url(pair.context), generation_url=pair.url(pair.generation))
        rows += [_row("single", single, single) | {"repeat": i}, _row("P/D", ex, single) | {"repeat": i}]
        timed["single_ttft_s"].append(single.ttft_s)
        timed["pd_ttft_s"].append(ex.ttft_s)
        timed["pd_context_s"].append(ex.context_s)
    m |= {k: float(np.median([v for v in vs if v is not None])) for k, vs in timed.items()}
    return rows


def _fault(pair: Pair, entry: Any, fault: str) -> None:
    """A fault on the state between the legs, through the transfer's own files: the entry the context leg wrote
    removed (``state_dropped``) or zeroed (``state_altered``)."""
    if entry is None or not entry.exists():
        return
    if fault == "state_dropped":
        pair.store.remove(entry)
    elif fault == "state_altered":
        pair.store.zero(entry)


def _single(pair: Pair, tokens: list[int], max_tokens: int, entry: Any) -> pd.Exchange:
    """The reference on the context endpoint (its connector only stores: no entry of the prompt exists before it);
    the entry it stored is removed after, so the context leg writes its own."""
    if entry is not None:
        pair.store.remove(entry)
    out = pd.single(pair.client, pair.url(pair.context), pair.body(tokens, max_tokens, fresh_salt("single")))
    if entry is not None:
        pair.store.remove(entry)
    return out


def _zeroed_control(pair: Pair, entry: Any, tokens: list[int], max_tokens: int) -> pd.Exchange | None:
    """The stored tensors zeroed, the generation leg sent again under a fresh salt; None where no stored entry of
    the prompt exists (no file store, or a fault removed it)."""
    if entry is None or not entry.exists():
        return None
    pair.store.zero(entry)
    body = pair.wire.generation_body(pair.body(tokens, max_tokens, fresh_salt("zeroed")), None)
    return pd.single(pair.client, pair.url(pair.generation), body)


def _early_exit(pair: Pair, rng: np.random.Generator, d: Any, p: Params) -> dict:
    """A request whose first token is a stop token (learned from one token on the context endpoint): its context
    leg finishes, so the relay must answer from it; the generation endpoint's own counter says whether it ran."""
    tokens = token_ids(rng, p.prompt_tokens, d)
    first = pd.single(pair.client, pair.url(pair.context), pair.body(tokens, 1, fresh_salt("probe")))
    counters = pd.Counters()
    before = pair.counts(pair.generation)
    ex = pd.relay(pair.client, pair.wire, pair.body(tokens, p.max_tokens, fresh_salt("exit"),
                                                    stop_token_ids=first.token_ids[:1]),
                  context_url=pair.url(pair.context), generation_url=pair.url(pair.generation), counters=counters,
                  early_exit=p.fault != "no_early_exit")
    after = pair.counts(pair.generation)
    return {"finish_reason": ex.context_doc.get("choices", [{}])[0].get("finish_reason"), "early_exit": ex.early_exit,
            "generation_requests": after.requests - before.requests, "counted": counters.early_exits}


def _cached(usage: dict) -> Any:
    return (usage.get("prompt_tokens_details") or {}).get("cached_tokens")


def _row(run: str, ex: pd.Exchange | None, single: pd.Exchange) -> dict:
    if ex is None:
        return {"run": run}
    return {"run": run, "tokens": ex.token_ids, "equals_single": ex.token_ids == single.token_ids,
            "ttft_s": ex.ttft_s, "context_s": ex.context_s or None, "e2e_s": ex.e2e_s,
            "cached_tokens": _cached(ex.usage), "prompt_tokens": ex.usage.get("prompt_tokens")}


def decide(m: dict, rows: list[dict], notes: list[str]) -> Outcome:
    """summarise → decide → explain, one claim row each; the probe's verdict is the lifecycle's."""
    life, life_rests, life_why = _lifecycle(m)
    kv, kv_rests, kv_why = _transferred(m)
    return Outcome(life, f"P/D lifecycle: {life} ({life_why}). Transferred KV: {kv} ({kv_why}).", m, rows, notes,
                   claim_verdicts={"shapes.pd_lifecycle": life, "shapes.pd_transferred_kv": kv},
                   rests_on=life_rests, claim_rests_on={"shapes.pd_transferred_kv": kv_rests})


def _lifecycle(m: dict) -> tuple[str, tuple[Support, ...], str]:
    if m["pd_early_exit_generation_requests"] > 0:
        return ("refuted", (Support("pd_early_exit_generation_requests", ">", 0),),
                f"a context result that had finished still reached generation "
                f"({m['pd_early_exit_generation_requests']:g} request(s) there)")
    if not m["pd_external_exact"]:
        return ("refuted", (Support("pd_external_exact", "==", False),),
                f"the generation endpoint took {m['pd_external_tokens']:g} tokens from the transfer, not the original "
                f"prompt's {m['pd_expected_external_tokens']:g}: its prompt or the state was not the context leg's")
    if not m["pd_output_matches_single"]:
        return ("refuted", (Support("pd_output_matches_single", "==", False),),
                "the P/D answer differs from one engine's: the state did not arrive untouched")
    return ("confirmed", (Support("pd_external_exact", "==", True), Support("pd_output_matches_single", "==", True),
                          Support("pd_early_exit_generation_requests", "<=", 0)),
            f"the generation endpoint took exactly the prompt's {m['pd_external_tokens']:g} transferable tokens, "
            "answered as one engine does, and a finished context result never reached it")


def _transferred(m: dict) -> tuple[str, tuple[Support, ...], str]:
    if m["pd_external_tokens"] <= 0:
        return ("refuted", (Support("pd_external_tokens", "<=", 0),),
                "the generation endpoint took no token from the transfer: it recomputed the prompt")
    if m["pd_zeroed_output_changed"] is None:
        return "inconclusive", (), "the transfer has no files to zero here, so no control ran"
    if not m["pd_zeroed_output_changed"]:
        return ("refuted", (Support("pd_zeroed_output_changed", "==", False),),
                "zeroing the stored KV left the answer as one engine's: the decode did not read it")
    return ("confirmed", (Support("pd_external_tokens", ">", 0), Support("pd_zeroed_output_changed", "==", True)),
            f"it loaded {m['pd_external_tokens']:g} tokens, and zeroing them changed its answer")
