"""One contract :class:`~workbench.transport.contract.Session` over one slot of an engine cell: the adapter plumbing
every engine shares, as modeld keeps it once in ``modeld/internal/sessionkit`` beside each backend's own adapter.

A wing (``cells/<engine>/session.py``) subclasses :class:`CellSession` with what is its engine's: how the model's own
chat template renders and its tokenizer tokenizes, the residency capabilities it really has, whether it defers
prefill (a per-backend opt-in, backend-parity I6), and what its engine itself says it computed and reused
(:meth:`CellSession.engine_tokens`, :meth:`CellSession.engine_work`). Everything else is here and follows modeld's
llama cell (``modeld/llama/llamasession/llama.go``, contenox/runtime 7d0a257f):

* **EnsurePrefix** (lines 301-420): images refused; messages rebuilt from the manifest's stable segments
  (:func:`~workbench.transport.manifest.stable_messages`), rendered by the model's template, tokenized; a prefix
  longer than the session's ``NumCtx`` is ``ContextOverflowError("prefix", 0, n, NumCtx)`` **before** the engine
  sees it; under a compatible runtime identity the engine reuses the longest common token prefix (the cell's
  ``ensure_prefix`` under the derived ``cache_salt``), otherwise the resident KV is dropped.
* **PrefillSuffix** (lines 421ff): a manifest mismatch or a changed stable hash is ``ErrManifestMismatch``; the whole
  conversation is rendered with the generation cue, tokenized and reconciled against the resident stable region by
  token LCP; the suffix is gated against ``NumCtx`` before dispatch, then prefilled or (opt-in) deferred to the next
  decode, the ``PhysicalPrefill*``/``DeferredPrefill*`` counters saying which.
* **Decode**: a stream of ``StreamChunk``; unset sampling knobs take modeld's llama defaults (temperature 0.8, top-p
  0.9, top-k 40, 256 tokens); ``StructuredOutput`` protocol ``json_schema`` constrains decoding through the engine.
* **Fatal discipline** (``lifecycle.go``, backend-parity I1): an engine failure that is no contract error poisons the
  session: its cause is kept as ``FatalError``, the slot is released, and every later call answers
  ``ErrSessionFatal``.

Each operation is recorded as a stage (:class:`Stage`: wall time, tokens, the engine's own counters), the per-session
log the daemon serves beside the contract (``docs/transport.md``: the stage times a certification reads).
"""

from __future__ import annotations

import json
import queue
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, ClassVar, Iterator, Sequence

from .contract import (Config, ContextReport, DecodeConfig, ModelInfo, PrefixInput, PrefixStatus, ResidencyCapabilities,
                       ResidencyReport, SessionSnapshot, StreamChunk, SuffixInput, SuffixStatus)
from .errors import (ContextOverflowError, ErrCanceled, ErrManifestMismatch, ErrModelLoadFailed, ErrSessionClosed,
                     ErrSessionFatal, ErrUnsupportedFeature, TransportError)
from .manifest import (AdapterSpec, ChatMessage, ContextManifest, adapter_content_digest, cache_salt, common_prefix_len, hash_token_ids,
                       stable_messages, volatile_messages)

DEFAULT_MAX_TOKENS = 256  # llamasession Decode: maxTokens <= 0 → 256
DEFAULT_SAMPLING = {"temperature": 0.8, "top_p": 0.9, "top_k": 40}  # llamacppshim.SamplingParams in Decode


@dataclass
class Stage:
    """One operation of a session, as the daemon saw it: the stage's name (``EnsurePrefix``, ``PrefillSuffix``,
    ``Decode``, ``Restore``), its wall time, the tokens it handled, and what the engine itself reported for it
    (``engine_computed_tokens``/``engine_reused_tokens``: None where the engine says nothing)."""

    stage: str
    started: float
    wall_s: float
    tokens: int = 0
    engine_computed_tokens: int | None = None
    engine_reused_tokens: int | None = None
    engine_counters: dict = field(default_factory=dict)
    ttft_s: float | None = None  # Decode: seconds to its first streamed chunk
    output_tokens: int | None = None  # Decode: tokens the engine generated
    error: str = ""

    def doc(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v not in (None, "", {})}


class _Cancelled(Exception):
    """Raised from the token callback when the stream's consumer went away."""


class CellSession:
    """A contract session on slot ``slot`` of ``cell`` (an :class:`workbench.engine.Cell`). Wings subclass it."""

    backend: ClassVar[str] = ""  # the Health/Status backend word this adapter answers ("llama" for modeld's runtime)
    defers_by_default: ClassVar[bool] = False  # the backend's deferred-prefill opt-in default (I6)
    can_defer: ClassVar[bool] = False  # whether this backend has a deferred-prefill mode at all

    def __init__(self, cell: Any, slot: int, *, config: Config, adapters: Sequence[AdapterSpec] = (),
                 num_ctx: int, defer_prefill: bool = False, on_release: Callable[[int], None] | None = None) -> None:
        if defer_prefill and not self.can_defer:
            raise ErrUnsupportedFeature(f"{type(self).__name__} has no deferred-prefill mode")
        self.cell, self.slot, self.config = cell, slot, config
        self.adapters = tuple(adapters)
        self.num_ctx = num_ctx
        self.defer_prefill = defer_prefill
        self.add_bos = not config.disable_bos
        self._on_release = on_release
        self._lock = threading.RLock()
        self.closed = False
        self.generation = 0  # the slot generation that opened it (the daemon's; server.go puts it in the handle)
        self.fatal_error = ""
        self.resident: list[int] = []
        self.prefix_len = 0
        self.stable_text = self.prefix_text = self.tools = ""
        self.stable_msgs: list[ChatMessage] = []
        self.manifest = ContextManifest()
        self.key: str | None = None  # the engine-level cache_salt its requests carry (derived, cache_salt)
        self.counters = {"physical_prefill_calls": 0, "physical_prefill_tokens": 0, "deferred_prefill_calls": 0,
                         "deferred_prefill_tokens": 0, "decode_calls": 0, "decode_prompt_tokens": 0}
        self._deferred_pending = 0
        self.stages: list[Stage] = []

    # ------------------------------------------------------------------ what a wing answers about its engine

    @classmethod
    def capabilities_of(cls, cell: Any) -> ResidencyCapabilities:
        """The residency capabilities this backend really has on ``cell`` (backend-parity I2)."""
        raise NotImplementedError

    @classmethod
    def declared(cls, cell: Any = None) -> dict:
        """What the adapter declares of itself, for the conformance probe to hold it to (never an engine's name):
        its capabilities, whether it can defer prefill and defers by default, whether it embeds."""
        caps = cls.capabilities_of(cell) if cell is not None else None
        return {"backend": cls.backend, "can_defer": cls.can_defer, "defers_by_default": cls.defers_by_default,
                "embeds": cls.embeds, "engine_salt": cls.engine_salt,
                "capabilities": asdict(caps) if caps is not None else None}

    embeds: ClassVar[bool] = False  # Embed answers a vector (modeld's llama cell: embed.go) or ErrUnsupportedFeature
    engine_salt: ClassVar[bool] = False  # the engine itself keys reuse on the request's cache_salt

    @classmethod
    def cell_options(cls, options: dict, config: Config, *, slots: int, adapters: Sequence[str],
                     policy: Any = None) -> dict:
        """The engine cell's open options for a slot loaded with ``config`` and ``adapters`` (paths), under the
        daemon's ``capacity.Policy``."""
        out = dict(options) | {"slots": slots}
        if adapters:
            out["adapters"] = tuple(adapters)
        if config.num_ctx > 0:
            out["context_tokens"] = config.num_ctx
        if config.num_threads > 0:
            out["threads"] = config.num_threads
        return out

    @classmethod
    def adapter_digest(cls, path: str) -> str:
        """The content digest of an adapter as this engine loads it (a file or a PEFT directory)."""
        return adapter_content_digest(path)

    @classmethod
    def model_max_context(cls, cell: Any) -> int:
        """The model's trained ceiling, by its own metadata (``ModelInfo.model_max_context``)."""
        from ..models import context_ceiling

        return int(context_ceiling(cell.model) or 0)

    @classmethod
    def model_bytes(cls, cell: Any) -> int:
        from pathlib import Path

        p = Path(cell.model.path)
        return sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.is_dir() else p.stat().st_size

    @classmethod
    def kv_bytes_per_token(cls, cell: Any) -> tuple[int, str]:
        """KV bytes per token and where they were read: the engine's own statement (the ``capacity`` observer's
        ``kv_memory``) where it gives one, else the model's geometry."""
        d = cell.describe()
        if "capacity" in d.observers:
            try:
                return int(round(cell.kv_memory().bytes_per_token)), "engine"
            except Exception:  # noqa: BLE001 - an engine that cannot say falls back to the geometry, labelled
                pass
        return d.geometry.bytes_per_token, "geometry"

    @classmethod
    def model_info(cls, cell: Any, config: Config, policy: Any, kv: tuple[int, str] | None = None) -> ModelInfo:
        """``Describe``: the model's ceiling from its own metadata, the dense window this daemon serves (the cell's
        context, a session's ``NumCtx`` no more), the engine's KV bytes per token (``kv``: as read at load) and the
        policy's byte budget."""
        d = cell.describe()
        ceiling = cls.model_max_context(cell)
        served = d.context_tokens
        requested = config.num_ctx
        effective = min(requested, served) if requested > 0 else served
        per_token, where = kv or cls.kv_bytes_per_token(cell)
        reason = ""
        if requested > served:
            reason = f"requested {requested} tokens; the engine was opened with {served} (its KV pool and context)"
        return ModelInfo(model_max_context=ceiling, effective_context=effective, memory_context_tokens=d.kv_capacity_tokens,
                         hot_context_tokens=effective, planner_effective_context=effective,
                         kv_bytes_per_token=per_token, weights_bytes=cls.model_bytes(cell),
                         min_free_bytes=policy.min_free_bytes, host_cold_budget_bytes=policy.host_cold_budget_bytes,
                         user_limit_bytes=policy.max_resident_bytes, required_bytes=effective * per_token,
                         clamped=requested > served, reason=reason, device_kind="cpu" if not d.extra.get("gpu") else
                         "gpu", runtime_name=f"{d.engine} {d.engine_version}",
                         runtime_system_info=f"kv bytes per token read from the {where}")

    @classmethod
    def work_of(cls, cell: Any) -> dict | None:
        """Cumulative counters the engine itself keeps of the work it did (None: none a cell can read), read through
        the engine's own reporting, never from what this adapter answered. Where the engine has them, two keys mean
        the same on every engine: ``prompt_tokens_computed`` (prompt tokens it computed) and ``prompt_tokens_cached``
        (prompt tokens it served from its cache); a call that never reached the engine moves none of them."""
        return None

    @classmethod
    def kv_bytes_read(cls, cell: Any, free_slot: int | None) -> int | None:
        """The engine's KV bytes per token read again now, through another path than :meth:`kv_bytes_per_token`
        (``Describe``'s), so that one can be held to the other; ``free_slot``: a cell slot no session holds, for an
        engine that must hold KV to say (None where none is free). None where the engine states no such number."""
        return None

    @classmethod
    def write_adapter(cls, cell: Any, folder: str, seed: int) -> str:
        """A LoRA adapter this engine loads, written for ``cell``'s model into ``folder``; its path."""
        raise NotImplementedError(f"{cls.__name__} writes no adapter for its engine")

    @classmethod
    def inject_fault(cls, cell: Any, sess: "CellSession") -> str:
        """Break the engine under ``sess`` through the engine's own API; returns what was done."""
        raise ErrUnsupportedFeature(f"{cls.__name__} has no fault lever")

    @classmethod
    def heal_fault(cls, cell: Any) -> str:
        """Undo :meth:`inject_fault` through the engine's own API, so the engine serves again (the fault was
        transient): a session poisoned by it must still never reach the engine, and now a call that did would move
        the engine's work counters (backend-parity I1's reading). Returns what was done."""
        raise ErrUnsupportedFeature(f"{cls.__name__} has no fault lever")

    # ------------------------------------------------------------------ what a wing answers per session

    def capabilities(self) -> ResidencyCapabilities:
        return self.capabilities_of(self.cell)

    def engine_work(self) -> dict | None:
        return self.work_of(self.cell)

    def render(self, messages: Sequence[ChatMessage], tools: str, *, add_generation_prompt: bool,
               **template: Any) -> str:
        """``messages`` through the model's own chat template; ``template``: more of its variables (a suffix's
        ``enable_thinking`` and ``reasoning_effort``, as modeld's llama cell hands them to llama.cpp's common chat
        layer: ``llamasession/llama.go`` renderTemplateForDecode; a template without the variable ignores it)."""
        raise NotImplementedError

    def tokenize(self, text: str, *, add_bos: bool) -> list[int]:
        raise NotImplementedError

    def detokenize(self, tokens: Sequence[int]) -> str:
        raise NotImplementedError

    def engine_tokens(self, status: Any) -> tuple[int | None, int | None]:
        """(computed, reused) prompt tokens of one engine-layer result as the engine itself counted them."""
        return None, None

    def engine_resident(self) -> int | None:
        """Tokens of this session the engine itself holds KV for, where it can say (None otherwise)."""
        return None

    def release(self) -> None:
        """Free the slot's KV in the engine (the session closed)."""

    def slot_tokens(self) -> list[int]:
        """The token ids the engine layer holds for this session's slot (after a stream that ended early)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ plumbing

    def _closed_err(self) -> TransportError:
        return ErrSessionFatal(self.fatal_error) if self.fatal_error else ErrSessionClosed()

    def _check(self) -> None:
        if self.closed:
            raise self._closed_err()

    def mark_fatal(self, err: BaseException) -> ErrSessionFatal:
        """``markFatal``: record the first cause, release the engine slot, answer ErrSessionFatal from now on."""
        if not self.fatal_error:
            self.fatal_error = f"{type(err).__name__}: {err}"
        self._close()
        return err if isinstance(err, ErrSessionFatal) else ErrSessionFatal(self.fatal_error)

    def _engine(self, stage: str, call: Callable[[], Any], *, overflow: tuple[int, int] | None = None) -> Any:
        """Run one engine call: the engine layer's refusals become the contract's errors, anything else is fatal
        (and recorded as a failed stage: the engine's own error)."""
        from ..engine import ContextOverflow, ManifestMismatch, UnsupportedFeature

        t0 = time.perf_counter()
        try:
            return call()
        except TransportError:
            raise
        except ContextOverflow as e:
            resident, additional = overflow or (0, e.requested)
            raise ContextOverflowError(stage, resident, additional, e.limit) from None
        except UnsupportedFeature as e:
            raise ErrUnsupportedFeature(str(e)) from None
        except ManifestMismatch as e:
            raise ErrManifestMismatch(str(e)) from None
        except _Cancelled:
            raise
        except ValueError as e:  # the engine layer refused an input (a grammar it cannot build): not a fault
            raise ErrUnsupportedFeature(str(e)) from None
        except Exception as e:  # noqa: BLE001 - the engine failed: the session is poisoned (I1)
            self.stages.append(Stage(f"{stage} failed", t0, time.perf_counter() - t0,
                                     error=f"{type(e).__name__}: {e}"))
            raise self.mark_fatal(e) from None

    def _record(self, stage: str, t0: float, tokens: int, result: Any = None, **kw: Any) -> Stage:
        computed, reused = self.engine_tokens(result) if result is not None else (None, None)
        counters = dict(getattr(result, "engine_counters", {}) or {})
        s = Stage(stage, t0, time.perf_counter() - t0, tokens, computed, reused, counters, **kw)
        self.stages.append(s)
        return s

    def _render_tokens(self, msgs: Sequence[ChatMessage], tools: str, raw: str, *, cue: bool,
                       **template: Any) -> tuple[str, list[int]]:
        text = self.render(msgs, tools, add_generation_prompt=cue, **template) if msgs else raw
        return text, self.tokenize(text, add_bos=self.add_bos)

    # ------------------------------------------------------------------ the contract

    def ensure_prefix(self, prefix: PrefixInput) -> PrefixStatus:
        with self._lock:
            self._check()
            if prefix.images:
                raise ErrUnsupportedFeature("images in the stable prefix are not supported; attach images to the "
                                            "volatile suffix")
            msgs = stable_messages(prefix.text, prefix.manifest)
            text, toks = self._render_tokens(msgs, prefix.tools, prefix.text, cue=False)
            if not toks:
                raise ErrUnsupportedFeature("an empty stable prefix")
            if len(toks) > self.num_ctx:  # gated before dispatch: the engine never sees it
                raise ContextOverflowError("prefix", 0, len(toks), self.num_ctx)
            key = cache_salt(prefix.manifest, self.adapters)
            old = len(self.resident)
            t0 = time.perf_counter()
            st = self._engine("prefix", lambda: self.cell.ensure_prefix(toks, slot=self.slot, salt=key))
            self._record("EnsurePrefix", t0, len(toks), st)
            if st.computed_tokens > 0:
                self.counters["physical_prefill_calls"] += 1
                self.counters["physical_prefill_tokens"] += st.computed_tokens
            self._deferred_pending = 0
            reused = st.reused_tokens
            self.key = key
            self.resident, self.prefix_len = list(toks), len(toks)
            self.stable_text, self.prefix_text, self.tools, self.stable_msgs = prefix.text, text, prefix.tools, msgs
            self.manifest = prefix.manifest.copy().with_stable_token_hash(hash_token_ids(toks))
            return PrefixStatus(reused_tokens=reused, prefilled_tokens=st.computed_tokens,
                                dropped_tokens=max(old - reused, 0), prefix_tokens=len(toks),
                                resident_tokens=len(toks), available_tokens=self.num_ctx - len(toks),
                                stable_byte_hash=prefix.manifest.stable_byte_hash,
                                stable_token_hash=hash_token_ids(toks), manifest_digest=prefix.manifest.digest())

    def _suffix_tokens(self, suffix: SuffixInput) -> list[int]:
        vmsgs = volatile_messages(suffix.text, suffix.manifest)
        if not (self.stable_msgs or vmsgs):
            return self.tokenize(suffix.text, add_bos=self.prefix_len == 0 and self.add_bos)
        _, full = self._render_tokens([*self.stable_msgs, *vmsgs], self.tools, suffix.text, cue=True,
                                      **suffix_template(suffix))
        shared = common_prefix_len(self.resident[:self.prefix_len], full)
        if shared == 0:
            raise ErrManifestMismatch("the conversation's render shares no token with the resident stable prefix")
        if shared < self.prefix_len:  # a template that is not prefix-stable: drop the diverging stable tail
            self._engine("suffix", lambda: self.cell.ensure_prefix(self.resident[:shared], slot=self.slot,
                                                                   salt=self.key))
            self.resident, self.prefix_len = self.resident[:shared], shared
        return full[shared:]

    def prefill_suffix(self, suffix: SuffixInput) -> SuffixStatus:
        with self._lock:
            self._check()
            ok, reason = self.manifest.compatible_runtime(suffix.manifest)
            if not ok:
                raise ErrManifestMismatch(reason)
            if (not self.manifest.is_zero() and not suffix.manifest.is_zero()
                    and self.manifest.stable_byte_hash != suffix.manifest.stable_byte_hash):
                raise ErrManifestMismatch("stable prefix changed between EnsurePrefix and PrefillSuffix")
            if suffix.images:
                raise ErrUnsupportedFeature("images: this adapter renders text only")
            if self.key is None:
                raise ErrManifestMismatch("no stable prefix is resident; EnsurePrefix first")
            stoks = self._suffix_tokens(suffix)
            if len(self.resident) + len(stoks) > self.num_ctx:  # gated before dispatch
                raise ContextOverflowError("suffix", len(self.resident), len(stoks), self.num_ctx)
            t0 = time.perf_counter()
            if stoks:
                st = self._engine("suffix", lambda: self._prefill_engine(stoks),
                                  overflow=(len(self.resident), len(stoks)))
            else:
                st = None
            self._record("PrefillSuffix", t0, len(stoks), st)
            if stoks and getattr(st, "deferred_tokens", 0):  # what the engine layer did, never the mode asked for
                self.counters["deferred_prefill_calls"] += 1
                self.counters["deferred_prefill_tokens"] += len(stoks)
                self._deferred_pending += len(stoks)
            elif stoks:
                self.counters["physical_prefill_calls"] += 1
                self.counters["physical_prefill_tokens"] += len(stoks)
            self.resident.extend(stoks)
            return SuffixStatus(suffix_tokens=len(stoks), prefix_tokens=self.prefix_len,
                                resident_tokens=len(self.resident), available_tokens=self.num_ctx - len(self.resident),
                                manifest_digest=self.manifest.digest())

    def _prefill_engine(self, stoks: list[int]) -> Any:
        """The engine layer's PrefillSuffix of ``stoks`` in this session's mode (deferred: the suffix rides the next
        decode)."""
        return self.cell.prefill_suffix(stoks, slot=self.slot, defer=self.defer_prefill)

    def _decode_args(self, cfg: DecodeConfig) -> dict:
        so = cfg.structured_output
        schema = None
        if so.protocol in ("json_schema", "llama:json_schema"):
            try:
                schema = json.loads(so.payload)
            except ValueError as e:
                raise ErrUnsupportedFeature(f"structured output schema: {e}") from None
        elif so.protocol:
            raise ErrUnsupportedFeature(f"structured output protocol {so.protocol!r} is not supported by this backend")
        room = self.num_ctx - len(self.resident)
        if room <= 0:
            raise ContextOverflowError("decode", len(self.resident), 1, self.num_ctx)
        want = cfg.max_tokens if cfg.max_tokens > 0 else DEFAULT_MAX_TOKENS
        return {"max_tokens": min(want, room),
                "temperature": DEFAULT_SAMPLING["temperature"] if cfg.temperature is None else cfg.temperature,
                "top_p": DEFAULT_SAMPLING["top_p"] if cfg.top_p is None else cfg.top_p,
                "top_k": cfg.top_k if cfg.top_k > 0 else DEFAULT_SAMPLING["top_k"],
                "seed": 0 if cfg.seed is None or cfg.seed < 0 else cfg.seed, "json_schema": schema}

    def decode(self, cfg: DecodeConfig, cancelled: threading.Event | None = None) -> Iterator[StreamChunk]:
        """Stream the generated text as it is decoded; a terminal error is the last chunk (as Go's channel)."""
        with self._lock:
            try:
                self._check()
                args = self._decode_args(cfg)
            except TransportError as e:
                yield StreamChunk(error=e)
                return
            yield from self._stream(args, cancelled or threading.Event())

    def _stream(self, args: dict, cancelled: threading.Event) -> Iterator[StreamChunk]:
        pieces: queue.Queue = queue.Queue()
        done: dict[str, Any] = {}
        t0 = time.perf_counter()

        def on_token(token: int, text: str, at: float) -> None:
            if cancelled.is_set():
                raise _Cancelled()
            pieces.put(text)

        def run() -> None:
            try:
                done["result"] = self._engine("decode", lambda: self.cell.decode(slot=self.slot, on_token=on_token,
                                                                                 **args),
                                              overflow=(len(self.resident), 1))
            except _Cancelled:
                done["error"] = ErrCanceled()
            except BaseException as e:  # noqa: BLE001 - carried to the stream as its terminal chunk
                done["error"] = e
            finally:
                pieces.put(None)

        worker = threading.Thread(target=run, name=f"decode-{self.slot}", daemon=True)
        worker.start()
        first: float | None = None
        try:
            while (piece := pieces.get()) is not None:
                first = first if first is not None else time.perf_counter() - t0
                if piece:
                    yield StreamChunk(text=piece)
        finally:  # the consumer may have gone (the stream cancelled): stop the engine at its next token
            if worker.is_alive():
                cancelled.set()
                worker.join()
            self._after_decode(t0, first, done)
        if "error" in done:
            yield StreamChunk(error=done["error"])

    def _after_decode(self, t0: float, first: float | None, done: dict) -> None:
        res = done.get("result")
        self.counters["decode_calls"] += 1
        self.counters["decode_prompt_tokens"] += self._deferred_pending
        self._deferred_pending = 0
        if not self.closed:  # the tape after a decode is the engine layer's (generated tokens, a cancelled stream)
            self._resync()
        self._record("Decode", t0, len(self.resident), res, ttft_s=first,
                     output_tokens=len(res.tokens) if res is not None else None,
                     error=str(done.get("error") or ""))

    def _resync(self) -> None:
        """After a stream that ended early, take the resident tape from the engine layer's own view of the slot."""
        try:
            self.resident = list(self.slot_tokens())
        except Exception:  # noqa: BLE001 - a dead engine: the session is fatal already or will be at its next call
            pass

    def explain_context(self) -> ContextReport:
        with self._lock:
            caps = self.capabilities()
            resident = len(self.resident)
            residency = ResidencyReport(budget_tokens=self.num_ctx, total_tokens=resident, hot_tokens=resident,
                                        protected_tokens=self.prefix_len, capabilities=caps,
                                        error=f"session fatal: {self.fatal_error}" if self.fatal_error else "")
            return ContextReport(resident_tokens=resident, prefix_tokens=self.prefix_len, num_ctx=self.num_ctx,
                                 hot_context_tokens=self.num_ctx,
                                 planner_effective_context=self.config.planner_effective_context or self.num_ctx,
                                 available_tokens=self.num_ctx - resident,
                                 stable_byte_hash=self.manifest.stable_byte_hash,
                                 stable_token_hash=self.manifest.stable_token_hash,
                                 manifest_digest=self.manifest.digest(), manifest=self.manifest, closed=self.closed,
                                 fatal_error=self.fatal_error, residency=residency, **self.counters)

    def snapshot(self) -> SessionSnapshot:
        """The session's tokens, texts and manifest; ``state`` is the engine's own blob where it has one (the daemon
        keeps it under ``state_id``, as modeld does, ``modeld/slot/service.go`` 1045-1060)."""
        with self._lock:
            self._check()
            snap = self._engine("snapshot", lambda: self.cell.snapshot(slot=self.slot))
            blob = snap.payload if snap.kind == "kv" else None
            return SessionSnapshot(state=blob, resident_tokens=len(self.resident), prefix_tokens=self.prefix_len,
                                   num_ctx=self.num_ctx, resident_token_ids=list(self.resident) or None,
                                   stable_text=self.stable_text, prefix_text=self.prefix_text, tools=self.tools,
                                   manifest=self.manifest)

    def restore(self, snap: SessionSnapshot) -> None:
        """Replace the resident state: from the engine's blob where the snapshot has one, else by re-prefilling the
        snapshot's tokens (:meth:`_restore_engine`; a wing whose engine cannot, as modeld's llama cell, refuses). What
        the backend reports of RecomputeRange plays no part: the conformance probe holds the report to this."""
        with self._lock:
            self._check()
            if snap.num_ctx > 0 and snap.num_ctx != self.num_ctx:
                raise ErrManifestMismatch("snapshot context window changed")
            if snap.resident_tokens < 0 or snap.prefix_tokens < 0 or snap.prefix_tokens > snap.resident_tokens:
                raise ValueError(f"restore invalid snapshot: prefix_tokens={snap.prefix_tokens} "
                                 f"resident_tokens={snap.resident_tokens}")
            if snap.resident_tokens > self.num_ctx:
                raise ContextOverflowError("restore", 0, snap.resident_tokens, self.num_ctx)
            ids = list(snap.resident_token_ids or [])
            if snap.resident_tokens > 0 and len(ids) != snap.resident_tokens:
                raise ValueError(f"restore invalid snapshot: resident_token_ids={len(ids)} "
                                 f"resident_tokens={snap.resident_tokens}")
            if not self.manifest.is_zero() and not snap.manifest.is_zero():
                ok, reason = self.manifest.compatible_runtime(snap.manifest)
                if not ok:
                    raise ErrManifestMismatch(reason)
            key = cache_salt(snap.manifest, self.adapters)
            t0 = time.perf_counter()
            st = self._restore_engine(snap, ids, key) if ids else None
            self._record("Restore", t0, len(ids), st)
            self.key, self.resident, self.prefix_len = key, ids, snap.prefix_tokens
            self.stable_text, self.prefix_text, self.tools = snap.stable_text, snap.prefix_text, snap.tools
            self.manifest = snap.manifest
            self.stable_msgs = stable_messages(self.stable_text, self.manifest)
            self._deferred_pending = 0

    def _restore_engine(self, snap: SessionSnapshot, ids: list[int], key: str) -> Any:
        from ..engine import Snapshot

        if snap.state:
            engine = self.cell.describe().engine
            return self._engine("restore", lambda: self.cell.restore(
                Snapshot(self.cell.manifest.digest, key, tuple(ids), "kv", snap.state, engine), slot=self.slot))
        st = self._engine("restore", lambda: self.cell.ensure_prefix(ids, slot=self.slot, salt=key))
        if st.computed_tokens > 0:
            self.counters["physical_prefill_calls"] += 1
            self.counters["physical_prefill_tokens"] += st.computed_tokens
        return st

    def _close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self.release()
        except Exception:  # noqa: BLE001 - a dead engine cannot free a slot; the session is gone either way
            pass
        if self._on_release is not None:
            self._on_release(self.slot)

    def close(self) -> None:
        with self._lock:
            self._close()

    def evidence(self) -> dict:
        """What the daemon serves beside the contract for this session (``workbench.transport.v1.Evidence``): its
        stages with the engine's own counters, its derived key, the engine's cumulative work and resident KV."""
        with self._lock:
            return {"stages": [s.doc() for s in self.stages], "cache_salt": self.key or "",
                    "adapters": [asdict(a) for a in self.adapters], "num_ctx": self.num_ctx,
                    "defer_prefill": self.defer_prefill, "engine_work": self.engine_work(),
                    "engine_resident_tokens": None if self.closed else self.engine_resident(),
                    "closed": self.closed, "fatal_error": self.fatal_error}


def suffix_template(suffix: SuffixInput) -> dict:
    """The template variables a suffix sets: ``enable_thinking`` where ``EnableThinking`` is given (a Go ``*bool``:
    false is a value), ``reasoning_effort`` where ``ReasoningEffort`` is. Unset, the template's own default holds
    (modeld passes thinking on, which is what a thinking template does with it undefined)."""
    out: dict[str, Any] = {}
    if suffix.enable_thinking is not None:
        out["enable_thinking"] = bool(suffix.enable_thinking)
    if suffix.reasoning_effort:
        out["reasoning_effort"] = suffix.reasoning_effort
    return out


def model_load_failed(err: BaseException) -> ErrModelLoadFailed:
    return ErrModelLoadFailed(f"{type(err).__name__}: {err}")


__all__ = ["CellSession", "DEFAULT_MAX_TOKENS", "DEFAULT_SAMPLING", "Stage", "model_load_failed", "suffix_template"]
