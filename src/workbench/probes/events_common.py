"""What the event-plane probes share: a cell whose stream others can subscribe to, the hasher its description
implies, an evicting workload, and the not-applicable answer for an engine with no event stream."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Hashable

import numpy as np

from . import NotRunnable, Outcome, ProbeContext, absence
from .. import cells
from ..engine import Cell, Description
from ..events import sources
from ..events.hashing import Hasher
from .common import token_ids


def open_stream_cell(ctx: ProbeContext, *, seed: str, buffer_steps: int, budget_tokens: int,
                     context_tokens: int, **more: object) -> tuple[Cell | None, Outcome | None]:
    """A cell whose stream several consumers can join (vLLM: a publisher bound on ``ipc://`` with a replay buffer
    of ``buffer_steps`` and a fixed ``PYTHONHASHSEED``). An engine that takes none of these options is opened as
    it is: its own ``kv_events`` drain is the stream (TensorRT-LLM 1.2: one destructive queue). Without a
    ``kv_events`` observer: the not-applicable outcome, with the engine's own description as the evidence.
    ``more``: options every choice carries (``adapters``), so an engine that takes none of them refuses."""
    folder = ctx.scratch("workbench-events-")
    options = dict(kv_budget_tokens=budget_tokens, context_tokens=context_tokens, hash_seed=seed,
                   kv_events_config={"endpoint": f"ipc://{folder}/pub", "replay_endpoint": f"ipc://{folder}/replay",
                                     "buffer_steps": buffer_steps}, **more)
    cell = open_with(ctx, options, dict(kv_budget_tokens=budget_tokens, context_tokens=context_tokens, **more), more)
    d = cell.describe()
    if "kv_events" not in d.observers:
        cell.close()
        return None, absent(d)
    return cell, None


def on_stream(ctx: ProbeContext, p: Any, measure: Callable[[ProbeContext, Any, Cell, np.random.Generator], Outcome],
              *, buffer_steps: int = 10_000, budget_tokens: int = 32 * 32, context_tokens: int = 128) -> Outcome:
    """The event probes' one opening: a stream cell under the probe's ``hash_seed`` (:func:`open_stream_cell`), handed
    to ``measure`` (which closes it) with a generator seeded by the probe's ``seed``; where the engine has no stream,
    its not-applicable outcome, and nothing is measured."""
    cell, none = open_stream_cell(ctx, seed=p.hash_seed, buffer_steps=buffer_steps, budget_tokens=budget_tokens,
                                  context_tokens=context_tokens)
    if none:
        return none
    return measure(ctx, p, cell, np.random.default_rng(p.seed))


def open_with(ctx: ProbeContext, *choices: dict) -> Cell:
    """A cell opened with the first set of options the engine's options class has (its registered facts); the
    last choice otherwise, whose refusal is raised."""
    options = next((c for c in choices[:-1] if cells.takes(ctx.engine, c)), choices[-1])
    return ctx.open(**options)


def absent(d: Description) -> Outcome:
    """The engine has no KV event stream (its description declares the mechanism absent, with the evidence): the
    event plane's claims cannot arise on it. An engine that has one, but whose cell was opened with it off
    (TensorRT-LLM with ``event_buffer_max_size=0`` or no block reuse, vLLM with ``kv_events=False``), is not a
    not-applicable: that is this run's configuration, so it is not run (NotRunnable)."""
    why = d.absent.get("kv_events")
    if why is None:
        raise NotRunnable(f"{d.engine} {d.engine_version} has a KV event stream, but this cell announces no kv_events "
                          f"observer (observers: {', '.join(d.observers) or 'none'}): its events are off in the "
                          "cell's options; turn them on (TensorRT-LLM: event_buffer_max_size > 0 and "
                          "enable_block_reuse; vLLM: kv_events)")
    return absence(f"{d.engine} {d.engine_version} has no KV event stream ({why}; observers: "
                   f"{', '.join(d.observers) or 'none'}): reuse there is per-slot prefix matching, with nothing for "
                   "a gateway to consume.", why, rows=[{"engine": d.engine, "observers": ", ".join(d.observers)}],
                   notes=[f"observers announced: {list(d.observers)}", why])


def hasher_for(d: Description, *, seed: str | None, block_size: int | None = None) -> Hasher:
    """The client-side hasher for the engine's declared hash scheme (its description), at ``block_size`` (the
    rule's; default the engine's)."""
    plane = cells.event_plane(d.engine)
    try:
        if plane is None:
            raise ValueError(f"{d.engine} registers no event plane")
        return plane.hasher(d, seed, block_size or d.block_tokens)
    except ValueError as e:
        raise NotRunnable(f"{d.engine} declares no block-hash scheme this workbench reproduces ({e})") from None


def new_consumer(cell: Cell, *, joined: bool = False) -> sources.EventSource:
    """An independent subscriber where the stream fans out, else the cell's own drain (each call another
    consumer of the one queue). ``joined``: a consumer beside the first, which must be the engine's to hand out:
    where the engine publishes a stream (``kv_events_endpoint``) that only the cell's own subscriber receives,
    sharing that subscriber would split the workbench's bookkeeping, not the engine's stream (NotRunnable)."""
    d = cell.describe()
    plane = cells.event_plane(d.engine)
    source = plane.subscribe(d) if plane is not None else None
    if source is not None:
        return source
    if joined and d.extra.get("kv_events_endpoint"):
        raise NotRunnable(f"{d.engine} publishes its KV events to {d.extra['kv_events_endpoint']}, a socket only the "
                          "cell's own subscriber receives: a second consumer cannot join it, and sharing the cell's "
                          "subscriber would measure the workbench, not the engine (open the stream on ipc://)")
    return sources.CellSource(cell)


def kept_out(cell: Cell) -> frozenset[int]:
    """Event ids the cell itself drained before any consumer could (TensorRT-LLM in-process: its open request's
    events, ``describe().extra["open_request"]``): numbers the stream skips that no engine lost."""
    opened = cell.describe().extra.get("open_request") or {}
    return frozenset(int(i) for i in opened.get("kv_event_ids_kept_out") or ())


def lora_key(cell: Cell) -> Hashable:
    """How the engine keys the blocks of a request carrying the cell's loaded adapter (its event plane's
    ``lora_key``: vLLM by the adapter's name and path, TensorRT-LLM by its LoRA task id)."""
    d = cell.describe()
    return cells.event_plane(d.engine).lora_key(d)


def salt_of(cell: Cell, salt: str | None) -> str | None:
    """The cache salt the engine receives for a request under ``salt`` (the cell's manifest-keyed salt)."""
    manifest = getattr(cell, "manifest", None)
    return manifest.cache_key(salt) if manifest is not None else salt


@dataclass(frozen=True)
class Workload:
    prompts: list[list[int]]
    prefixes: list[int]  # which shared prefix each prompt starts with


def evicting_workload(rng: np.random.Generator, d: Description, *, prefixes: int, prefix_tokens: int,
                      suffix_tokens: int, requests: int) -> Workload:
    """Requests that share a few prefixes, drawn Zipf-like, each with a fresh suffix: more distinct blocks than
    the pool holds, so hits, partial hits and evictions all occur."""
    shared = [token_ids(rng, prefix_tokens, d) for _ in range(prefixes)]
    weights = 1.0 / np.arange(1, prefixes + 1)
    which = rng.choice(prefixes, size=requests, p=weights / weights.sum()).tolist()
    return Workload([shared[i] + token_ids(rng, suffix_tokens, d) for i in which], which)
