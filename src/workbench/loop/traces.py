"""Agent traces: the three formats the loop replays, read into sessions of turns.

- τ-bench (``taubench``): a JSON array of runs, each with ``traj`` (OpenAI chat messages). Every
  assistant message is one turn: its prompt is the conversation before it, its reply is the
  recorded message (teacher forcing).
- kvcache-tester (``claude-code``): one JSON object with ``block_size`` and ``requests`` (token
  counts plus one hash id per full block); sub-agents nest their own ``requests`` and are
  sessions of their own.
- Mooncake (``mooncake``): JSON lines with ``input_length``, ``output_length`` and ``hash_ids``
  (512-token blocks, the last one partial); the requests form one stream in arrival order.

Files may be plain, ``.xz`` or ``.gz``. The format is read from the content, not the name, so
``--trace PATH`` takes a user's own file in any of them.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import lzma
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping, Union

from ..engine import WorkbenchError


class TraceError(WorkbenchError, ValueError):
    """A trace that cannot be read; the message names the file and what to fix."""


def traces_dir() -> Path:
    from ..files import REPO_ROOT

    return REPO_ROOT / "data" / "traces"


BUILTIN = {
    "taubench": "taubench_gpt-4o-airline.json.xz",
    "claude-code": "kvcache-tester_claude-code_trace_0279.json.xz",
    "mooncake": "mooncake_conversation_trace.jsonl.xz",
}
"""Traces shipped in ``data/traces`` (see its README for sources and licences)."""


@dataclass(frozen=True)
class ChatTurn:
    """One LLM call of a chat trace: the messages before it and the recorded assistant reply."""

    messages: tuple[Mapping[str, Any], ...]
    reply: Mapping[str, Any]


@dataclass(frozen=True)
class BlockTurn:
    """One request of a hash-only trace: full blocks by id, then ``tail_tokens`` more, then ``output_tokens``.

    The tail is the first ``tail_tokens`` of block ``tail_id`` when the trace hashed the partial
    block (Mooncake), else content of this request alone (kvcache-tester hashes full blocks only).
    """

    blocks: tuple[int, ...]
    tail_tokens: int
    output_tokens: int
    tail_id: int | None = None


Turn = Union[ChatTurn, BlockTurn]


@dataclass(frozen=True)
class Session:
    id: str
    turns: tuple[Turn, ...]


@dataclass(frozen=True)
class Trace:
    name: str
    format: str  # "taubench" | "kvcache-tester" | "mooncake"
    path: Path
    sha256: str  # of the uncompressed content
    sessions: tuple[Session, ...]
    block_tokens: int | None = None  # tokens per hashed block (hash-only formats)

    @property
    def turns(self) -> int:
        return sum(len(s.turns) for s in self.sessions)

    def subset(self, sessions: int | None = None, turns: int | None = None) -> "Trace":
        """The first ``sessions`` sessions, each cut to its first ``turns`` turns (None: all)."""
        for what, n in (("sessions", sessions), ("turns", turns)):
            if n is not None and n < 1:
                raise TraceError(f"--{what} must be at least 1, got {n}")
        picked = self.sessions[:sessions] if sessions else self.sessions
        return replace(self, sessions=tuple(replace(s, turns=s.turns[:turns] if turns else s.turns) for s in picked))


def _read(path: Path) -> bytes:
    opener = {".xz": lzma.open, ".gz": gzip.open}.get(path.suffix, open)
    try:
        with opener(path, "rb") as f:
            return f.read()
    except (OSError, lzma.LZMAError, EOFError) as e:
        raise TraceError(f"cannot read trace {path}: {e}") from None


def stated_sha256(name: str) -> str:
    """The sha256 of built-in trace ``name``'s uncompressed content, as its ``SOURCE.md`` states it (the one home of
    that digest; ``xz -dc FILE.xz | sha256sum`` gives it)."""
    path = resolve(name)
    source = path.with_name(path.name.removesuffix(".xz") + ".SOURCE.md").read_text(encoding="utf-8")
    found = re.search(r"sha256: ([0-9a-f]{64})", source)
    if found is None:
        raise TraceError(f"{path.name}'s SOURCE.md states no sha256")
    return found.group(1)


def resolve(spec: str) -> Path:
    """A built-in trace name or a path to a trace file."""
    if spec in BUILTIN:
        return traces_dir() / BUILTIN[spec]
    p = Path(spec).expanduser()
    if p.is_file():
        return p
    raise TraceError(f"unknown trace {spec!r}: use one of {', '.join(BUILTIN)} or the path of a trace file "
                     "(τ-bench JSON, kvcache-tester JSON or Mooncake JSONL)")


def load(spec: str) -> Trace:
    """Read a trace by name or path; its format is detected from the content."""
    path = resolve(spec)
    raw = _read(path)
    name = spec if spec in BUILTIN else path.name
    sha = hashlib.sha256(raw).hexdigest()
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        raise TraceError(f"{path} is not UTF-8 text; a trace is JSON or JSON lines") from None
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
    except RecursionError:
        raise TraceError(f"{path}: JSON nested too deeply to be a trace") from None
    try:
        trace = _parse(doc, text, path, name, sha)
    except TraceError as e:
        raise TraceError(str(e) if str(e).startswith(str(path)) else f"{path}: {e}") from None
    except (KeyError, TypeError, ValueError, AttributeError, RecursionError, OverflowError, IndexError) as e:
        raise TraceError(f"{path}: malformed trace ({type(e).__name__}: {e})") from None
    if not trace.turns:
        raise TraceError(f"{path}: the trace holds no turn to replay")
    return trace


def _parse(doc: Any, text: str, path: Path, name: str, sha: str) -> Trace:
    """The trace in ``doc`` (parsed JSON; None: JSON lines), its format told by its shape."""
    if isinstance(doc, list):
        return Trace(name, "taubench", path, sha, _taubench(doc))
    if isinstance(doc, dict) and "requests" in doc:
        block = doc.get("block_size")
        if isinstance(block, bool) or not isinstance(block, int) or block < 1:
            raise TraceError(f"{path}: a kvcache-tester trace needs a positive whole block_size, not {block!r}")
        return Trace(name, "kvcache-tester", path, sha, _kvcache(doc, block), block)
    if doc is None or isinstance(doc, dict):
        return Trace(name, "mooncake", path, sha, _mooncake(text, path), 512)
    raise TraceError(f"{path}: not a τ-bench, kvcache-tester or Mooncake trace")


def _taubench(runs: list) -> tuple[Session, ...]:
    sessions = []
    for i, run in enumerate(runs):
        if not isinstance(run, Mapping) or not isinstance(run.get("traj"), list):
            raise TraceError(f"τ-bench run {i} has no 'traj' message list")
        traj = run["traj"]
        for j, m in enumerate(traj):
            _check_message(m, i, j)
        turns = tuple(ChatTurn(tuple(traj[:j]), m) for j, m in enumerate(traj)
                      if m.get("role") == "assistant" and j > 0)
        sid = f"task{run.get('task_id', i)}-trial{run.get('trial', 0)}"
        sessions.append(Session(sid, turns))
    if not sessions:
        raise TraceError("the τ-bench trace has no runs")
    return tuple(sessions)


def _check_message(m: Any, run: int, j: int) -> None:
    """A τ-bench message is an object with a string role and string (or null) content, as the rendering needs."""
    where = f"τ-bench run {run} message {j}"
    if not isinstance(m, Mapping):
        raise TraceError(f"{where} is a {type(m).__name__}; each message must be an object with 'role' and 'content'")
    if not isinstance(m.get("role"), str):
        raise TraceError(f"{where} has no string 'role' (user, assistant, tool, system)")
    if m.get("content") is not None and not isinstance(m["content"], str):
        raise TraceError(f"{where}: 'content' must be a string or null, not a {type(m['content']).__name__}")
    calls = m.get("tool_calls")
    if calls is not None and not (isinstance(calls, list) and all(
            isinstance(c, Mapping) and isinstance(c.get("function"), Mapping)
            and isinstance(c["function"].get("name"), str) for c in calls)):
        raise TraceError(f"{where}: 'tool_calls' must be a list of objects with a function name")


def _count(req: Mapping[str, Any], keys: tuple[str, str], low: int) -> int:
    """A request's token count (its first key that is present) as a whole number of at least ``low``: a float, a
    string or a count below it is refused here, not found by the engine after the turns before it ran."""
    key = next((k for k in keys if k in req), keys[-1])
    v = req[key]
    if isinstance(v, bool) or not isinstance(v, int) or v < low:
        raise TraceError(f"a request's {key} is {v!r}; it must be a whole number of tokens, at least {low}")
    return v


def _block_turn(req: Mapping[str, Any], block: int, *, partial_last: bool) -> BlockTurn:
    n_in, ids = _count(req, ("in", "input_length"), 1), [int(h) for h in req["hash_ids"]]
    n_out = _count(req, ("out", "output_length"), 1)
    if partial_last:  # Mooncake: ceil(in / block) ids, the last block partial
        tail = n_in - block * (len(ids) - 1) if ids else n_in
        if not ids or not 0 < tail <= block:
            raise TraceError(f"request with {n_in} tokens cannot have {len(ids)} blocks of {block}")
        return BlockTurn(tuple(ids[:-1]), tail, n_out, ids[-1]) if tail < block else BlockTurn(tuple(ids), 0, n_out)
    tail = n_in - block * len(ids)
    if not 0 <= tail < block:
        raise TraceError(f"request with {n_in} tokens cannot have {len(ids)} full blocks of {block}")
    return BlockTurn(tuple(ids), tail, n_out)


def _kvcache(doc: Mapping[str, Any], block: int) -> tuple[Session, ...]:
    main, subs = [], []
    for req in doc["requests"]:
        if req.get("type") == "subagent":
            subs.append(Session(str(req.get("agent_id", f"subagent{len(subs)}")),
                                tuple(_block_turn(r, block, partial_last=False) for r in req["requests"])))
        else:
            main.append(_block_turn(req, block, partial_last=False))
    return (Session(str(doc.get("id", "main")), tuple(main)), *subs)


def _mooncake(text: str, path: Path) -> tuple[Session, ...]:
    turns = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            req = json.loads(line)
        except ValueError:
            raise TraceError(f"{path}:{n}: not JSON; a Mooncake trace has one JSON object per line") from None
        if not isinstance(req, Mapping) or "hash_ids" not in req:
            raise TraceError(f"{path}:{n}: a Mooncake request needs input_length, output_length and hash_ids")
        try:
            turns.append(_block_turn(req, 512, partial_last=True))
        except TraceError as e:
            raise TraceError(f"{path}:{n}: {e}") from None
    if not turns:
        raise TraceError(f"{path} has no requests")
    return (Session("stream", tuple(turns)),)


__all__ = ["BUILTIN", "BlockTurn", "ChatTurn", "Session", "Trace", "TraceError", "Turn", "load", "resolve"]
