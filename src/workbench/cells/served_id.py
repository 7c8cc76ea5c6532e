"""What a served engine says it is, read once when a served cell opens: the one boundary where its answers
(``GET /props``, ``/version``, ``/v1/models``, …) become typed fields.

A cell attached to ``endpoint=URL`` cannot assume what answers there. Each server's identity is a frozen
dataclass read from the answers it must give (:class:`LlamaServerId`, :class:`VllmId`, :class:`TrtllmServeId`);
an endpoint that answers otherwise (another server, an HTML page, an HTTP error, nothing at all) is
:class:`NotTheServer`: one line saying what it answered and which server was expected, where a missing key
used to surface as a ``KeyError`` deep in a probe (issue 36).
"""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

from ..engine import WorkbenchError

OWNERS = {"llamacpp": "llama-server", "vllm": "vllm serve", "tensorrt_llm": "trtllm-serve"}
"""``/v1/models`` ``owned_by`` → the server that says it: llama.cpp's tools/server/server-context.cpp, vLLM's
entrypoints/serve/engine/protocol.py ``ModelCard``, TensorRT-LLM 1.2's serve/openai_protocol.py ``ModelCard``."""


class NotTheServer(WorkbenchError):
    """An endpoint that is not the server a cell was opened for: the user's URL to fix, not an engine to skip."""


def check_endpoint(url: str) -> None:
    """Refuse (ValueError) an ``endpoint=`` that is no http(s) URL with a host, before anything is sent."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port  # ValueError for a port that is not one
    except ValueError as e:
        raise ValueError(f"endpoint {url!r} is not a URL ({e}); give the server's address, e.g. "
                         "http://127.0.0.1:8080") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or any(c.isspace() for c in url) or port == 0:
        raise ValueError(f"endpoint {url!r} is not an http(s) URL with a host; give the server's address, "
                         "e.g. http://127.0.0.1:8080")


@dataclass(frozen=True)
class Answer:
    """One GET as it came back: status, content type and body text."""

    path: str
    status: int
    content_type: str
    text: str

    def said(self) -> str:
        body = " ".join(self.text.split())
        body = body[:80] + ("…" if len(body) > 80 else "")
        return f"GET {self.path} answered {self.status} ({self.content_type or 'no content type'}) {body!r}"

    def doc(self) -> Any:
        if self.status != 200:
            raise Mismatch(self, "200 with JSON")
        try:
            return json.loads(self.text)
        except ValueError:
            raise Mismatch(self, "JSON") from None


class Mismatch(Exception):
    """An answer that lacks what an identity needs (turned into :class:`NotTheServer` by :func:`identify`)."""

    def __init__(self, answer: Answer, expected: str) -> None:
        self.answer, self.expected = answer, expected
        super().__init__(f"{answer.said()}, not {expected}")


_REQUIRED = object()


def pick(answer: Answer, dotted: str, kind: type, default: Any = _REQUIRED) -> Any:
    """The value at ``dotted`` (``a.b``, ``data.0.id``) in ``answer``'s JSON, as ``kind``; ``default`` where it is
    absent (or null), a :class:`Mismatch` where it is required, or present with another type."""
    node = answer.doc()
    for key in dotted.split("."):
        if isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        elif isinstance(node, dict) and key in node:
            node = node[key]
        else:
            node = None
            break
    if node is None and default is not _REQUIRED:
        return default
    if not isinstance(node, kind) or (kind is int and isinstance(node, bool)):
        raise Mismatch(answer, f"{dotted} ({kind.__name__})")
    return node


def owner(answers: Mapping[str, Answer]) -> str | None:
    """Who ``/v1/models`` says serves there (``owned_by``), where it answered that."""
    got = answers.get("/v1/models")
    try:
        return pick(got, "data.0.owned_by", str) if got is not None else None
    except Mismatch:
        return None


class ServerId:
    """A server's identity: the paths it is read from and the ``owned_by`` its ``/v1/models`` names."""

    label: ClassVar[str]
    paths: ClassVar[tuple[str, ...]]
    owner: ClassVar[str]

    @classmethod
    def read(cls, answers: Mapping[str, Answer]) -> "ServerId":  # pragma: no cover - abstract
        raise NotImplementedError

    @classmethod
    def check_owner(cls, answers: Mapping[str, Answer]) -> None:
        if owner(answers) != cls.owner:
            raise Mismatch(answers["/v1/models"], f"data[0].owned_by {cls.owner!r}")


def _samples(text: str, metric: str) -> list:
    """One metric's samples in a Prometheus text exposition (``prometheus_client``'s own parser)."""
    from prometheus_client.parser import text_string_to_metric_families

    families = text_string_to_metric_families(text if isinstance(text, str) else "")
    return [s for family in families for s in family.samples if s.name == metric]


def prometheus_sum(text: str, metric: str) -> float:
    """The sum of one Prometheus metric's samples (every label set); 0 when it is absent."""
    return sum(s.value for s in _samples(text, metric))


def prometheus_labels(text: str, metric: str) -> dict[str, str]:
    """The labels of one Prometheus sample (``name{a="1",b="x"} 1``); empty when the metric is absent."""
    found = _samples(text, metric)
    return dict(found[0].labels) if found else {}


STATUS_SAYS = {401: "refused the API key: give api_key= the key the server was started with",
               403: "refused the API key: give api_key= the key the server was started with",
               503: "is not ready: wait until its /health answers 200"}
"""HTTP statuses that say the endpoint may well be the server, but cannot be read now."""


def not_the_server(url: str, label: str, answers: Mapping[str, Answer], e: Mismatch) -> NotTheServer:
    """The one line: what ``url`` answered, what ``label`` answers there, and who it says it is, where it says."""
    if e.answer.status in STATUS_SAYS:
        return NotTheServer(f"{url} {STATUS_SAYS[e.answer.status]} ({e.answer.said()}; expected {label})")
    who = owner(answers)
    said = f"; its /v1/models names owned_by {who!r}" + (f" ({OWNERS[who]})" if who in OWNERS else "") if who else ""
    return NotTheServer(f"{url} is not {label}: {e.answer.said()}, where {label} answers {e.expected}{said}; "
                        f"point endpoint= at a {label}")


def nothing_answered(url: str, label: str, path: str, e: Exception) -> NotTheServer:
    why = " ".join(f"{type(e).__name__}: {e}".split())
    return NotTheServer(f"nothing answered at {url} (GET {path}: {why}); expected {label} there: start it, or "
                        "point endpoint= at one")


__all__ = ["Answer", "Mismatch", "NotTheServer", "ServerId",
           "check_endpoint", "not_the_server", "nothing_answered", "pick", "prometheus_labels", "prometheus_sum"]
