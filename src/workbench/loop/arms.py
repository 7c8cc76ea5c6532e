"""The loop's arms, registered by name: one engine and one way of serving each turn.

Every arm serves a turn through the contract, ``ensure_prefix(conversation so far)`` then
``decode(max_tokens = the recorded reply's length)``, greedy, on one slot. An arm whose engine is
not here (vLLM off Linux x86_64, TensorRT-LLM without a GPU) reports why through
:func:`unavailable` and becomes a ``not-run`` finding; adding one is one :class:`ArmSpec` line.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Mapping

from .. import cells
from ..engine import Description, UnsupportedFeature
from ..registry import Registry
from .attribution import Held
from .spec import Drafter, continue_greedy


@dataclass(frozen=True)
class ArmSpec:
    name: str
    engine: str
    reuse: bool  # False: a fresh cache key every turn, so nothing is reusable (the cold baseline)
    speculation: str  # "none" | "prompt-lookup" (ours, on llama.cpp) | "engine" (the engine's own, via cell options)
    help: str
    cell_options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def verified_in_batches(self) -> bool:
        """Whether the workbench verifies this arm's tokens in batches itself (prompt lookup on the llama.cpp cell):
        the scorer then replays those batches and measures how far their numerics part from sequential decode's
        (:meth:`.verify.Scorer.numeric_gap`). An engine's own speculation batches out of the scorer's sight."""
        return self.speculation == "prompt-lookup"


VLLM_NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}
"""vLLM's own n-gram speculation; measured to run on the CPU build."""

LLAMA_SERVER_SPEC = ("--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "3", "--spec-ngram-simple-size-m", "8",
                     "--spec-ngram-simple-min-hits", "1", "--spec-draft-n-max", "8", "--spec-draft-n-min", "0")
"""llama-server's own speculation for the ``llamacpp-server-spec`` arm: among the n-gram types it offers,
the one measured to draft and pay on copy-heavy τ-bench turns (docs/served.md, "Speculation")."""

ARMS: Registry = Registry("arm", base=ArmSpec)  # the one registry's shape: "did you mean" on an unknown arm
for _arm in (
    ArmSpec("llamacpp-cold", "llamacpp", False, "none", "llama.cpp, a fresh sequence every turn (no reuse)"),
    ArmSpec("llamacpp", "llamacpp", True, "none", "llama.cpp cell with prefix reuse"),
    ArmSpec("llamacpp-spec", "llamacpp", True, "prompt-lookup",
            "llama.cpp cell with reuse and prompt-lookup (n-gram) speculative decoding, no draft model"),
    ArmSpec("vllm", "vllm", True, "none", "vLLM with prefix caching", {"enable_prefix_caching": True}),
    ArmSpec("vllm-spec", "vllm", True, "engine", "vLLM with prefix caching and its own n-gram speculation",
            {"enable_prefix_caching": True, "speculative_config": VLLM_NGRAM}),
    ArmSpec("llamacpp-server", "llamacpp-server", True, "none",
            "llama-server (llama.cpp's own server) over HTTP on loopback, its prompt cache on"),
    ArmSpec("llamacpp-server-spec", "llamacpp-server", True, "engine",
            "llama-server with its own n-gram speculation (acceptance read from its timings)",
            {"server_args": LLAMA_SERVER_SPEC}),
    ArmSpec("vllm-server", "vllm-server", True, "none", "vllm serve over HTTP on loopback with prefix caching"),
    ArmSpec("trtllm", "trtllm", True, "none", "TensorRT-LLM cell (KV reuse on), unchanged code"),
):
    ARMS.add(_arm.name, _arm)


def names() -> list[str]:
    return ARMS.declared()


def get(name: str) -> ArmSpec:
    """The arm's spec; an unknown name raises :class:`~workbench.registry.UnknownName` with close matches."""
    return ARMS.get(name)


def is_llamacpp(name: str) -> bool:
    """Whether arm ``name`` runs llama.cpp, in-process or served: the gate's "best llama.cpp arm" is chosen among these."""
    return cells.runs(get(name).engine) == "llamacpp"


def plain(name: str) -> str:
    """The arm that serves turns as ``name`` does without speculation, on the same engine (with reuse): what a
    speculation arm's decode speed-up is measured against (``llamacpp-server-spec`` → ``llamacpp-server``)."""
    engine = get(name).engine
    specs = (get(n) for n in names())
    return next(a.name for a in specs if a.engine == engine and a.reuse and a.speculation == "none")


ALL_LAYERS = -1
"""``gpu_layers`` for every layer: llama.cpp's ``n_gpu_layers`` takes a negative count as all of them
(include/llama.h), and the served cell passes it to llama-server as ``-ngl all``."""


def target_options(name: str) -> dict[str, Any]:
    """What arm ``name`` opens with on target: a llama.cpp arm, in-process or served, holds every layer on the GPU (the
    claim's "llama.cpp CUDA cell"; :func:`on_gpu` reads back whether it did); any other engine runs as it does."""
    return {"gpu_layers": ALL_LAYERS} if is_llamacpp(name) else {}


def on_gpu(d: Description | None) -> bool:
    """Whether an arm's engine said it holds every layer on a GPU: llama.cpp's load log ("offloaded N/N layers to
    GPU", the cell's ``offloaded_layers``). An engine that says nothing of it is not counted as on one."""
    done, of = (d.extra.get("offloaded_layers") if d else None) or (0, 0)
    return of > 0 and done >= of


def unregistered(name: str) -> str | None:
    """Why arm ``name`` has no cell to open in this checkout, or None when it has one."""
    engine = get(name).engine
    return None if engine in cells.engines() else (
        f"{engine} engine not installed/available: no {engine} cell is registered in this checkout")


def unavailable(name: str) -> str | None:
    """Why arm ``name`` cannot run here, or None when it can (its engine may be imported to tell)."""
    if reason := unregistered(name):
        return reason
    engine = get(name).engine
    avail = cells.availability(engine)
    return None if avail.available else avail.reason or f"{engine} is unavailable"


@dataclass(frozen=True)
class TurnResult:
    """One turn on one arm. Times are seconds since the turn started (ensure_prefix dispatched)."""

    key: str
    reused: int
    computed: int
    reuse_source: str  # "engine" (its eval counters) or the PrefixStatus.source ("num_cached_tokens", "none", …)
    tokens: list[int]
    finish: str
    ttft_s: float
    token_times_s: list[float]
    e2e_s: float
    drafted: int = 0
    accepted: int = 0
    drafted_steps: int = 0
    engine_resident: int | None = None  # tokens the engine says it holds after the turn (holes end the run)
    engine_resident_before: int | None = None  # of the slot's tokens, those the engine still held at the start
    speculation_source: str | None = None  # "cell" (our drafter's count) | "engine" (its own counters) | None


class CellArm:
    """An arm over any cell. On llama.cpp, reuse comes from the engine's own eval counters and
    prompt-lookup speculation runs on the cell's batch verification; a served llama.cpp reports its
    reuse (``timings.cache_n``) and its own speculation's drafted and accepted tokens per request."""

    def __init__(self, spec: ArmSpec, model: str, *, threads: int, context_tokens: int | None,
                 drafter: Drafter, extra_options: Mapping[str, Any] | None = None) -> None:
        self.spec, self.drafter = spec, drafter
        opts = dict(spec.cell_options) | dict(extra_options or {})
        opts |= {"threads": threads, "context_tokens": context_tokens}  # CellOptions: one name on every engine
        self.cell = cells.open_cell(spec.engine, model, **opts)
        have = self.cell.describe().context_tokens
        if context_tokens and have < context_tokens:  # e.g. a server capped at the model's own ceiling
            self.cell.close()
            raise UnsupportedFeature(f"the loop's {context_tokens}-token context", spec.engine,
                                     f"its cell holds {have} tokens; run the loop with --context {have}")
        self._held = Held(None, [])
        self._salt = "loop"
        self._warm_up()

    def _warm_up(self) -> None:
        """One batch and one single-token step under a salt of its own, before the loop: first-call
        costs stay out of turn 1, and llama.cpp's counters start counting (``llama_perf_context``
        reports ``max(1, n)`` while a count is still 0; ggml-org/llama.cpp src/llama-context.cpp),
        so every turn's deltas are exact. The loop's first turn drops this sequence (other key)."""
        self.cell.ensure_prefix(self.cell.tokenize("warm up the engine"), salt="warm-up")
        self.cell.decode(max_tokens=2)

    def describe(self) -> Description:
        return self.cell.describe()

    def held(self) -> Held:
        return self._held

    def turn(self, prompt: list[int], max_tokens: int) -> TurnResult:
        cell = self.cell
        salt = self._salt if self.spec.reuse else f"cold-{uuid.uuid4().hex}"
        key = cell.manifest.cache_key(salt)
        t0 = time.perf_counter()
        st = cell.ensure_prefix(prompt, salt=salt)
        t_dec = time.perf_counter() - t0
        drafted = accepted = steps = 0
        spec_source = None
        if self.spec.speculation == "prompt-lookup":
            dec = cell.decode(max_tokens=1)
            tokens, times, finish = list(dec.tokens), [t_dec + t for t in dec.token_times_s], dec.finish_reason
            if tokens and finish == "length" and max_tokens > 1:
                res = continue_greedy(cell, prompt, tokens[0], max_tokens, self.drafter, t0=t0)
                tokens, times, finish = res.tokens, times + res.times[1:], res.finish
                drafted, accepted, steps = res.drafted, res.accepted, res.drafted_steps
            spec_source = "cell"
        else:
            before = self._spec_counters()
            dec = cell.decode(max_tokens=max_tokens)
            tokens, times, finish = dec.tokens, [t_dec + t for t in dec.token_times_s], dec.finish_reason
            if self.spec.speculation == "engine" and before is not None and (after := self._spec_counters()):
                drafted, accepted, steps = (after[k] - before[k] for k in ("draft_tokens", "accepted_tokens", "drafts"))
                spec_source = "engine"
            elif self.spec.speculation == "engine" and "draft_n" in (dec.engine_counters or {}):  # llama-server
                drafted = int(dec.engine_counters["draft_n"])
                accepted = int(dec.engine_counters.get("draft_n_accepted", 0))
                spec_source = "engine"
        e2e = time.perf_counter() - t0
        computed, source = self._computed(st, dec)
        resident, unfed = list(prompt) + tokens, None
        if finish == "length" and tokens:
            resident, unfed = resident[:-1], tokens[-1]
        self._held = Held(key, resident, unfed)
        # read back from the engine, holes included (llama.cpp: the run of positions it holds KV for)
        engine_resident = cell.resident_tokens() if hasattr(cell, "resident_tokens") else None
        return TurnResult(key, len(prompt) - computed, computed, source, tokens, finish,
                          times[0] if times else e2e, times, e2e, drafted, accepted, steps, engine_resident,
                          (st.engine_counters or {}).get("engine_resident_before"), spec_source)

    def _spec_counters(self) -> dict | None:
        """The engine's own speculative-decoding counters, for an arm that runs the engine's speculation;
        None when the engine reports none (the arm then says it cannot show that speculation ran)."""
        if self.spec.speculation != "engine" or not hasattr(self.cell, "speculation_counters"):
            return None
        return self.cell.speculation_counters()

    @staticmethod
    def _computed(st: Any, dec: Any) -> tuple[int, str]:
        """Prompt tokens computed, from the engine's eval counters where it has them: those over
        EnsurePrefix plus the decode's evaluations beyond its own output tokens (the last prompt
        token, recomputed when its logits were stale); on llama-server, the prompt tokens the two requests
        evaluated, the last one (which the decode request evaluates again) once. Otherwise the cell's own count."""
        c, d = st.engine_counters or {}, dec.engine_counters or {}
        if {"n_p_eval", "n_eval"} <= c.keys() and {"n_p_eval", "n_eval"} <= d.keys():
            fed = len(dec.tokens) - (1 if dec.finish_reason == "length" and dec.tokens else 0)
            extra = int(d["n_p_eval"]) + int(d["n_eval"]) - fed
            return int(c["n_p_eval"]) + int(c["n_eval"]) + extra, "engine"
        if "prompt_n" in c and "prompt_n" in d:  # llama-server: tokens each request evaluated (timings.prompt_n);
            # the decode request evaluates the last prompt token again (the server always does), counted once
            return int(c["prompt_n"]) + max(int(d["prompt_n"]) - 1, 0), "engine"
        return st.computed_tokens, st.source

    def close(self) -> None:
        self.cell.close()


def open_arm(name: str, model: str, *, threads: int, context_tokens: int | None, drafter: Drafter,
             on_target: bool = False) -> CellArm:
    """Arm ``name`` on ``model``; ``on_target``: with :func:`target_options` (a llama.cpp arm on the GPU)."""
    return CellArm(get(name), model, threads=threads, context_tokens=context_tokens, drafter=drafter,
                   extra_options=target_options(name) if on_target else None)


__all__ = ["ALL_LAYERS", "ARMS", "ArmSpec", "CellArm", "TurnResult", "get", "is_llamacpp", "names", "on_gpu", "open_arm",
           "plain", "target_options", "unavailable"]
