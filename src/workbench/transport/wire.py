"""modeld's wire: ``contenox.transport.v1.Compute`` over gRPC with a JSON codec, as ``runtime/transport/grpc/`` serves it.

What the Go side does, and so this module (contenox/runtime 7d0a257f, each file cited where its rule is used):

* ``wire.go``: the service name, the methods (16 unary, ``Decode`` server-streaming, ``PushModel`` client-streaming)
  and the wire payloads (``openSessionReq`` …, ``wireChunk``), tagged as Go tags them;
* ``codec.go``: payloads are ``json.Marshal``/``json.Unmarshal`` of those structs under the content subtype
  ``contenoxtransportjson`` (content-type ``application/grpc+contenoxtransportjson``);
* ``fence.go``: every call but ``Health`` must carry ``x-contenox-owner-instance`` equal to the daemon's instance id
  (exactly one value), else ``ErrStaleFence``; a session handle minted by another owner is a stale fence too;
* ``errors.go``: a contract error is a gRPC status with its code and ``"<token>: <text>"``, a context overflow with a
  ``google.rpc.ErrorInfo`` detail (domain ``contenox.transport``); ``Decode`` carries its errors in band
  (``error``, ``error_token``, ``error_detail``) and ends the stream after one;
* ``limits.go``: 512 MiB each way;
* ``server.go``: handles are ``<instance>/<generation>/<seq>``; an unknown handle is ``ErrSessionClosed``.

The server is grpcio with generic handlers (no ``.proto``, as the Go bindings have none); grpcio accepts any
``application/grpc+…`` request and answers ``application/grpc``, which grpc-go's client accepts (it checks the response
content-type is gRPC and decodes with the codec the call chose). The client is grpclib with a codec that sends the
content subtype, since grpcio's client cannot set one (a Go server would otherwise decode with protobuf). The Go client
itself cannot be built here (Go 1.25 and no module proxy); ``docs/transport.md`` says what that leaves unproven.

Beside ``Compute`` the daemon serves ``workbench.transport.v1.Evidence`` (fenced the same way): what a conformance
probe reads that the contract does not carry (the engine's own counters, the stage times, a fault lever that is off
unless the daemon was started with it). It is the workbench's, never modeld's.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import queue as queue_mod
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from . import gojson
from .contract import (ActiveModel, Config, ContextOverflowDetail, ContextReport, DaemonStatus, DecodeConfig,
                       EmbedRequest, LoadModelRequest, ModelInfo, NodeModel, OpenSessionRequest, PrefixInput,
                       PrefixStatus, SessionSnapshot, StreamChunk, SuffixInput, SuffixStatus, ToolCall,
                       UnloadModelRequest)
from .errors import (ErrSessionClosed, ErrStaleFence, ErrUnsupportedFeature, TransportError, decode, decode_wire,
                     encode, overflow_detail, token_of)
from .gojson import go
from .manifest import AdapterSpec

SERVICE = "contenox.transport.v1.Compute"  # wire.go serviceName
EVIDENCE_SERVICE = "workbench.transport.v1.Evidence"  # the workbench's, beside modeld's
CODEC = "contenoxtransportjson"  # codec.go codecName
CONTENT_TYPE = f"application/grpc+{CODEC}"
OWNER_KEY = "x-contenox-owner-instance"  # fence.go ownerMetadataKey
AUTH_KEY = "authorization"  # the workbench's API key, only on a daemon bound beyond loopback
MAX_MESSAGE_BYTES = 512 << 20  # limits.go maxTransportMessageBytes
UNARY = ("Health", "Status", "LoadModel", "UnloadModel", "OpenSession", "Describe", "Embed", "EnsurePrefix",
         "PrefillSuffix", "ExplainContext", "Snapshot", "Restore", "CloseSession", "ListModels", "RemoveModel",
         "DiskStats")
STREAMS = ("Decode", "PushModel")
UNAUTHENTICATED = 16
UNAVAILABLE = 14
SETTLE_S = 0.5  # after a drain: time for a client to read a stream's last bytes before the daemon's socket closes
DRAIN_S = 120.0
"""How long :meth:`Server.stop` lets calls in flight finish (a Decode stream to its end) before it closes: Go's
``GracefulStop`` waits for every one (``server.go``); a daemon told to stop must not hang on one forever."""


def method(name: str, service: str = SERVICE) -> str:
    return f"/{service}/{name}"


# --------------------------------------------------------------------------- wire payloads (wire.go)


@dataclass
class OpenSessionReq:
    owner_instance_id: str = go("owner_instance_id", "", omitempty=True)
    model_name: str = go("model_name", "", omitempty=True)
    type: str = go("type", "", omitempty=True)
    digest: str = go("digest", "", omitempty=True)
    path: str = go("path", "", omitempty=True)
    config: Config = go("config", factory=Config)
    adapters: list[AdapterSpec] | None = go("adapters", None, omitempty=True)

    @classmethod
    def of(cls, r: OpenSessionRequest) -> "OpenSessionReq":
        return cls(r.owner_instance_id, r.model_name, r.type, r.digest, r.path, r.config, r.adapters)

    def request(self) -> OpenSessionRequest:
        return OpenSessionRequest(self.owner_instance_id, self.model_name, self.type, self.digest, self.path,
                                  self.config, self.adapters)


@dataclass
class OpenSessionResp:
    handle: str = go("handle", "")


@dataclass
class OwnerReq:
    """``statusReq``, ``listModelsReq``, ``diskStatsReq``."""

    owner_instance_id: str = go("owner_instance_id", "", omitempty=True)


@dataclass
class LoadModelReq:
    owner_instance_id: str = go("owner_instance_id", "", omitempty=True)
    model_name: str = go("model_name", "", omitempty=True)
    type: str = go("type", "", omitempty=True)
    digest: str = go("digest", "", omitempty=True)
    path: str = go("path", "", omitempty=True)
    config: Config = go("config", factory=Config)
    adapters: list[AdapterSpec] | None = go("adapters", None, omitempty=True)
    expected_generation: int = go("expected_generation", 0, omitempty=True)


@dataclass
class UnloadModelReq:
    owner_instance_id: str = go("owner_instance_id", "", omitempty=True)
    expected_generation: int = go("expected_generation", 0, omitempty=True)


@dataclass
class Empty:
    """``unloadModelResp``, ``restoreResp``, ``closeResp``, ``removeModelResp``, ``healthReq``."""


@dataclass
class EmbedReq:
    owner_instance_id: str = go("owner_instance_id", "", omitempty=True)
    model_name: str = go("model_name", "", omitempty=True)
    type: str = go("type", "", omitempty=True)
    digest: str = go("digest", "", omitempty=True)
    path: str = go("path", "", omitempty=True)
    config: Config = go("config", factory=Config)
    text: str = go("text", "")


@dataclass
class EmbedResp:
    vector: list[float] | None = go("vector", None, omitempty=True, kind="float32")


@dataclass
class EnsurePrefixReq:
    handle: str = go("handle", "")
    prefix: PrefixInput = go("prefix", factory=PrefixInput)


@dataclass
class PrefillSuffixReq:
    handle: str = go("handle", "")
    suffix: SuffixInput = go("suffix", factory=SuffixInput)


@dataclass
class DecodeReq:
    handle: str = go("handle", "")
    config: DecodeConfig = go("config", factory=DecodeConfig)


@dataclass
class HandleReq:
    """``explainReq``, ``snapshotReq``, ``closeReq``."""

    handle: str = go("handle", "")


@dataclass
class RestoreReq:
    handle: str = go("handle", "")
    snapshot: SessionSnapshot = go("snapshot", factory=SessionSnapshot)


@dataclass
class ListModelsResp:
    models: list[NodeModel] | None = go("models", None, omitempty=True)


@dataclass
class RemoveModelReq:
    owner_instance_id: str = go("owner_instance_id", "", omitempty=True)
    name: str = go("name", "")


@dataclass
class HealthResp:
    instance_id: str = go("instance_id", "", omitempty=True)
    ready: bool = go("ready", False)
    backend: str = go("backend", "", omitempty=True)


@dataclass
class WireChunk:
    """``wireChunk``: the JSON-safe ``StreamChunk`` (its error as text, token and overflow detail)."""

    text: str = go("text", "", omitempty=True)
    thinking: str = go("thinking", "", omitempty=True)
    tool_calls: list[ToolCall] | None = go("tool_calls", None, omitempty=True)
    error: str = go("error", "", omitempty=True)
    error_token: str = go("error_token", "", omitempty=True)
    error_detail: ContextOverflowDetail | None = go("error_detail", None, omitempty=True)


# --------------------------------------------------------------------------- the server


class _Aborted(Exception):
    """Raised by the handlers to end a call with a status (grpcio's ``context.abort`` raises its own)."""


STATUS_DETAILS = "grpc-status-details-bin"


def _details_bin(reason: str, metadata: tuple[tuple[str, str], ...], code: int, message: str) -> bytes:
    """``google.rpc.Status`` with one ``ErrorInfo`` (errors.go ``errorInfoForOverflow``), serialized as gRPC carries
    it in the ``grpc-status-details-bin`` trailer (what grpc-go's ``status.WithDetails`` sends)."""
    from google.protobuf import any_pb2
    from google.rpc import error_details_pb2, status_pb2

    packed = any_pb2.Any()
    packed.Pack(error_details_pb2.ErrorInfo(reason=reason, domain="contenox.transport", metadata=dict(metadata)))
    return status_pb2.Status(code=code, message=message, details=[packed]).SerializeToString()


class Server:
    """Serves a :class:`~workbench.transport.service.SlotService` (or any object with its methods) on modeld's wire.
    ``api_key``: every call but Health must carry ``authorization: Bearer <key>`` (a daemon bound beyond loopback)."""

    def __init__(self, service: Any, *, api_key: str | None = None, fence: bool = True, workers: int = 8) -> None:
        self.service = service
        self.instance_id: str = service.instance_id
        self.api_key = api_key
        self.fence = fence
        self.workers = workers
        self._seq = itertools.count(1)
        self._lock = threading.Lock()
        self.sessions: dict[str, Any] = {}
        self._server: Any = None
        self.port = 0
        self._idle = threading.Condition()  # calls in flight, and whether the server has begun to stop
        self._calls = 0
        self._closing = False

    # ---- calls in flight (a graceful stop waits for them)

    def _admit(self, context: Any) -> None:
        """Count a call in until gRPC has ended it (its status sent: ``add_callback`` runs on termination), or refuse
        it once the server is stopping (``Unavailable``, as a Go client sees a server in ``GracefulStop``)."""
        with self._idle:
            if not self._closing:
                self._calls += 1
                admitted = True
            else:
                admitted = False
        if not admitted:
            context.abort(_code(UNAVAILABLE), "transport is closing")
        if not context.add_callback(self._done):  # it has ended already
            self._done()

    def _done(self) -> None:
        with self._idle:
            self._calls -= 1
            self._idle.notify_all()

    def _tracked(self, handler: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
        """A unary (or client-streaming) handler counted in flight until its call has ended."""
        def tracked(request: Any, context: Any) -> Any:
            self._admit(context)
            return handler(request, context)
        return tracked

    # ---- plumbing

    def _abort(self, context: Any, err: BaseException) -> None:
        """``encodeError`` on the call: its code and ``token: text``, an overflow's ErrorInfo in the status details."""
        ws = encode(err)
        if ws.reason:
            context.set_trailing_metadata(((STATUS_DETAILS, _details_bin(ws.reason, ws.metadata, ws.code,
                                                                         ws.message)),))
        context.abort(_code(ws.code), ws.message)

    def _guard(self, context: Any) -> None:
        md = context.invocation_metadata() or ()
        if self.api_key is not None:
            auth = [v for k, v in md if k == AUTH_KEY]
            if auth != [f"Bearer {self.api_key}"]:
                context.abort(_code(UNAUTHENTICATED), "unauthenticated: this daemon needs its API key "
                                                      "(metadata authorization: Bearer KEY)")
        if self.fence and self.instance_id:  # fence.go checkFence: exactly one value, equal to the instance id
            vals = [v for k, v in md if k == OWNER_KEY]
            if len(vals) != 1 or vals[0] != self.instance_id:
                self._abort(context, ErrStaleFence())

    def _lookup(self, handle: str) -> Any:
        """server.go ``lookup``: another owner's handle is a stale fence; an unknown one a closed session."""
        if self.fence and self.instance_id and not handle.startswith(self.instance_id + "/"):
            raise ErrStaleFence()
        with self._lock:
            sess = self.sessions.get(handle)
        if sess is None:
            raise ErrSessionClosed()
        check = getattr(self.service, "check_session", None)
        return check(sess) if check is not None else sess

    def _register(self, sess: Any) -> str:
        gen = getattr(sess, "generation", 0)
        seq = next(self._seq)
        handle = f"{self.instance_id}/{gen}/{seq}" if gen else f"{self.instance_id}/{seq}"
        with self._lock:
            self.sessions[handle] = sess
        return handle

    def _unary(self, name: str, req_type: type | None, call: Callable[[Any], Any], *, fenced: bool = True) -> Any:
        import grpc

        def handler(raw: bytes, context: Any) -> bytes:
            if fenced:
                self._guard(context)
            try:
                req = gojson.unmarshal(req_type, raw) if req_type is not None else None
            except gojson.GoJSONError as e:
                context.abort(grpc.StatusCode.INTERNAL, f"grpc: error unmarshalling request: {e}")
            try:
                return gojson.marshal(call(req))
            except TransportError as e:
                self._abort(context, e)
            except Exception as e:  # noqa: BLE001 - anything else is Go's "internal: …" (server.go recover)
                self._abort(context, e)

        return grpc.unary_unary_rpc_method_handler(self._tracked(handler), request_deserializer=None,
                                                   response_serializer=None)

    # ---- Compute

    def _open(self, req: OpenSessionReq) -> OpenSessionResp:
        return OpenSessionResp(self._register(self.service.open_session(req.request())))

    def _close(self, req: HandleReq) -> Empty:
        with self._lock:
            sess = self.sessions.pop(req.handle, None)
        if sess is not None:
            sess.close()
        return Empty()

    def _snapshot(self, req: HandleReq) -> SessionSnapshot:
        snap = self._lookup(req.handle).snapshot()
        if snap.state:
            snap.state_id = f"{self.instance_id}-state-{next(self._seq)}"
            self.service.states[snap.state_id] = snap.state
        return snap

    def _restore(self, req: RestoreReq) -> Empty:
        snap = req.snapshot
        if snap.state_id:
            snap.state = self.service.states.get(snap.state_id)
        self._lookup(req.handle).restore(snap)
        return Empty()

    def _describe(self, req: OpenSessionReq) -> ModelInfo:
        return self.service.describe(req.request())

    def _embed(self, req: EmbedReq) -> Any:
        res = self.service.embed(EmbedRequest(req.owner_instance_id, req.model_name, req.type, req.digest, req.path,
                                              req.config, req.text))
        return EmbedResp(res.vector)

    def _load(self, req: LoadModelReq) -> ActiveModel:
        owner = req.owner_instance_id or self.instance_id
        return self.service.load_model(LoadModelRequest(owner, req.model_name, req.type, req.digest, req.path,
                                                        req.config, req.adapters, req.expected_generation))

    def _unload(self, req: UnloadModelReq) -> Empty:
        self.service.unload_model(UnloadModelRequest(req.owner_instance_id or self.instance_id,
                                                     req.expected_generation))
        return Empty()

    def _status(self, _: OwnerReq) -> DaemonStatus:
        st = self.service.status()
        st.owner_instance_id = st.owner_instance_id or self.instance_id
        return st

    def _unsupported(self, what: str) -> Callable[[Any], Any]:
        def call(_: Any) -> Any:
            raise ErrUnsupportedFeature(f"{what}: this daemon's store holds the one model it was started with")
        return call

    def _decode_handler(self) -> Any:
        import grpc

        def handler(raw: bytes, context: Any) -> Iterator[bytes]:
            self._guard(context)
            try:
                req = gojson.unmarshal(DecodeReq, raw)
                sess = self._lookup(req.handle)
            except gojson.GoJSONError as e:
                context.abort(grpc.StatusCode.INTERNAL, f"grpc: error unmarshalling request: {e}")
            except TransportError as e:
                self._abort(context, e)
            cancelled = threading.Event()
            context.add_callback(cancelled.set)
            for chunk in sess.decode(req.config, cancelled):
                yield gojson.marshal(wire_chunk(chunk))
                if chunk.error is not None:
                    return

        def tracked(raw: bytes, context: Any) -> Iterator[bytes]:  # in flight until its status is sent
            self._admit(context)
            yield from handler(raw, context)

        return grpc.unary_stream_rpc_method_handler(tracked)

    def _push_handler(self) -> Any:
        import grpc

        def handler(requests: Iterator[bytes], context: Any) -> bytes:
            self._guard(context)
            self._abort(context, ErrUnsupportedFeature("PushModel: this daemon's store holds the one model it was "
                                                       "started with"))

        return grpc.stream_unary_rpc_method_handler(self._tracked(handler))

    def handlers(self) -> dict[str, Any]:
        s = self.service
        out = {
            "Health": self._unary("Health", None, lambda _: HealthResp(self.instance_id, True, s.backend),
                                  fenced=False),
            "Status": self._unary("Status", OwnerReq, self._status),
            "LoadModel": self._unary("LoadModel", LoadModelReq, self._load),
            "UnloadModel": self._unary("UnloadModel", UnloadModelReq, self._unload),
            "OpenSession": self._unary("OpenSession", OpenSessionReq, self._open),
            "Describe": self._unary("Describe", OpenSessionReq, self._describe),
            "Embed": self._unary("Embed", EmbedReq, self._embed),
            "EnsurePrefix": self._unary("EnsurePrefix", EnsurePrefixReq,
                                        lambda r: self._lookup(r.handle).ensure_prefix(r.prefix)),
            "PrefillSuffix": self._unary("PrefillSuffix", PrefillSuffixReq,
                                         lambda r: self._lookup(r.handle).prefill_suffix(r.suffix)),
            "ExplainContext": self._unary("ExplainContext", HandleReq,
                                          lambda r: self._lookup_any(r.handle).explain_context()),
            "Snapshot": self._unary("Snapshot", HandleReq, self._snapshot),
            "Restore": self._unary("Restore", RestoreReq, self._restore),
            "CloseSession": self._unary("CloseSession", HandleReq, self._close),
            "ListModels": self._unary("ListModels", OwnerReq, lambda _: ListModelsResp(s.list_models() or None)),
            "RemoveModel": self._unary("RemoveModel", RemoveModelReq, self._unsupported("RemoveModel")),
            "DiskStats": self._unary("DiskStats", OwnerReq, self._unsupported("DiskStats")),
            "Decode": self._decode_handler(),
            "PushModel": self._push_handler(),
        }
        assert set(out) == set(UNARY) | set(STREAMS)
        return out

    def _lookup_any(self, handle: str) -> Any:
        """ExplainContext answers for a closed or fatal session too (its report says Closed and FatalError), as
        modeld's server keeps a session until CloseSession; only another owner's or an unknown handle is refused."""
        if self.fence and self.instance_id and not handle.startswith(self.instance_id + "/"):
            raise ErrStaleFence()
        with self._lock:
            sess = self.sessions.get(handle)
        if sess is None:
            raise ErrSessionClosed()
        return sess

    # ---- Evidence (the workbench's, beside modeld's)

    def _evidence_handlers(self) -> dict[str, Any]:
        import grpc

        def unary(call: Callable[[dict], Any]) -> Any:
            def handler(raw: bytes, context: Any) -> bytes:
                self._guard(context)
                try:
                    return json.dumps(call(json.loads(raw or b"{}"))).encode()
                except TransportError as e:
                    self._abort(context, e)
            return grpc.unary_unary_rpc_method_handler(self._tracked(handler))

        return {"Daemon": unary(lambda _: self.service.evidence()),
                "Session": unary(lambda r: self._lookup_any(r["handle"]).evidence()),
                "KvBytes": unary(lambda _: {"bytes_per_token": self.service.kv_bytes_read()}),
                "Fault": unary(lambda r: {"done": self.service.inject_fault(self._lookup(r["handle"]))}),
                "Heal": unary(lambda _: {"done": self.service.heal_fault()})}

    # ---- lifecycle

    def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        import grpc
        from concurrent import futures

        self._closing = False
        opts = [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES), ("grpc.so_reuseport", 0)]
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=self.workers,
                                                              thread_name_prefix="transport"), options=opts)
        self._server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, self.handlers()),
                                               grpc.method_handlers_generic_handler(EVIDENCE_SERVICE,
                                                                                    self._evidence_handlers())))
        addr = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self.port = self._server.add_insecure_port(addr)
        if not self.port:
            raise OSError(f"cannot bind {addr}")
        self._server.start()
        return self.port

    def stop(self, grace: float | None = 1.0, drain_s: float = DRAIN_S) -> None:
        """Stop gracefully, as Go's ``GracefulStop``: refuse new calls (``Unavailable``), let the calls in flight
        finish (a Decode stream to its last frame; at most ``drain_s`` seconds), then stop the server (``grace``
        seconds for what is left) and close every session. gRPC's own stop is not enough: its GOAWAY ends a
        grpclib client's streams at once."""
        with self._idle:
            self._closing = True
            drained = self._calls > 0
            deadline = time.monotonic() + drain_s
            while self._calls and (left := deadline - time.monotonic()) > 0:
                self._idle.wait(left)
        if drained:  # the last frames and the status are written; let the client read them before the socket goes
            time.sleep(SETTLE_S)
        if self._server is not None:
            self._server.stop(grace).wait()
            self._server = None
        with self._lock:
            sessions, self.sessions = list(self.sessions.values()), {}
        for sess in sessions:
            try:
                sess.close()
            except Exception:  # noqa: BLE001 - stopping: a session that cannot close is gone with the engine
                pass


def _code(n: int) -> Any:
    import grpc

    return next(c for c in grpc.StatusCode if c.value[0] == n)


def wire_chunk(c: StreamChunk) -> WireChunk:
    """``decode`` in server.go: a chunk's error as text, its token and its overflow detail."""
    w = WireChunk(text=c.text, thinking=c.thinking, tool_calls=c.tool_calls)
    if c.error is not None:
        w.error, w.error_token, w.error_detail = str(c.error), token_of(c.error), overflow_detail(c.error)
    return w


# --------------------------------------------------------------------------- the client


def _codec() -> Any:
    from grpclib.encoding.base import CodecBase

    class JsonCodec(CodecBase):
        """Bytes through, under the content subtype modeld's server selects its JSON codec by."""

        __content_subtype__ = CODEC

        def encode(self, message: Any, message_type: Any) -> bytes:
            return message

        def decode(self, data: bytes, message_type: Any) -> bytes:
            return data

    return JsonCodec()


def _accept_grpc_response(stream: Any) -> None:
    """grpclib's client wants the response's content subtype to be the codec's; grpc-go's client only checks that it
    is gRPC (``grpcutil.ContentSubtype``) and decodes with the codec the call chose, and grpcio's server answers
    ``application/grpc`` whatever the request's subtype. This client reads responses as grpc-go does: any
    ``application/grpc`` or ``application/grpc+…`` is gRPC; anything else is refused as grpclib refuses it."""
    from grpclib.exceptions import GRPCError
    from grpclib.const import Status

    def check(headers_map: dict) -> None:
        content_type = headers_map.get("content-type")
        if content_type is None:
            raise GRPCError(Status.UNKNOWN, "Missing content-type header")
        if content_type != "application/grpc" and not content_type.startswith("application/grpc+"):
            raise GRPCError(Status.UNKNOWN, f"Invalid content-type: {content_type!r}")

    stream._raise_for_content_type = check


@dataclass
class Health:
    instance_id: str
    ready: bool
    backend: str


class Client:
    """A client of modeld's wire (a Go modeld or this workbench's daemon): ``Health`` unfenced first, then every
    call fenced with the instance it returned (or ``owner``). Synchronous; its event loop runs in a thread of its
    own, so a probe, a notebook and a test drive it as plain calls."""

    def __init__(self, host: str, port: int, *, owner: str | None = None, api_key: str | None = None,
                 timeout: float = 600.0) -> None:
        self.host, self.port, self.timeout = host, port, timeout
        self.api_key = api_key
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="transport-client", daemon=True)
        self._thread.start()
        self._channel = self._call(self._make_channel())
        self.owner = owner if owner is not None else self.health().instance_id

    async def _make_channel(self) -> Any:
        from google.rpc import error_details_pb2  # noqa: F401 - registers ErrorInfo, so the details decode to it
        from grpclib.client import Channel
        from grpclib.encoding.proto import ProtoStatusDetailsCodec

        return Channel(self.host, self.port, codec=_codec(), status_details_codec=ProtoStatusDetailsCodec())

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(self.timeout)

    def close(self) -> None:
        if self._loop.is_closed():
            return

        async def shut() -> None:
            self._channel.close()

        try:
            self._call(shut())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)
            self._loop.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def metadata(self, fenced: bool = True) -> dict[str, str]:
        md = {}
        if fenced and self.owner:
            md[OWNER_KEY] = self.owner
        if self.api_key is not None:
            md[AUTH_KEY] = f"Bearer {self.api_key}"
        return md

    async def _unary_raw(self, name: str, body: bytes, fenced: bool, service: str) -> bytes:
        from grpclib.const import Cardinality
        from grpclib.exceptions import GRPCError

        try:
            async with self._channel.request(method(name, service), Cardinality.UNARY_UNARY, None, None,
                                             metadata=self.metadata(fenced), timeout=self.timeout) as stream:
                _accept_grpc_response(stream)
                await stream.send_message(body, end=True)
                reply = await stream.recv_message()
                await stream.recv_trailing_metadata()
                return reply or b""
        except GRPCError as e:
            raise _decode_status(e) from None

    def unary(self, name: str, req: Any, reply_type: type | None, *, fenced: bool = True) -> Any:
        raw = self._call(self._unary_raw(name, gojson.marshal(req) if req is not None else b"{}", fenced, SERVICE))
        return gojson.unmarshal(reply_type, raw) if reply_type is not None else None

    def evidence(self, name: str, body: dict | None = None) -> dict:
        raw = self._call(self._unary_raw(name, json.dumps(body or {}).encode(), True, EVIDENCE_SERVICE))
        return json.loads(raw or b"{}")

    # ---- Compute

    def health(self) -> Health:
        h = self.unary("Health", Empty(), HealthResp, fenced=False)
        return Health(h.instance_id, h.ready, h.backend)

    def status(self) -> DaemonStatus:
        return self.unary("Status", OwnerReq(self.owner or ""), DaemonStatus)

    def load_model(self, req: LoadModelRequest) -> ActiveModel:
        return self.unary("LoadModel", LoadModelReq(req.owner_instance_id or self.owner or "", req.model_name,
                                                    req.type, req.digest, req.path, req.config, req.adapters,
                                                    req.expected_generation), ActiveModel)

    def unload_model(self, req: UnloadModelRequest) -> None:
        self.unary("UnloadModel", UnloadModelReq(req.owner_instance_id or self.owner or "",
                                                 req.expected_generation), None)

    def open_session(self, req: OpenSessionRequest) -> "RemoteSession":
        if not req.owner_instance_id:
            req.owner_instance_id = self.owner or ""
        return RemoteSession(self, self.unary("OpenSession", OpenSessionReq.of(req), OpenSessionResp).handle)

    def describe(self, req: OpenSessionRequest) -> ModelInfo:
        if not req.owner_instance_id:
            req.owner_instance_id = self.owner or ""
        return self.unary("Describe", OpenSessionReq.of(req), ModelInfo)

    def embed(self, req: EmbedRequest) -> list[float]:
        body = EmbedReq(req.owner_instance_id or self.owner or "", req.model_name, req.type, req.digest, req.path,
                        req.config, req.text)
        return list(self.unary("Embed", body, EmbedResp).vector or [])

    def list_models(self) -> list[NodeModel]:
        return list(self.unary("ListModels", OwnerReq(self.owner or ""), ListModelsResp).models or [])

    def decode_stream(self, handle: str, cfg: DecodeConfig) -> Iterator[StreamChunk]:
        """``Decode``: each frame as it arrives; an in-band error comes back as the chunk's ``error``."""
        q: "queue_mod.Queue[Any]" = queue_mod.Queue()

        async def pump() -> None:
            from grpclib.const import Cardinality
            from grpclib.exceptions import GRPCError

            try:
                async with self._channel.request(method("Decode"), Cardinality.UNARY_STREAM, None, None,
                                                 metadata=self.metadata(), timeout=self.timeout) as stream:
                    _accept_grpc_response(stream)
                    await stream.send_message(gojson.marshal(DecodeReq(handle, cfg)), end=True)
                    async for raw in stream:
                        q.put(gojson.unmarshal(WireChunk, raw))
            except GRPCError as e:
                q.put(_decode_status(e))
            except BaseException as e:  # noqa: BLE001 - carried to the caller's thread
                q.put(e)
            finally:
                q.put(None)

        fut = asyncio.run_coroutine_threadsafe(pump(), self._loop)
        try:
            while (item := q.get(timeout=self.timeout)) is not None:
                if isinstance(item, BaseException):
                    yield StreamChunk(error=item)
                    continue
                err = decode_wire(item.error_token, item.error, item.error_detail)
                yield StreamChunk(text=item.text, thinking=item.thinking, tool_calls=item.tool_calls, error=err)
        finally:
            if not fut.done():
                fut.cancel()


def _decode_status(e: Any) -> BaseException:
    """``decodeError`` on a grpclib error: the token's sentinel, an overflow with its ErrorInfo detail."""
    info = None
    for d in e.details or ():
        if getattr(d, "reason", "") == "context_overflow" and hasattr(d, "metadata"):
            info = dict(d.metadata)
    return decode(int(e.status.value), e.message or "", info)


@dataclass
class RemoteSession:
    """A session on the other end of the wire, addressed by its opaque handle."""

    client: Client
    handle: str
    chunks: list[StreamChunk] = field(default_factory=list)

    def ensure_prefix(self, prefix: PrefixInput) -> PrefixStatus:
        return self.client.unary("EnsurePrefix", EnsurePrefixReq(self.handle, prefix), PrefixStatus)

    def prefill_suffix(self, suffix: SuffixInput) -> SuffixStatus:
        return self.client.unary("PrefillSuffix", PrefillSuffixReq(self.handle, suffix), SuffixStatus)

    def decode(self, cfg: DecodeConfig) -> Iterator[StreamChunk]:
        return self.client.decode_stream(self.handle, cfg)

    def explain_context(self) -> ContextReport:
        return self.client.unary("ExplainContext", HandleReq(self.handle), ContextReport)

    def snapshot(self) -> SessionSnapshot:
        return self.client.unary("Snapshot", HandleReq(self.handle), SessionSnapshot)

    def restore(self, snap: SessionSnapshot) -> None:
        self.client.unary("Restore", RestoreReq(self.handle, snap), None)

    def close(self) -> None:
        self.client.unary("CloseSession", HandleReq(self.handle), None)

    def evidence(self) -> dict:
        return self.client.evidence("Session", {"handle": self.handle})

    def fault(self) -> dict:
        return self.client.evidence("Fault", {"handle": self.handle})


__all__ = ["CODEC", "CONTENT_TYPE", "Client", "EVIDENCE_SERVICE", "Health", "MAX_MESSAGE_BYTES", "OWNER_KEY",
           "RemoteSession", "SERVICE", "STREAMS", "Server", "UNARY", "WireChunk", "method", "wire_chunk"]
