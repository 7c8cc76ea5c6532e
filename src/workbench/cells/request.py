"""What the request-level cells share: engines that take whole requests and report reuse themselves.

TensorRT-LLM and vLLM keep KV in one engine-global pool of hash-keyed blocks. A cell cannot place
or remove a sequence's KV there: it sends whole requests (a ``max_tokens=1`` warm-up, a streamed
decode) under a manifest-keyed ``cache_salt`` and reads back what the engine says it reused. A slot
is therefore the cell's bookkeeping: the tokens a sequence continues from, a deferred suffix, its
salt and retention. :class:`RequestCell` holds that bookkeeping and the contract operations that
follow from it alike on both engines (EnsurePrefix, PrefillSuffix, Decode, ExplainContext, text
snapshots, slot switch, the fit check before dispatch, the lifecycle); each engine's module keeps
its mechanism: how a request is sent, streamed and counted (:meth:`RequestCell._warm`,
:meth:`RequestCell._stream`), and what it describes.
"""

from __future__ import annotations

import abc
import dataclasses
import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Iterator, Mapping, Sequence, TypeVar

from .. import models
from ..engine import (AdapterReply, Capabilities, ContextExplanation, ContextOverflow, DecodeResult,
                        ManifestMismatch, PrefixStatus, Prompt, Retention, Snapshot, TokenCallback, UnsupportedFeature,
                        WorkbenchError, common_prefix, split_prompt)
from ..transport.manifest import AdapterSpec, Variant, adapter_content_digest

DEFAULT_CONTEXT_TOKENS = 4096  # the context a cell opens with where the model allows more
_C = TypeVar("_C", bound="RequestCell")


def adapter_digest(path: str) -> str:
    """Content digest of a LoRA adapter directory (every file, by name and sha256): the adapter's identity, as the
    contract's adapter identity computes it (:func:`workbench.transport.manifest.adapter_content_digest`)."""
    p = Path(path)
    if not p.is_dir():
        raise models.ModelSpecError(f"LoRA adapter {p} is not a directory; expected a PEFT adapter directory")
    return adapter_content_digest(str(p))


@dataclass
class Slot:
    """One sequence, as the cell keeps it: the engine's pool is shared and keyed by salt, not by slot."""

    tokens: list[int] = field(default_factory=list)  # the sequence this slot continues from
    pending: list[int] = field(default_factory=list)  # deferred suffix: rides the next decode's prefill
    key: str | None = None  # cache_salt its requests carry
    salt: str | None = None
    retention: Retention | None = None  # None where the engine has no retention priority
    counters: dict = field(default_factory=dict)  # the last request's engine counters


@dataclass(frozen=True)
class Warm:
    """What one ``max_tokens=1`` request over a prefix reported. Built by :meth:`read`, so an engine that gave
    no count is source ``none`` (no reading), never an engine count of 0."""

    reused_tokens: int
    source: str  # PrefixStatus.source: the engine counter the reuse was read from, or "none"
    counters: dict
    elapsed_s: float

    @classmethod
    def read(cls, reused: int | None, counter: str, counters: dict, elapsed_s: float) -> "Warm":
        """The engine's ``counter`` gave ``reused`` (None: the engine returned no count for this request)."""
        return cls(0, "none", counters, elapsed_s) if reused is None else cls(int(reused), counter, counters, elapsed_s)

    @property
    def engine_reused(self) -> int | None:
        return None if self.source == "none" else self.reused_tokens


@dataclass(frozen=True)
class Step:
    """One streamed output of a decode request."""

    tokens: list[int]  # the tokens this output adds
    piece: str  # the text that came with them ("" without a tokenizer)
    text: str  # the request's whole text so far
    finish_reason: str | None
    counters: dict  # the engine's counters as of this output (the last one's are the request's)
    arrived: int | None = None  # tokens this output stands for, where the engine streamed fewer ids than that
    complete: list[int] | None = None  # last output only: the request's every token id, where the stream lacked some


class RequestCell(abc.ABC):
    """A cell over an engine that takes whole requests. Subclasses set the class attributes, build the
    engine in ``_start`` and implement the mechanism methods; ``__init__`` sets ``model``, ``opts``
    (a frozen dataclass with ``adapters``), ``context_tokens``, ``_vocab_size`` and then calls
    :meth:`_begin`."""

    engine: ClassVar[str]
    label: ClassVar[str]  # how messages name the engine, e.g. "TensorRT-LLM"
    prefill_now: ClassVar[bool]  # whether prefill_suffix sends the suffix now unless told to defer
    exact_sources: ClassVar[tuple[str, ...]] = ()  # Warm sources that count reuse exactly (not whole blocks)

    model: models.ResolvedModel
    opts: Any
    context_tokens: int
    _vocab_size: int | None

    def _begin(self, slots: int) -> None:
        """Start the engine with ``slots`` empty slots; a failed start closes what it had opened, then raises."""
        self.manifest = self._manifest_for(self.opts.adapters)
        self._slots = [Slot() for _ in range(slots)]
        self._llm: Any = None
        self._tokenizer: Any = None
        self._lora_request: Any = None
        self._connector: Any = None  # the engine's recording KV connector, when opened with connector=True
        self._tmp: str | None = None
        try:
            self._start()
        except BaseException:
            self.close()
            raise

    def _manifest_for(self, adapters: Sequence[str]) -> Variant:
        return Variant(self.model.sha256, tuple(AdapterSpec(path=os.fspath(a), digest=adapter_digest(a), scale=1.0)
                                                for a in adapters))

    # ------------------------------------------------------------------ the engine's mechanism

    @abc.abstractmethod
    def _start(self) -> None:
        """Create the engine from ``self.opts`` (sets ``_llm`` and ``_tokenizer``)."""

    @abc.abstractmethod
    def _stop(self) -> None:
        """Shut the engine down, if it runs; sets ``_llm`` to None."""

    @abc.abstractmethod
    def _warm(self, tokens: list[int], key: str, retention: Retention | None, *, slot: int = 0) -> Warm:
        """Send ``tokens`` as one ``max_tokens=1`` request under ``key`` and read what the engine reused;
        ``slot``: the cell's slot, for an engine whose slots are its own (llama-server's ``id_slot``)."""

    @abc.abstractmethod
    def _stream(self, prompt: list[int], st: Slot, sampling: dict[str, Any]) -> Iterator[Step]:
        """Send ``prompt`` as slot ``st``'s streamed request with the decode's ``sampling`` keywords
        (``max_tokens`` included); yield its outputs as they arrive."""

    @abc.abstractmethod
    def _chat_tokens(self, messages: list, *, continuation: bool) -> list[int]:
        """Chat messages rendered by the model's template and tokenized."""

    @abc.abstractmethod
    def _capacity_tokens(self) -> int:
        """Tokens the engine's KV pool holds."""

    @property
    @abc.abstractmethod
    def _granularity(self) -> int:
        """Tokens per KV block: the smallest unit in which the engine reports reuse."""

    @abc.abstractmethod
    def _context_notes(self, st: Slot) -> list[str]:
        """How reuse works on this engine, and what the slot's last request reported."""

    def _slot_retention(self, requested: Retention | None) -> Retention | None:
        """The retention a slot's requests carry; None: this engine has no retention priority."""
        return None

    def _prepare_switch(self, opts: Any) -> None:
        """Refuse ``opts`` or save what the running engine still holds, before a slot switch stops it."""

    # ------------------------------------------------------------------ lifecycle

    def switch(self, *, adapters: Sequence[str | os.PathLike] = ()) -> Variant:
        """Slot switch: tear down the engine and recreate it with ``adapters``. Every slot starts empty."""
        self._check_open()
        opts = dataclasses.replace(self.opts, adapters=tuple(os.fspath(a) for a in adapters))  # validates
        self._prepare_switch(opts)
        manifest = self._manifest_for(opts.adapters)
        self._stop()
        self.opts, self.manifest = opts, manifest
        self._clear_slots()
        self._start()
        return manifest

    def _clear_slots(self) -> None:
        self._slots = [Slot() for _ in self._slots]

    def clear_slot(self, slot: int) -> None:
        """Forget slot ``slot``'s sequence (a session closed on it); the engine's pool keeps its blocks, which age
        out as the engine evicts them."""
        self._slots[self._slot_index(slot)] = Slot()

    def _slot_index(self, slot: int) -> int:
        self._slot(slot)
        return slot

    def close(self) -> None:
        self._stop()
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __enter__(self: _C) -> _C:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._llm is None:
            raise WorkbenchError("this cell is closed")

    # ------------------------------------------------------------------ tokens

    def tokenize(self, text: str, *, special: bool = True) -> list[int]:
        return list(self._need_tokenizer("text prompts").encode(text, add_special_tokens=special))

    def _need_tokenizer(self, what: str) -> Any:
        self._check_open()
        if self._tokenizer is None:
            raise UnsupportedFeature(what, self.engine,
                                     f"{self.model.name} is open without a tokenizer; pass token ids")
        return self._tokenizer

    def _apply_template(self, messages: list, **kw: Any) -> Any:
        """The tokenizer's chat template on ``messages``; one that cannot render (an unknown filter) names the fix."""
        from jinja2 import TemplateError

        try:
            return self._need_tokenizer("chat messages").apply_chat_template(messages, **kw)
        except TemplateError as e:
            raise WorkbenchError(f"the chat template of {self.model.name} cannot be rendered ({type(e).__name__}: "
                                 f"{e}); fix chat_template in its tokenizer_config.json, or give the prompt as text or "
                                 "token ids") from None

    def _tokens_of(self, prompt: Prompt, *, continuation: bool = False) -> list[int]:
        kind, value = split_prompt(prompt, self._vocab_size)
        if kind == "tokens":
            return value
        if kind == "text":
            return self.tokenize(value, special=not continuation)
        return self._chat_tokens(value, continuation=continuation)

    def _sampling_keywords(self, max_tokens: int, *, temperature: float, top_p: float, top_k: int, seed: int,
                           stop: Sequence[str], json_schema: Mapping[str, Any] | None) -> dict[str, Any]:
        """The ``SamplingParams`` keywords both engines spell alike (greedy at temperature 0); a JSON schema
        and stop strings need the tokenizer, and the engine adds its own structured-output keyword."""
        kw: dict[str, Any] = {"max_tokens": max_tokens, "seed": seed, "temperature": max(temperature, 0.0)}
        if temperature > 0:
            if top_p < 1.0:
                kw["top_p"] = top_p
            if top_k > 0:
                kw["top_k"] = top_k
        if stop:
            self._need_tokenizer("stop strings")
            kw["stop"] = list(stop)
        if json_schema is not None:
            self._need_tokenizer("structured output")
        return kw

    # ------------------------------------------------------------------ slots

    def _slot(self, slot: int) -> Slot:
        self._check_open()
        if not 0 <= slot < len(self._slots):
            raise ValueError(f"slot {slot} does not exist; this cell has slots 0..{len(self._slots) - 1}")
        return self._slots[slot]

    def _check_fit(self, tokens: int) -> None:
        """Refuse before dispatch: the sequence must fit the context and the KV pool."""
        if tokens > self.context_tokens:
            raise ContextOverflow(tokens, self.context_tokens, "context")
        if tokens > self._capacity_tokens():
            raise ContextOverflow(tokens, self._capacity_tokens(), "KV cache")

    # ------------------------------------------------------------------ the contract

    def _granularity_of(self, warm: Warm) -> int:
        """The tokens one step of the count stands for: 1 where the source counts exactly, else the cell's block."""
        return 1 if warm.source in self.exact_sources else self._granularity

    def ensure_prefix(self, prompt: Prompt, *, slot: int = 0, salt: str | None = None,
                      retention: Retention | None = None) -> PrefixStatus:
        """A ``max_tokens=1`` warm-up under the manifest-keyed salt; the engine's own counter gives the reuse."""
        st = self._slot(slot)
        tokens = self._tokens_of(prompt)
        if not tokens:
            raise ValueError("an empty prefix cannot be ensured")
        self._check_fit(len(tokens) + 1)  # the warm-up generates one token
        retention = self._slot_retention(retention)
        key = self.manifest.cache_key(salt)
        kept = common_prefix(st.tokens, tokens) if st.key == key else 0
        dropped = len(st.tokens) - kept + len(st.pending)
        warm = self._warm(tokens, key, retention, slot=slot)
        st.tokens, st.pending, st.key, st.salt, st.retention, st.counters = (
            tokens, [], key, salt, retention, warm.counters)
        return PrefixStatus(slot=slot, prompt_tokens=len(tokens), reused_tokens=warm.reused_tokens,
                            computed_tokens=len(tokens) - warm.reused_tokens, dropped_tokens=dropped,
                            exact=warm.source in self.exact_sources,
                            granularity_tokens=self._granularity_of(warm), source=warm.source, elapsed_s=warm.elapsed_s,
                            engine_counters=warm.counters)

    def prefill_suffix(self, suffix: Prompt, *, slot: int = 0, defer: bool = False) -> PrefixStatus:
        """Warm prefix + suffix with one ``max_tokens=1`` request where the engine does (``prefill_now``) and
        ``defer`` is false; otherwise the suffix is bookkeeping that rides the next decode's prefill."""
        st = self._slot(slot)
        if st.key is None:
            raise WorkbenchError(f"slot {slot} has no prefix; call ensure_prefix first")
        tokens = self._tokens_of(suffix, continuation=True)
        total = len(st.tokens) + len(st.pending) + len(tokens)
        self._check_fit(total + 1)
        st.pending.extend(tokens)
        if defer or not self.prefill_now:
            return PrefixStatus(slot=slot, prompt_tokens=total, reused_tokens=len(st.tokens), computed_tokens=0,
                                deferred_tokens=len(st.pending), exact=False, granularity_tokens=self._granularity,
                                source="bookkeeping")
        seq = st.tokens + st.pending
        warm = self._warm(seq, st.key, st.retention, slot=slot)
        st.tokens, st.pending, st.counters = seq, [], warm.counters
        return PrefixStatus(slot=slot, prompt_tokens=total, reused_tokens=warm.reused_tokens,
                            computed_tokens=total - warm.reused_tokens, exact=warm.source in self.exact_sources,
                            granularity_tokens=self._granularity_of(warm), source=warm.source, elapsed_s=warm.elapsed_s,
                            engine_counters=warm.counters)

    def decode(self, *, slot: int = 0, max_tokens: int = 16, temperature: float = 0.0, top_p: float = 1.0,
               top_k: int = 0, seed: int = 0, stop: Sequence[str] = (), json_schema: Mapping[str, Any] | None = None,
               on_token: TokenCallback | None = None) -> DecodeResult:
        """One streamed request over the slot's tokens and its deferred suffix; token times as outputs arrive."""
        st = self._slot(slot)
        if max_tokens < 1:
            raise ValueError("max_tokens must be at least 1")
        if not st.tokens and not st.pending:
            raise WorkbenchError(f"slot {slot} is empty; call ensure_prefix first")
        prompt = st.tokens + st.pending
        self._check_fit(len(prompt) + max_tokens)
        sampling = dict(max_tokens=max_tokens, temperature=temperature, top_p=top_p, top_k=top_k, seed=seed,
                        stop=stop, json_schema=json_schema)
        t0 = time.perf_counter()
        tokens: list[int] = []
        times: list[float] = []
        last: Step | None = None
        for last in self._stream(prompt, st, sampling):
            now = time.perf_counter() - t0
            times.extend([now] * (len(last.tokens) if last.arrived is None else last.arrived))
            for i, tok in enumerate(last.tokens):
                tokens.append(tok)
                if on_token is not None:
                    on_token(tok, last.piece if i == len(last.tokens) - 1 else "", now)
        if last is None:
            raise WorkbenchError(f"{self.label} returned no output for the decode request")
        if last.complete is not None:  # ids the stream held back, each timed when its output arrived
            tokens = list(last.complete)
            if len(tokens) != len(times):
                raise WorkbenchError(f"{self.label} streamed {len(times)} tokens but its request made {len(tokens)}")
        deferred = len(st.pending)
        st.tokens, st.pending, st.counters = prompt + tokens, [], last.counters
        return DecodeResult(
            slot=slot, tokens=tokens, text=last.text,
            finish_reason=last.finish_reason or ("length" if len(tokens) >= max_tokens else "stop"),
            ttft_s=times[0] if times else time.perf_counter() - t0, token_times_s=times,
            prompt_tokens=len(prompt), deferred_prefill_tokens=deferred, engine_counters=last.counters)

    def explain_context(self, *, slot: int = 0) -> ContextExplanation:
        st = self._slot(slot)
        return ContextExplanation(slot=slot, tokens=len(st.tokens), cache_key=st.key or "",
                                  capabilities=self.capabilities(), pending_tokens=len(st.pending),
                                  notes=tuple(self._context_notes(st)))

    def capabilities(self) -> Capabilities:
        """No tail or middle removal and no position shift in a shared block pool; a re-request recomputes."""
        return Capabilities(remove_tail=False, remove_middle=False, position_shift=False, recompute_range=True)

    def snapshot(self, *, slot: int = 0) -> Snapshot:
        """A text snapshot: the slot's tokens, salt and retention (the engine's KV is not exported)."""
        st = self._slot(slot)
        if not st.tokens:
            raise WorkbenchError(f"slot {slot} is empty; there is nothing to snapshot")
        payload: dict[str, Any] = {"salt": st.salt, "committed": len(st.tokens)}
        retention = self._slot_retention(st.retention)
        if retention is not None:
            payload["retention"] = [retention.priority, retention.duration_ms]
        return Snapshot(manifest_digest=self.manifest.digest, cache_key=st.key or "",
                        tokens=tuple(st.tokens + st.pending), kind="text", payload=json.dumps(payload).encode(),
                        engine=self.engine)

    def restore(self, snap: Snapshot, *, slot: int = 0) -> PrefixStatus:
        """Re-prefill a text snapshot's tokens; pending tokens stay deferred."""
        self._slot(slot)
        if snap.manifest_digest != self.manifest.digest:
            raise ManifestMismatch(self.manifest.digest, snap.manifest_digest)
        if snap.kind != "text" or snap.engine != self.engine:
            raise WorkbenchError(f"cannot restore a {snap.engine or '?'} {snap.kind} snapshot into a {self.label} cell")
        meta = json.loads(snap.payload)
        committed = int(meta["committed"])
        retention = Retention(*meta["retention"]) if "retention" in meta else None
        status = self.ensure_prefix(list(snap.tokens[:committed]), slot=slot, salt=meta["salt"], retention=retention)
        pending = list(snap.tokens[committed:])
        self._slots[slot].pending = pending
        return dataclasses.replace(status, prompt_tokens=len(snap.tokens), deferred_tokens=len(pending))

    # ------------------------------------------------------------------ observers

    def adapter_request(self, tokens: Sequence[int], *, key: str, adapter: bool,
                        max_tokens: int = 4) -> AdapterReply:
        """One request of ``tokens`` under ``key``, carrying the cell's LoRA adapter or not (``adapter_requests``
        observer; needs adapters at open): a ``max_tokens=1`` request for the engine's reuse count, then a greedy
        decode of ``max_tokens``. The key is the caller's, so the engine's own keying is seen, not the salt's."""
        self._check_open()
        loaded = self._lora_request
        if loaded is None:
            raise UnsupportedFeature("adapter requests", self.engine, "open the cell with adapters=[a LoRA directory]")
        self._lora_request = loaded if adapter else None
        try:
            warm = self._warm(list(tokens), key, None)
            sampling = dict(max_tokens=max_tokens, temperature=0.0, top_p=1.0, top_k=0, seed=0, stop=(),
                            json_schema=None)
            out = [t for step in self._stream(list(tokens), Slot(list(tokens), key=key), sampling) for t in step.tokens]
        finally:
            self._lora_request = loaded
        return AdapterReply(adapter, warm.engine_reused, tuple(out))

    def connector_log(self) -> list[dict]:
        """Every call the recording KV connector saw (``connector`` observer; needs connector=True at open)."""
        if self._connector is None:
            raise UnsupportedFeature("connector log", self.engine, "open the cell with connector=True")
        return self._connector.read()


__all__ = ["DEFAULT_CONTEXT_TOKENS", "RequestCell", "Slot", "Step", "Warm", "adapter_digest"]
