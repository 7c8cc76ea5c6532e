"""The daemon's :class:`~workbench.transport.contract.Service`: one engine cell in modeld's single model slot.

As modeld's slot (``runtime/transport/session.go`` ``ModelController``; ``docs/development/blueprints/modeld/
single-active-model-slot.md`` at 2bfdc1f5): one active model with a generation counter that every load advances.
``LoadModel`` tears the engine down and opens it again (the mapping row "Slot switch: tear down / recreate the
``LLM`` instance"), conditional on ``ExpectedGeneration`` where one is given (``ErrSlotGenerationStale`` otherwise);
every session of an older generation then answers ``ErrSlotGenerationStale``. A session names its model and adapters;
an identity other than the active one (another model, other adapters, the same adapters in another order or at
another scale) is ``ErrModelSwitchRequired``, as modeld's slot keys identity with adapters in order, with scale.

Sessions share the slot's engine cell, each on a cell slot of its own. The store of this daemon holds one model, the
one it was started with (``ListModels``); any other name is ``ErrModelNotFound``.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Sequence

from .capacity import Policy
from .contract import (ActiveModel, Config, DaemonStatus, EmbedRequest, EmbedResult, LoadModelRequest, ModelInfo,
                       NodeModel, OpenSessionRequest, UnloadModelRequest)
from .errors import (ErrBackendMismatch, ErrDigestMismatch, ErrModelBusy, ErrModelNotActive, ErrModelNotFound,
                     ErrModelSwitchRequired, ErrSlotGenerationStale, ErrStaleFence, ErrUnsupportedFeature)
from .manifest import AdapterSpec
from .session import CellSession, Stage, model_load_failed

DEFAULT_SLOTS = 4


def adapter_identity(adapters: Sequence[AdapterSpec] | None) -> tuple[tuple[str, float], ...]:
    """Adapter identity as modeld keys it: each digest with its scale, in list order."""
    return tuple((a.digest, float(a.scale or 0.0)) for a in adapters or ())


class SlotService:
    """Service + ModelController (+ ``ListModels``) over one engine cell; thread-safe."""

    def __init__(self, engine: str, model: str, *, session_cls: type[CellSession], instance_id: str = "",
                 backend: str | None = None, options: dict | None = None, slots: int = DEFAULT_SLOTS,
                 defer_prefill: bool | None = None, policy: Policy | None = None, faults: bool = False) -> None:
        self.engine, self.model_spec = engine, model
        self.session_cls = session_cls
        self.instance_id = instance_id or f"wb-{uuid.uuid4().hex[:12]}"
        self.backend = backend if backend is not None else session_cls.backend
        self.options = dict(options or {})
        self.slots = slots
        self.defer_prefill = session_cls.defers_by_default if defer_prefill is None else defer_prefill
        if self.defer_prefill and not session_cls.can_defer:
            raise ValueError(f"{engine}'s session adapter has no deferred-prefill mode (it prefills the suffix "
                             "when asked); drop --defer-prefill")
        self.policy = policy or Policy()
        self.faults = faults
        self._lock = threading.RLock()
        self.state = "Empty"
        self.last_error = ""
        self.generation = 0
        self.cell: Any = None
        self.active = ActiveModel()
        self.adapter_specs: tuple[AdapterSpec, ...] = ()
        self.sessions: dict[int, tuple[int, CellSession]] = {}  # cell slot -> (generation, session)
        self.stale: set[int] = set()  # ids of sessions an older generation opened
        self.states: dict[str, bytes] = {}  # snapshot state blobs by state_id (modeld/slot/service.go 1045-1060)
        self.daemon_stages: list[Stage] = []
        self.opener: Callable[..., Any] | None = None  # opens the engine cell; None: workbench.cells.open_cell
        self.kv_per_token: tuple[int, str] = (0, "")  # the active engine's KV bytes per token, and where read

    # ------------------------------------------------------------------ the slot

    def start(self, adapters: Sequence[AdapterSpec] = (), config: Config | None = None) -> ActiveModel:
        """Load the model at start (generation 1)."""
        return self.load_model(LoadModelRequest(owner_instance_id=self.instance_id, adapters=list(adapters) or None,
                                                config=config or Config()))

    def _close_sessions(self) -> None:
        for _, (_, sess) in list(self.sessions.items()):
            self.stale.add(id(sess))
            sess.close()
        self.sessions.clear()

    def _stop_cell(self) -> None:
        self._close_sessions()
        if self.cell is not None:
            try:
                self.cell.close()
            except Exception as e:  # noqa: BLE001 - a dead engine may fail its close; the slot is free either way
                self.last_error = f"closing the engine: {type(e).__name__}: {e}"
            finally:
                self.cell = None

    def _resolve_adapters(self, adapters: Sequence[AdapterSpec]) -> tuple[AdapterSpec, ...]:
        out = []
        for a in adapters:
            if not a.path:
                raise ErrModelNotFound(f"adapter {a.name or a.digest or '?'}: this daemon loads adapters from a path")
            if a.scale not in (0.0, 1.0):
                raise ErrUnsupportedFeature(f"adapter {a.path} at scale {a.scale:g}: the engine applies LoRA at "
                                            "scale 1 only")
            digest = self.session_cls.adapter_digest(a.path)
            if a.digest and a.digest != digest:
                raise ErrDigestMismatch(f"adapter {a.path} hashes to {digest[:16]}…, the request says "
                                        f"{a.digest[:16]}…")
            out.append(AdapterSpec(name=a.name or Path(a.path).name, path=a.path, digest=digest, scale=1.0))
        return tuple(out)

    def load_model(self, req: LoadModelRequest) -> ActiveModel:
        with self._lock:
            if req.model_name and req.model_name not in (self.model_spec, self.active.model_name):
                raise ErrModelNotFound(f"{req.model_name}: this daemon's store holds {self.model_spec} only")
            self._check_type(req.type)
            if req.expected_generation and req.expected_generation != self.generation:
                raise ErrSlotGenerationStale(f"expected generation {req.expected_generation}, the slot is at "
                                             f"{self.generation}")
            adapters = self._resolve_adapters(req.adapters or ())
            t0 = time.perf_counter()
            self.state = "Switching" if self.cell is not None else "Loading"
            self._stop_cell()
            options = self.session_cls.cell_options(self.options, req.config, slots=self.slots,
                                                    adapters=[a.path for a in adapters], policy=self.policy)
            try:
                from .. import cells

                self.cell = (self.opener or cells.open_cell)(self.engine, self.model_spec, **options)
            except Exception as e:  # noqa: BLE001 - any failure to load is the contract's model_load_failed
                self.state, self.last_error = "Failed", f"{type(e).__name__}: {e}"
                raise model_load_failed(e) from None
            self.generation += 1
            self.adapter_specs = adapters
            self.kv_per_token = self.session_cls.kv_bytes_per_token(self.cell)  # read once: a reading may cost work
            model = getattr(self.cell, "model", None)
            self.active = ActiveModel(model_name=self.model_spec, type=self.backend,
                                      digest=getattr(model, "sha256", "") or "",
                                      path=os.fspath(getattr(model, "path", "") or ""), config=req.config,
                                      adapters=list(adapters) or None, generation=self.generation)
            self.state, self.last_error = "Ready", ""
            self.daemon_stages.append(Stage("load", t0, time.perf_counter() - t0))
            return self.active

    def unload_model(self, req: UnloadModelRequest) -> None:
        with self._lock:
            if req.expected_generation and req.expected_generation != self.generation:
                raise ErrSlotGenerationStale(f"expected generation {req.expected_generation}, the slot is at "
                                             f"{self.generation}")
            self.state = "Unloading"
            self._stop_cell()
            self.state = "Empty"

    def status(self) -> DaemonStatus:
        with self._lock:
            busy = "session" if self.sessions else ""
            return DaemonStatus(owner_instance_id=self.instance_id, backend=self.backend, state=self.state,
                                active=self.active if self.cell is not None else None, busy_operation=busy,
                                last_error=self.last_error)

    def close(self) -> None:
        with self._lock:
            self.state = "ShuttingDown"
            self._stop_cell()

    # ------------------------------------------------------------------ Service

    def _check_type(self, typ: str) -> None:
        if typ and typ != self.backend:
            raise ErrBackendMismatch(f"type {typ!r}; this daemon serves {self.backend!r}")

    def _check_identity(self, req: OpenSessionRequest) -> None:
        if req.owner_instance_id and req.owner_instance_id != self.instance_id:
            raise ErrStaleFence()
        self._check_type(req.type)
        if self.cell is None:
            raise ErrModelNotActive(f"{req.model_name or self.model_spec}: the slot is {self.state}")
        if req.model_name and req.model_name != self.active.model_name:
            raise ErrModelSwitchRequired(f"{req.model_name} is not the active model {self.active.model_name}")
        if req.digest and req.digest != self.active.digest:
            raise ErrModelSwitchRequired(f"digest {req.digest[:16]}… is not the active model's")
        if self._identity(req.adapters) != adapter_identity(self.adapter_specs):
            raise ErrModelSwitchRequired("the session's adapters (digest and scale, in order) are not the active "
                                         "variant's; LoadModel with them first")

    def _identity(self, adapters: Sequence[AdapterSpec] | None) -> tuple[tuple[str, float], ...]:
        """A request's adapter identity, its digests read from the files where it gave paths only (a scale of 0,
        Go's zero value, is scale 1)."""
        return tuple((a.digest or (self.session_cls.adapter_digest(a.path) if a.path else ""), float(a.scale or 1.0))
                     for a in adapters or ())

    def open_session(self, req: OpenSessionRequest) -> CellSession:
        with self._lock:
            self._check_identity(req)
            free = [s for s in range(self.slots) if s not in self.sessions]
            if not free:
                raise ErrModelBusy(f"all {self.slots} session slots of the active model are open")
            t0 = time.perf_counter()
            d = self.cell.describe()
            num_ctx = min(req.config.num_ctx, d.context_tokens) if req.config.num_ctx > 0 else d.context_tokens
            slot = free[0]
            sess = self.session_cls(self.cell, slot, config=req.config, adapters=self.adapter_specs, num_ctx=num_ctx,
                                    defer_prefill=self.defer_prefill, on_release=self._released)
            sess.generation = self.generation
            self.sessions[slot] = (self.generation, sess)
            self.daemon_stages.append(Stage("session_open", t0, time.perf_counter() - t0))
            return sess

    def _released(self, slot: int) -> None:
        with self._lock:
            self.sessions.pop(slot, None)

    def check_session(self, sess: CellSession) -> CellSession:
        """A session of an older generation answers ErrSlotGenerationStale; one closed, ErrSessionClosed (or its
        fatal cause)."""
        if id(sess) in self.stale or getattr(sess, "generation", self.generation) != self.generation:
            raise ErrSlotGenerationStale(f"the session belongs to generation {getattr(sess, 'generation', '?')}, "
                                         f"the slot is at {self.generation}")
        if sess.closed:
            raise sess._closed_err()
        return sess

    def describe(self, req: OpenSessionRequest) -> ModelInfo:
        with self._lock:
            self._check_type(req.type)
            if self.cell is None:
                raise ErrModelNotActive(f"the slot is {self.state}")
            return self.session_cls.model_info(self.cell, req.config, self.policy, self.kv_per_token)

    def embed(self, req: EmbedRequest) -> EmbedResult:
        with self._lock:
            self._check_type(req.type)
            if self.cell is None:
                raise ErrModelNotActive(f"the slot is {self.state}")
            from ..engine import ContextOverflow, UnsupportedFeature

            try:
                vec = self.cell.embed([req.text])[0]
            except UnsupportedFeature as e:
                raise ErrUnsupportedFeature(str(e)) from None
            except ContextOverflow as e:
                from .errors import ContextOverflowError

                raise ContextOverflowError("embed", 0, e.requested, e.limit) from None
            return EmbedResult(vector=[float(x) for x in vec])

    def list_models(self) -> list[NodeModel]:
        with self._lock:
            if self.cell is None:
                return [NodeModel(name=self.model_spec, type=self.backend)]
            return [NodeModel(name=self.model_spec, type=self.backend, digest=self.active.digest,
                              size_bytes=self.session_cls.model_bytes(self.cell),
                              context_length=self.session_cls.model_max_context(self.cell))]

    # ------------------------------------------------------------------ beside the contract

    def evidence(self) -> dict:
        """The daemon's own record (``workbench.transport.v1.Evidence/Daemon``): engine, model, slot, load and
        session-open stage times, the engine's cumulative work, what the adapter declares of itself."""
        with self._lock:
            d = self.cell.describe() if self.cell is not None else None
            return {"engine": self.engine, "engine_version": d.engine_version if d else "",
                    "model": self.model_spec, "model_digest": self.active.digest, "generation": self.generation,
                    "state": self.state, "backend": self.backend, "instance_id": self.instance_id,
                    "stages": [s.doc() for s in self.daemon_stages],
                    "engine_work": self.session_cls.work_of(self.cell) if self.cell is not None else None,
                    "declared": self.session_cls.declared(self.cell), "defer_prefill": self.defer_prefill,
                    "engine_kv_bytes_per_token": self._engine_kv_bytes(),
                    "faults": self.faults, "context_tokens": d.context_tokens if d else 0,
                    "block_tokens": d.block_tokens if d else 0,
                    "adapters": [dataclasses.asdict(a) for a in self.adapter_specs],
                    "sessions": len(self.sessions)}

    def _engine_kv_bytes(self) -> int | None:
        """The engine's own statement of its KV bytes per token (None where it states none)."""
        if self.cell is None:
            return None
        per_token, where = self.kv_per_token
        return per_token if where == "engine" else None

    def inject_fault(self, sess: CellSession) -> str:
        """An engine fault under ``sess``, through the engine's own API (only on a daemon started with faults on:
        the I1 probe's lever)."""
        if not self.faults:
            raise ErrUnsupportedFeature("fault injection is off on this daemon (start it with faults on)")
        return self.session_cls.inject_fault(self.cell, sess)

    def heal_fault(self) -> str:
        """Undo the fault, through the engine's own API, so the engine serves again (faults on only)."""
        if not self.faults:
            raise ErrUnsupportedFeature("fault injection is off on this daemon (start it with faults on)")
        with self._lock:
            if self.cell is None:
                raise ErrModelNotActive(f"the slot is {self.state}")
            return self.session_cls.heal_fault(self.cell)

    def kv_bytes_read(self) -> int | None:
        """The engine's KV bytes per token read again now, by another path than ``Describe``'s reading at load
        (:meth:`CellSession.kv_bytes_read`; on a cell slot no session holds); None where the engine states none.
        Kept out of :meth:`evidence`: a reading may make the engine work."""
        with self._lock:
            if self.cell is None:
                return None
            free = next((s for s in range(self.slots) if s not in self.sessions), None)
            return self.session_cls.kv_bytes_read(self.cell, free)


__all__ = ["DEFAULT_SLOTS", "SlotService", "adapter_identity"]
