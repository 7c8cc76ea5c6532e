"""modeld's wire over loopback, against the contract's own in-memory Service (``runtime/transport/memory.go``).

Each rule follows a file of ``runtime/transport/grpc/`` (contenox/runtime 7d0a257f): ``wire.go`` (service and method
names, payload keys, Decode as a server stream), ``fence.go`` (the owner metadata on every call but Health),
``errors.go`` (``token: message`` with the code, ErrorInfo for an overflow, Decode's errors in band), ``codec.go``
(the content subtype), ``limits.go`` (512 MiB), ``server.go`` (handles carry the owner; unknown ones are closed).
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from workbench.transport import errors as e
from workbench.transport import gojson, wire
from workbench.transport.contract import (Config, DecodeConfig, OpenSessionRequest, PrefixInput, StreamChunk,
                                          SuffixInput)
from workbench.transport.manifest import ManifestIdentity, chat_turn
from workbench.transport.memory import MemorySession, MemoryService
from workbench.transport.wire import Client, RemoteSession, Server


@pytest.fixture(scope="module")
def served():
    server = Server(MemoryService("owner-1"))
    port = server.start()
    client = Client("127.0.0.1", port)
    yield server, client, port
    client.close()
    server.stop()


def _turn(system: str = "hello world", user: str = "hi"):
    s, v, m = chat_turn([("system", system), ("user", user)], 1, ManifestIdentity(backend="x"))
    return PrefixInput(text=s, manifest=m), SuffixInput(text=v, manifest=m)


def test_the_names_are_wire_gos():
    assert wire.SERVICE == "contenox.transport.v1.Compute" and wire.CONTENT_TYPE == "application/grpc+contenoxtransportjson"
    assert wire.OWNER_KEY == "x-contenox-owner-instance" and wire.MAX_MESSAGE_BYTES == 512 * 1024 * 1024
    assert len(wire.UNARY) == 16 and wire.STREAMS == ("Decode", "PushModel")


def test_health_is_unfenced_and_names_the_instance_then_every_call_is_fenced(served):
    _, client, port = served
    h = client.health()
    assert (h.instance_id, h.ready, h.backend) == ("owner-1", True, "none") and client.owner == "owner-1"
    stale = Client("127.0.0.1", port, owner="someone-else")
    try:
        assert stale.health().instance_id == "owner-1"  # Health answers whatever the fence
        with pytest.raises(e.ErrStaleFence):
            stale.open_session(OpenSessionRequest())
        sess = client.open_session(OpenSessionRequest(config=Config(num_ctx=64)))
        assert sess.handle.startswith("owner-1/")  # server.go register: the owner in every handle
        with pytest.raises(e.ErrStaleFence):
            RemoteSession(stale, sess.handle).explain_context()
        with pytest.raises(e.ErrStaleFence):  # another owner's handle is a stale fence too (server.go lookup)
            RemoteSession(client, "owner-0/1").explain_context()
        with pytest.raises(e.ErrSessionClosed):
            RemoteSession(client, "owner-1/999").explain_context()
    finally:
        stale.close()


def test_a_turn_round_trips_with_go_keys_and_decode_streams_frames(served):
    _, client, _ = served
    pin, sin = _turn()
    sess = client.open_session(OpenSessionRequest(config=Config(num_ctx=64)))
    st = sess.ensure_prefix(pin)
    assert (st.prefix_tokens, st.manifest_digest) == (len(pin.text), pin.manifest.digest())
    assert sess.prefill_suffix(sin).suffix_tokens == len(sin.text)
    chunks = list(sess.decode(DecodeConfig(max_tokens=4)))
    assert [ch.text for ch in chunks] == ["x"] * 4  # one frame per chunk, as memory.go sends them
    assert sess.explain_context().resident_tokens == len(pin.text) + len(sin.text)
    sess.close()
    with pytest.raises(e.ErrSessionClosed):
        sess.explain_context()


def test_an_overflow_crosses_the_wire_with_its_code_and_a_service_without_a_slot_is_unsupported(served):
    _, client, _ = served
    sess = client.open_session(OpenSessionRequest(config=Config(num_ctx=4)))
    with pytest.raises(e.ErrContextOverflow):
        sess.ensure_prefix(_turn("far too long a system text")[0])
    with pytest.raises(e.ErrUnsupportedFeature):  # server.go controller(): no ModelController → unsupported
        client.status()


class _Overflowing:
    """A session whose every call overflows with its detail, and whose Decode ends in band with one."""

    def __getattr__(self, name):
        def call(*a, **k):
            raise e.ContextOverflowError("prefix", 3, 9, 8)
        return call

    def decode(self, cfg, cancelled=None):
        from workbench.transport.contract import StreamChunk

        yield StreamChunk(text="a")
        yield StreamChunk(error=e.ContextOverflowError("decode", 8, 1, 8))
        yield StreamChunk(text="never sent")


class _OverflowService(MemoryService):
    def open_session(self, req):
        return _Overflowing()


def test_overflow_detail_comes_back_as_error_info_and_decode_errors_come_in_band():
    server = Server(_OverflowService("o"))
    port = server.start()
    client = Client("127.0.0.1", port)
    try:
        sess = client.open_session(OpenSessionRequest())
        with pytest.raises(e.ContextOverflowError) as got:
            sess.ensure_prefix(_turn()[0])
        assert (got.value.overflow.stage, got.value.overflow.resident_tokens, got.value.overflow.additional_tokens,
                got.value.overflow.num_ctx) == ("prefix", 3, 9, 8)
        chunks = list(sess.decode(DecodeConfig(max_tokens=3)))
        assert chunks[0].text == "a" and len(chunks) == 2  # the stream ends after its error (server.go decode)
        assert isinstance(chunks[1].error, e.ContextOverflowError) and chunks[1].error.overflow.stage == "decode"
    finally:
        client.close()
        server.stop()


def test_the_client_sends_the_json_content_subtype_a_strict_server_requires():
    """grpclib's server answers 415 unless the request's content subtype is its codec's: Health through it proves
    the client sends ``application/grpc+contenoxtransportjson`` (codec.go), as a Go modeld needs."""
    from grpclib.const import Cardinality, Handler
    from grpclib.server import Server as StrictServer

    class Compute:
        def __mapping__(self):
            async def health(stream):
                await stream.recv_message()
                await stream.send_message(gojson.marshal(wire.HealthResp("go-modeld", True, "llama")))
            return {wire.method("Health"): Handler(health, Cardinality.UNARY_UNARY, None, None)}

    loop = asyncio.new_event_loop()
    t = threading.Thread(target=loop.run_forever, daemon=True)
    t.start()

    async def make():  # made inside its loop: grpclib binds the running loop
        s = StrictServer([Compute()], codec=wire._codec())
        await s.start("127.0.0.1", 0)
        return s

    strict = asyncio.run_coroutine_threadsafe(make(), loop).result(10)
    try:
        client = Client("127.0.0.1", strict._server.sockets[0].getsockname()[1], timeout=10)
        assert client.owner == "go-modeld"
        client.close()
    finally:
        loop.call_soon_threadsafe(strict.close)
        asyncio.run_coroutine_threadsafe(strict.wait_closed(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        t.join(5)


class _Gated(MemorySession):
    """Streams one frame, then waits for the test before the rest (a Decode still running when the daemon stops)."""

    first = threading.Event()
    release = threading.Event()

    def decode(self, cfg, cancelled=None):
        yield StreamChunk(text="a")
        _Gated.first.set()
        _Gated.release.wait(30)
        for piece in "bcde":
            yield StreamChunk(text=piece)


class _GatedService(MemoryService):
    def open_session(self, req):
        return _Gated(req.config.num_ctx)


def test_a_stop_lets_the_stream_in_flight_finish_and_refuses_new_calls():
    """Go's Serve stops with GracefulStop: no new call is taken, the ones in flight run to their end. A Decode
    under way when the daemon is told to stop (SIGTERM: serve_forever → Daemon.stop → Server.stop) gets every frame
    and a clean end; a call made meanwhile is Unavailable."""
    server = Server(_GatedService("o"))
    port = server.start()
    client, late = Client("127.0.0.1", port), Client("127.0.0.1", port)
    got: list = []
    try:
        sess = client.open_session(OpenSessionRequest())
        reader = threading.Thread(target=lambda: got.extend(sess.decode(DecodeConfig(max_tokens=5))))
        reader.start()
        assert _Gated.first.wait(30)
        stopper = threading.Thread(target=server.stop)
        stopper.start()
        refused = None
        for _ in range(600):  # until the stop has begun: then a new call is refused, not served
            try:
                late.health()
            except Exception as err:  # noqa: BLE001 - the refusal is the reading
                refused = err
                break
            threading.Event().wait(0.05)
        _Gated.release.set()
        reader.join(30)
        stopper.join(30)
        assert refused is not None and "transport is closing" in str(refused)
        assert [c.text for c in got] == list("abcde") and all(c.error is None for c in got)
    finally:
        _Gated.release.set()
        client.close()
        late.close()
        server.stop()


def test_enable_thinking_false_is_on_the_wire_as_go_writes_a_non_nil_bool_pointer():
    """``SuffixInput.EnableThinking`` is a ``*bool`` with omitempty (``runtime/transport/session.go``): Go omits it
    only when nil, so false is written; read back, it is false, not unset."""
    m = _turn()[1].manifest
    for value, key in ((False, b'"EnableThinking":false'), (True, b'"EnableThinking":true')):
        raw = gojson.marshal(SuffixInput(text="hi", manifest=m, enable_thinking=value))
        assert key in raw and gojson.unmarshal(SuffixInput, raw).enable_thinking is value
    assert b"EnableThinking" not in gojson.marshal(SuffixInput(text="hi", manifest=m))
