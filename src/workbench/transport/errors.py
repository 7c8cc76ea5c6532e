"""The contract's canonical errors (``runtime/transport/session.go``) and their wire form (``transport/grpc/errors.go``).

Each Go sentinel is a class named as Go names it (``ErrStaleFence``, ``ErrContextOverflow`` …), carrying its wire token
and gRPC status code from ``errors.go``'s ``sentinels`` table; the message on the wire is ``"<token>: <error text>"``,
and a context overflow also carries a ``google.rpc.ErrorInfo`` detail (domain ``contenox.transport``, metadata
``stage``, ``resident_tokens``, ``additional_tokens``, ``num_ctx``). :func:`encode` and :func:`decode` are
``encodeError``/``decodeError``; an error that is none of these is ``internal: <text>`` with code Internal.
"""

from __future__ import annotations

from dataclasses import dataclass

from .contract import ContextOverflowDetail
from .manifest import ManifestMismatchError

# gRPC status codes (google.golang.org/grpc/codes), by number, so this module needs no grpc import
OK, CANCELLED, UNKNOWN, INVALID_ARGUMENT, DEADLINE_EXCEEDED, NOT_FOUND = 0, 1, 2, 3, 4, 5
RESOURCE_EXHAUSTED, FAILED_PRECONDITION, ABORTED, UNIMPLEMENTED, INTERNAL, UNAVAILABLE = 8, 9, 10, 12, 13, 14
CODE_NAMES = {OK: "OK", CANCELLED: "Canceled", UNKNOWN: "Unknown", INVALID_ARGUMENT: "InvalidArgument",
              DEADLINE_EXCEEDED: "DeadlineExceeded", NOT_FOUND: "NotFound", RESOURCE_EXHAUSTED: "ResourceExhausted",
              FAILED_PRECONDITION: "FailedPrecondition", ABORTED: "Aborted", UNIMPLEMENTED: "Unimplemented",
              INTERNAL: "Internal", UNAVAILABLE: "Unavailable"}

ERROR_DOMAIN = "contenox.transport"


class TransportError(Exception):
    """A contract error: its Go sentinel's ``text``, wire ``token`` and gRPC ``code``; ``detail`` is what follows
    the sentinel's text (Go's ``fmt.Errorf("%w: %s", sentinel, detail)``)."""

    token = ""
    code = INTERNAL
    text = ""

    def __init__(self, detail: str = "") -> None:
        self.detail = detail
        super().__init__(f"{self.text}: {detail}" if detail else self.text)


def _sentinel(name: str, token: str, code: int, text: str) -> type[TransportError]:
    return type(name, (TransportError,), {"token": token, "code": code, "text": text,
                                          "__doc__": f"``transport.{name}``: {text} (wire token ``{token}``)."})


ErrCanceled = _sentinel("ErrCanceled", "context_canceled", CANCELLED, "context canceled")
ErrDeadlineExceeded = _sentinel("ErrDeadlineExceeded", "deadline_exceeded", DEADLINE_EXCEEDED,
                                "context deadline exceeded")
ErrStaleFence = _sentinel("ErrStaleFence", "stale_fence", FAILED_PRECONDITION, "stale owner fence token")
ErrNotOwner = _sentinel("ErrNotOwner", "not_owner", FAILED_PRECONDITION, "instance is not the local runtime owner")
ErrSessionClosed = _sentinel("ErrSessionClosed", "session_closed", FAILED_PRECONDITION, "session is closed")
ErrContextOverflow = _sentinel("ErrContextOverflow", "context_overflow", RESOURCE_EXHAUSTED,
                               "exceeded the session context window")
ErrSessionFatal = _sentinel("ErrSessionFatal", "session_fatal", ABORTED, "session marked fatal; evict and reopen")
ErrModelBusy = _sentinel("ErrModelBusy", "model_busy", FAILED_PRECONDITION, "modeld active model slot is busy")
ErrModelNotActive = _sentinel("ErrModelNotActive", "model_not_active", FAILED_PRECONDITION,
                              "requested model is not active in modeld")
ErrModelSwitchRequired = _sentinel("ErrModelSwitchRequired", "model_switch_required", FAILED_PRECONDITION,
                                   "modeld active model slot must be switched")
ErrDeviceBusy = _sentinel("ErrDeviceBusy", "device_busy", RESOURCE_EXHAUSTED, "modeld accelerator device is busy")
ErrModelLoadFailed = _sentinel("ErrModelLoadFailed", "model_load_failed", INTERNAL, "modeld failed to load model")
ErrInsufficientMemory = _sentinel("ErrInsufficientMemory", "insufficient_memory", RESOURCE_EXHAUSTED,
                                  "insufficient memory for requested model")
ErrSlotGenerationStale = _sentinel("ErrSlotGenerationStale", "slot_generation_stale", FAILED_PRECONDITION,
                                   "stale modeld slot generation")
ErrBackendMismatch = _sentinel("ErrBackendMismatch", "backend_mismatch", FAILED_PRECONDITION,
                               "model type not served by this modeld backend")
ErrUnsupportedFeature = _sentinel("ErrUnsupportedFeature", "unsupported_feature", UNIMPLEMENTED,
                                  "unsupported transport feature")
ErrModelNotFound = _sentinel("ErrModelNotFound", "model_not_found", NOT_FOUND, "model not found in modeld's local store")
ErrDigestMismatch = _sentinel("ErrDigestMismatch", "digest_mismatch", FAILED_PRECONDITION,
                              "model content digest mismatch")
ErrUnsupportedModelType = _sentinel("ErrUnsupportedModelType", "unsupported_model_type", INVALID_ARGUMENT,
                                    "unsupported model backend type")


class ErrManifestMismatch(TransportError, ManifestMismatchError):
    """``contextasm.ErrManifestMismatch``, carried as ``ManifestMismatchError{Reason}`` (wire token
    ``manifest_mismatch``; the client rebuilds it from the text after the token)."""

    token, code = "manifest_mismatch", FAILED_PRECONDITION
    text = ManifestMismatchError.SENTINEL

    def __init__(self, reason: str = "") -> None:
        ManifestMismatchError.__init__(self, reason)
        self.detail = self.reason


class ContextOverflowError(ErrContextOverflow):
    """``ContextOverflowError``: the typed overflow with its stage and token counts. Its text is Go's
    ``"<sentinel> during <stage>: resident_tokens=R additional_tokens=A num_ctx=N"``."""

    def __init__(self, stage: str, resident: int, additional: int, num_ctx: int) -> None:
        self.overflow = ContextOverflowDetail(stage, resident, additional, num_ctx)
        Exception.__init__(self, f"{self.text} during {stage}: resident_tokens={resident} "
                                 f"additional_tokens={additional} num_ctx={num_ctx}")
        self.detail = str(self)


SENTINELS: tuple[type[TransportError], ...] = (
    ErrCanceled, ErrDeadlineExceeded, ErrStaleFence, ErrNotOwner, ErrSessionClosed, ErrContextOverflow,
    ErrSessionFatal, ErrModelBusy, ErrModelNotActive, ErrModelSwitchRequired, ErrDeviceBusy, ErrModelLoadFailed,
    ErrInsufficientMemory, ErrSlotGenerationStale, ErrBackendMismatch, ErrUnsupportedFeature, ErrManifestMismatch,
    ErrModelNotFound, ErrDigestMismatch, ErrUnsupportedModelType)
"""``errors.go``'s ``sentinels`` table, in its order: the first an error is an instance of gives its token."""

CONTRACT_ERRORS = SENTINELS[2:]
"""The contract's own errors (seventeen ``transport.Err*`` and ``contextasm.ErrManifestMismatch``), without the
context package's two."""


def sentinel_of(err: BaseException) -> type[TransportError] | None:
    for s in SENTINELS:
        if isinstance(err, s):
            return s
    return None


def token_of(err: BaseException) -> str:
    """``errorToken``: the wire token of the first sentinel ``err`` is, else ""."""
    s = sentinel_of(err)
    return s.token if s else ""


def overflow_detail(err: BaseException) -> ContextOverflowDetail | None:
    """``ContextOverflowDetailFromError``: the detail where it says anything."""
    d = getattr(err, "overflow", None)
    if isinstance(d, ContextOverflowDetail) and (d.stage or d.resident_tokens or d.additional_tokens or d.num_ctx):
        return d
    return None


@dataclass(frozen=True)
class WireStatus:
    """A gRPC status as ``encodeError`` makes it: code, message, and the ErrorInfo of an overflow."""

    code: int
    message: str
    reason: str = ""
    metadata: tuple[tuple[str, str], ...] = ()


def encode(err: BaseException) -> WireStatus:
    """``encodeError``: ``token: text`` with the sentinel's code; an overflow's detail as ErrorInfo metadata."""
    s = sentinel_of(err)
    if s is None:
        return WireStatus(INTERNAL, f"internal: {err}")
    d = overflow_detail(err) if s is ErrContextOverflow or issubclass(s, ErrContextOverflow) else None
    if d is not None:
        md = (("stage", d.stage), ("resident_tokens", str(d.resident_tokens)),
              ("additional_tokens", str(d.additional_tokens)), ("num_ctx", str(d.num_ctx)))
        return WireStatus(s.code, f"{s.token}: {err}", s.token, md)
    return WireStatus(s.code, f"{s.token}: {err}")


def _atoi(v: str | None) -> tuple[int, bool]:
    if not v:
        return 0, False
    try:
        return int(v), True
    except ValueError:
        return 0, False


def overflow_from_metadata(md: dict[str, str]) -> ContextOverflowDetail | None:
    """``overflowDetailFromMetadata``."""
    r, rok = _atoi(md.get("resident_tokens"))
    a, aok = _atoi(md.get("additional_tokens"))
    n, nok = _atoi(md.get("num_ctx"))
    if not (rok or aok or nok) and not md.get("stage"):
        return None
    return ContextOverflowDetail(md.get("stage", ""), r, a, n)


class RemoteError(Exception):
    """A status from the wire that carries no known token: the code and message as they came."""

    def __init__(self, code: int, message: str) -> None:
        self.code, self.message = code, message
        super().__init__(f"{CODE_NAMES.get(code, code)}: {message}")


def decode(code: int, message: str, info: dict[str, str] | None = None) -> BaseException:
    """``decodeError``: a message that starts with a known token becomes that sentinel again (an overflow with
    its detail from the ErrorInfo metadata, a manifest mismatch with its reason)."""
    token, _, rest = message.partition(": ")
    if not _:
        rest = message
    for s in SENTINELS:
        if s.token != token:
            continue
        if s is ErrContextOverflow and info is not None:
            d = overflow_from_metadata(info)
            if d is not None:
                return ContextOverflowError(d.stage, d.resident_tokens, d.additional_tokens, d.num_ctx)
        if s is ErrManifestMismatch:
            return ErrManifestMismatch(rest)
        return s(_strip(rest, s.text))
    if code == CANCELLED:
        return ErrCanceled(message)
    if code == DEADLINE_EXCEEDED:
        return ErrDeadlineExceeded(message)
    return RemoteError(code, message)


def _strip(rest: str, text: str) -> str:
    """The detail after a sentinel's own text (Go wraps as ``%w: %s``, so the text repeats on the wire)."""
    if rest == text:
        return ""
    return rest[len(text) + 2:] if rest.startswith(text + ": ") else rest


def decode_wire(token: str, msg: str, detail: ContextOverflowDetail | None) -> BaseException | None:
    """``decodeWireError``: an in-band Decode error (``wireChunk``) back to its sentinel; None when empty."""
    if not msg:
        return None
    for s in SENTINELS:
        if s.token == token:
            if s is ErrContextOverflow and detail is not None:
                return ContextOverflowError(detail.stage, detail.resident_tokens, detail.additional_tokens,
                                            detail.num_ctx)
            if s is ErrManifestMismatch:
                return ErrManifestMismatch(msg)
            return s(_strip(msg, s.text))
    return RemoteError(UNKNOWN, msg)


__all__ = ["CONTRACT_ERRORS", "ContextOverflowError", "ERROR_DOMAIN", "RemoteError", "SENTINELS", "TransportError",
           "WireStatus", "decode", "decode_wire", "encode", "overflow_detail", "sentinel_of", "token_of",
           *(s.__name__ for s in SENTINELS)]
