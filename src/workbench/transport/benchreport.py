"""The local-node benchmark report, driven through the contract only: ``runtime/benchreport`` (contenox/runtime
7d0a257f, ``report.go`` and ``run.go``), whose shape follows ``local-coding-node-goals.md`` "Required benchmark report".

:func:`run` drives any :class:`~workbench.transport.contract.Session` (a session on the other end of modeld's wire, an
adapter in-process, the in-memory service) through a :class:`Harness` and fills :class:`Report`, section by section
as ``run.go`` does: a cold full prefill on a fresh session, the same prefix warm on it, a changed suffix warm against
a cold session's output (``output_equals_cold``), an edited stable segment that must miss and still equal a cold run,
decode throughput, and the TTFT curve as the changed suffix grows. By contenox's own classes this is a
**microbenchmark** (``benchmark-integrity-blueprint.md``): the contract's seam, not the product path.

Two things ``run.go`` leaves out are filled here: ``failure_cases.over_context`` (a prefix past the session's window is
refused with ``ErrContextOverflow``; ``run.go`` declares the field and never sets it) and, beside each turn, what the
session's evidence says the engine itself computed (where the session serves evidence: the daemon's), so a reader can
hold ``cached_tokens`` to the engine's count. ``cancel_decode`` is a stream abandoned after its first chunk, then the
same session used again (``run.go`` decodes under a context cancelled before the call; a stream here has no context
to cancel first).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

from .contract import DecodeConfig, PrefixInput, PrefixStatus, Session, SuffixInput, SuffixStatus
from .errors import ErrContextOverflow
from .gojson import go

RESULT_CLASS = "microbenchmark"  # benchmark-integrity-blueprint.md: the class every row of this report carries


@dataclass
class ColdPrefill:
    tokens: int = go("tokens", 0)
    ms: float = go("ms", 0.0)
    prompt_tps: float = go("prompt_tps", 0.0)
    ttft_ms: float = go("ttft_ms", 0.0)


@dataclass
class WarmSame:
    cached_tokens: int = go("cached_tokens", 0)
    new_tokens: int = go("new_tokens", 0)
    ms: float = go("ms", 0.0)
    ttft_ms: float = go("ttft_ms", 0.0)
    hit_rate: float = go("hit_rate", 0.0)


@dataclass
class WarmChanged:
    cached_tokens: int = go("cached_tokens", 0)
    suffix_tokens: int = go("suffix_tokens", 0)
    ms: float = go("ms", 0.0)
    ttft_ms: float = go("ttft_ms", 0.0)
    output_equals_cold: bool = go("output_equals_cold", False)


@dataclass
class EditedStable:
    expected_cache_miss: bool = go("expected_cache_miss", False)
    actual_cache_miss: bool = go("actual_cache_miss", False)
    output_equals_cold: bool = go("output_equals_cold", False)


@dataclass
class Decode:
    output_tokens: int = go("output_tokens", 0)
    tokens_per_sec: float = go("tokens_per_sec", 0.0)


@dataclass
class SuffixTTFT:
    suffix_tokens: int = go("suffix_tokens", 0)
    ttft_ms: float = go("ttft_ms", 0.0)


@dataclass
class FailureCases:
    over_context: bool = go("over_context", False)
    cancel_decode: bool = go("cancel_decode", False)


@dataclass
class Report:
    """``benchreport.Report``: sections a run does not exercise stay zero-valued; ``notes`` say why."""

    model: str = go("model", "")
    backend: str = go("backend", "")
    mode: str = go("mode", "")
    profile: str = go("profile", "", omitempty=True)
    backend_version: str = go("backend_version", "", omitempty=True)
    cold_full_prefill: ColdPrefill = go("cold_full_prefill", factory=ColdPrefill)
    warm_same_prefix: WarmSame = go("warm_same_prefix", factory=WarmSame)
    warm_changed_suffix: WarmChanged = go("warm_changed_suffix", factory=WarmChanged)
    edited_stable_segment: EditedStable = go("edited_stable_segment", factory=EditedStable)
    decode: Decode = go("decode", factory=Decode)
    suffix_ttft_curve: list[SuffixTTFT] | None = go("suffix_ttft_curve", None, omitempty=True)
    failure_cases: FailureCases = go("failure_cases", factory=FailureCases)
    notes: list[str] | None = go("notes", None, omitempty=True)


class Harness(Protocol):
    """``benchreport.Harness``: opens a fresh (cold) session; builds a turn's manifest-keyed inputs."""

    def open_session(self) -> Session: ...

    def turn(self, stable: str, suffix: str) -> tuple[PrefixInput, SuffixInput]: ...


@dataclass(frozen=True)
class Scenario:
    """``benchreport.Scenario``."""

    stable: str
    suffix: str
    changed_suffix: str = ""
    edited_stable: str = ""
    suffix_curve: Sequence[str] = ()
    max_decode: int = 16
    over_context: str = ""  # a stable text past the session's window (over_context); "" skips it


@dataclass
class Turn:
    """One EnsurePrefix → PrefillSuffix → Decode, measured stage by stage (``turnMetrics``), with the engine's own
    counters for its stages where the session serves evidence."""

    label: str
    prefix: PrefixStatus
    suffix: SuffixStatus
    prefix_ms: float
    suffix_ms: float
    ttft_ms: float
    decode_ms: float
    tokens: int
    text: str
    engine: dict = field(default_factory=dict)


def _ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000.0


def run_turn(h: Harness, sess: Session, stable: str, suffix: str, max_decode: int, label: str = "") -> Turn:
    """``runTurn``: EnsurePrefix → PrefillSuffix → Decode (temperature 0, seed 7), each stage timed."""
    pin, sin = h.turn(stable, suffix)
    before = len(_stages(sess))
    t0 = time.perf_counter()
    ps = sess.ensure_prefix(pin)
    prefix_ms = _ms(t0)
    t1 = time.perf_counter()
    ss = sess.prefill_suffix(sin)
    suffix_ms = _ms(t1)
    t2 = time.perf_counter()
    ttft, tokens, text = 0.0, 0, ""
    first = True
    for chunk in sess.decode(DecodeConfig(max_tokens=max_decode, seed=7, temperature=0.0)):
        if chunk.error is not None:
            raise chunk.error
        if first:
            ttft, first = _ms(t2), False
        if chunk.text:
            tokens += 1
            text += chunk.text
    decode_ms = _ms(t2)
    return Turn(label, ps, ss, prefix_ms, suffix_ms, ttft, decode_ms, tokens, text, _engine_view(_stages(sess)[before:]))


def _stages(sess: Session) -> list[dict]:
    ev = getattr(sess, "evidence", None)
    if ev is None:
        return []
    try:
        return list(ev().get("stages") or [])
    except Exception:  # noqa: BLE001 - a session without evidence reports none
        return []


def _engine_view(stages: list[dict]) -> dict:
    """What the engine itself counted for a turn's stages: computed/reused prompt tokens by stage."""
    out: dict[str, Any] = {}
    for s in stages:
        name = s.get("stage", "")
        for k in ("engine_computed_tokens", "engine_reused_tokens", "output_tokens", "wall_s", "ttft_s"):
            if k in s:
                out[f"{name}.{k}"] = s[k]
    return out


def _per_sec(n: int, ms: float) -> float:
    return n / (ms / 1000.0) if ms > 0 else 0.0


def run(h: Harness, sc: Scenario, meta: Report, *, on_turn: Callable[[Turn], None] | None = None
        ) -> tuple[Report, list[Turn]]:
    """``benchreport.Run``: the filled report and every turn it measured (the evidence behind it)."""
    r, turns = meta, []
    mx = sc.max_decode if sc.max_decode > 0 else 16

    def turn(sess: Session, stable: str, suffix: str, label: str) -> Turn:
        t = run_turn(h, sess, stable, suffix, mx, label)
        turns.append(t)
        if on_turn is not None:
            on_turn(t)
        return t

    cold = h.open_session()
    try:
        c = turn(cold, sc.stable, sc.suffix, "cold")
        r.cold_full_prefill = ColdPrefill(c.prefix.prefix_tokens, c.prefix_ms, _per_sec(c.prefix.prefix_tokens,
                                                                                        c.prefix_ms), c.ttft_ms)
        r.decode = Decode(c.tokens, _per_sec(c.tokens, c.decode_ms))
        w = turn(cold, sc.stable, sc.suffix, "warm same prefix")
        r.warm_same_prefix = WarmSame(w.prefix.reused_tokens, w.prefix.prefilled_tokens, w.prefix_ms, w.ttft_ms,
                                      w.prefix.reused_tokens / w.prefix.prefix_tokens if w.prefix.prefix_tokens else 0)
        if sc.changed_suffix:
            wc = turn(cold, sc.stable, sc.changed_suffix, "warm changed suffix")
            ref = _cold_turn(h, sc.stable, sc.changed_suffix, turn, "cold reference: changed suffix")
            r.warm_changed_suffix = WarmChanged(wc.prefix.reused_tokens, wc.suffix.suffix_tokens, wc.suffix_ms,
                                                wc.ttft_ms, wc.text == ref.text)
        if sc.edited_stable:
            e = turn(cold, sc.edited_stable, sc.suffix, "edited stable segment")
            ref = _cold_turn(h, sc.edited_stable, sc.suffix, turn, "cold reference: edited stable")
            r.edited_stable_segment = EditedStable(True, e.prefix.reused_tokens < e.prefix.prefix_tokens,
                                                   e.text == ref.text)
        curve = []
        for i, suf in enumerate(sc.suffix_curve):
            m = turn(cold, sc.stable, suf, f"suffix curve {i}")
            curve.append(SuffixTTFT(m.suffix.suffix_tokens, m.ttft_ms))
        r.suffix_ttft_curve = curve or None
    finally:
        cold.close()
    r.failure_cases = FailureCases(_over_context(h, sc), _cancel_decode(h, sc))
    return r, turns


def _cold_turn(h: Harness, stable: str, suffix: str, turn: Callable[..., Turn], label: str) -> Turn:
    sess = h.open_session()
    try:
        return turn(sess, stable, suffix, label)
    finally:
        sess.close()


def _over_context(h: Harness, sc: Scenario) -> bool:
    """A stable prefix past the session's window is refused with ErrContextOverflow (not prefilled)."""
    if not sc.over_context:
        return False
    sess = h.open_session()
    try:
        pin, _ = h.turn(sc.over_context, "")
        try:
            sess.ensure_prefix(pin)
        except ErrContextOverflow:
            return True
        return False
    finally:
        sess.close()


def _cancel_decode(h: Harness, sc: Scenario) -> bool:
    """A decode stream abandoned after its first chunk ends, and the session still answers afterwards."""
    sess = h.open_session()
    try:
        pin, sin = h.turn(sc.stable, sc.suffix)
        sess.ensure_prefix(pin)
        sess.prefill_suffix(sin)
        stream = iter(sess.decode(DecodeConfig(max_tokens=32, temperature=0.0, seed=7)))
        first = next(stream, None)
        close = getattr(stream, "close", None)
        if close is not None:
            close()
        if first is None or first.error is not None:
            return first is not None and first.error is not None
        report = sess.explain_context()
        sess.ensure_prefix(pin)
        return not report.closed
    except Exception:  # noqa: BLE001 - any failure here is the failure case not handled
        return False
    finally:
        sess.close()


__all__ = ["ColdPrefill", "Decode", "EditedStable", "FailureCases", "Harness", "RESULT_CLASS", "Report", "Scenario",
           "SuffixTTFT", "Turn", "WarmChanged", "WarmSame", "run", "run_turn"]
