"""contract.conformance — the cell on modeld's own wire, row by row, against what its engine itself did.

A cell's daemon (:class:`workbench.transport.daemon.Daemon`: the engine's wing session adapter behind modeld's wire) is
started on loopback inside the probe and driven only through the client of that wire, as the contenox runtime drives
modeld. Each row of the blueprint's Contract Mapping table is exercised as a behaviour, beside the wire itself and the
backend-parity invariants I1, I2 and I6; what the contract answers is held to what the engine itself counted, read
through the daemon's evidence service by a channel the session adapter's answers do not pass through: the engine's
cumulative work counters (:meth:`~workbench.transport.session.CellSession.work_of`: llama.cpp's ``llama_perf_context``;
vLLM's Prometheus counters, ``prefix_cache_hits`` and ``prompt_tokens_by_source`` among them; TensorRT-LLM's
iteration stats, ``numCtxTokens`` and ``kvCacheStats.reusedBlocks``), the KV it holds, its output.

| row | what is done through the contract | what the verdict rests on (engine-read) |
| --- | --- | --- |
| cell.wire | Health unfenced; calls with a stale fence, another owner's handle, an unknown handle | engine work while a stale-fenced EnsurePrefix was refused (0) |
| contract.manifest | a prefix cold, again, then under another runtime identity | engine reuse: > 0 for the repeat, 0 across identities |
| contract.ensure_prefix | every EnsurePrefix's PrefixStatus | the engine's own reused and computed counts beside the call, within a block |
| contract.prefill_suffix | PrefillSuffix, then Decode, in the backend's mode | deferred: no engine work at PrefillSuffix, the decode computes the suffix; counters move so |
| contract.decode | a greedy stream; StructuredOutput{json_schema} | the engine's tokens; its constrained output validates |
| contract.explain_context | the reported capabilities vs the row's values | capability truth (I2) |
| contract.snapshot | Snapshot, Restore into a fresh session, decode both | greedy outputs equal |
| contract.describe | Describe at a NumCtx sized from a measured render; that window enforced | window = NumCtx within the engine's context; engine work 0 past it; KV bytes/token = the engine's, read again another way |
| contract.embed | Embed | engine work 0 when refused; the engine's vector otherwise |
| contract.lora | LoadModel with an adapter; sessions of that variant and of another identity | the engine's output changes with the adapter |
| contract.slot_switch | LoadModel at a stale generation, then of the same variant (the salt unchanged) | engine reuse 0 after the reload for a prefix held before |
| contract.overflow | a prefix and a suffix past NumCtx | engine work 0 while refused; the detail on the wire |
| parity.fatal (I1) | an engine fault (the wing's lever through the engine's own API) under a session, then undone | the engine failed; the poisoned session's call moves no engine work, a fresh session's does |
| parity.capability_truth (I2) | RemoveTail: drop a tail, extend again; RecomputeRange: restore a snapshot's tokens with no engine state | report = what the engine did (its counts and its greedy output), never read from the report |
| parity.deferred_prefill (I6) | both modes where the backend has the opt-in | counters = engine work in each mode |

A row whose mechanism the backend lacks by its own adapter's declaration (e.g. llama.cpp keeps no deferred mode and
embeds, as modeld's llama cell does) is ``not-applicable`` on it, with the evidence of what it does instead. On
TensorRT-LLM (the subject) each row settles its claim; here it is a reference.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np

from . import Bound, Decision, Figure, NotRunnable, Outcome, Probe, ProbeContext, Support, SEED, TOKENS, param
from ..transport import errors as terr
from ..transport.contract import (Config, DecodeConfig, EmbedRequest, LoadModelRequest, OpenSessionRequest,
                                  PrefixInput, StructuredOutputConfig, SuffixInput)
from ..transport.manifest import AdapterSpec, ManifestIdentity, cache_salt, chat_turn

WORDS = ("river stone lamp cloud orange window garden pencil silver engine harbor meadow candle mirror thunder "
         "forest copper ladder violet anchor basket planet whistle marble canyon ribbon falcon saddle lantern "
         "pepper glacier compass velvet tunnel orchard beacon").split()
SCHEMA = {"type": "string", "enum": ["yes", "no"]}
ROWS = ("cell.wire", "contract.manifest", "contract.ensure_prefix", "contract.prefill_suffix", "contract.decode",
        "contract.explain_context", "contract.snapshot", "contract.describe", "contract.embed", "contract.lora",
        "contract.slot_switch", "contract.overflow", "parity.fatal", "parity.capability_truth",
        "parity.deferred_prefill")
ROW_CAPS = {"remove_tail": False, "remove_middle": False, "position_shift": False, "recompute_range": True}
"""The ExplainContext row's capabilities (the mapping table: RemoveTail=false, RemoveMiddle=false,
PositionShift=false, RecomputeRange=true)."""


@dataclass(frozen=True)
class Params:
    prompt_words: int = param(24, "words of the stable system text (about 1.5 to 3 tokens each)", Bound(8, 4000))
    suffix_words: int = param(8, "words of the user suffix", Bound(2, 4000))
    context_tokens: int = param(1024, "the engine cell's context (the daemon's slot opens with it)", TOKENS)
    max_tokens: int = param(8, "tokens each Decode asks for", Bound(2, 256))
    threads: int = param(1, "engine threads", Bound(1, 256))
    seed: int = param(0, "seed of the probe's texts and adapters", SEED)


COMPUTED, CACHED = "prompt_tokens_computed", "prompt_tokens_cached"
"""The keys of an engine's work counters (:meth:`workbench.transport.session.CellSession.work_of`) that mean the same
on every engine: prompt tokens it computed, and prompt tokens it served from its cache."""


def words(rng: np.random.Generator, n: int) -> str:
    return " ".join(WORDS[i] for i in rng.integers(0, len(WORDS), n))


def work_delta(before: dict | None, after: dict | None) -> int | None:
    """How much the engine's cumulative work counters moved (None where the engine keeps none)."""
    if before is None or after is None:
        return None
    return int(sum(after[k] - before[k] for k in after if k in before))


def key_delta(before: dict | None, after: dict | None, key: str) -> int | None:
    """How much one of the engine's work counters moved (None where it keeps no such counter)."""
    if before is None or after is None or key not in before or key not in after:
        return None
    return int(after[key] - before[key])


@dataclass
class Run:
    """One conformance run's state: the daemon, its client, the texts, the rows and the readings."""

    daemon: Any
    client: Any
    p: Params
    rng: np.random.Generator
    ident: ManifestIdentity
    declared: dict
    block: int
    rows: list[dict] = field(default_factory=list)
    values: dict[str, Any] = field(default_factory=dict)
    said: dict[str, str] = field(default_factory=dict)

    def work(self) -> dict | None:
        return self.client.evidence("Daemon").get("engine_work")

    def row(self, claim: str, check: str, ok: bool | None, **kw: Any) -> None:
        self.rows.append({"row": claim, "check": check, "ok": ok, **kw})

    def inputs(self, system: str, user: str, ident: ManifestIdentity | None = None) -> tuple:
        stable, volatile, m = chat_turn([("system", system), ("user", user)], 1, ident or self.ident)
        return PrefixInput(text=stable, manifest=m), SuffixInput(text=volatile, manifest=m)

    def open(self, num_ctx: int = 0, adapters: list | None = None) -> Any:
        return self.client.open_session(OpenSessionRequest(config=Config(num_ctx=num_ctx), adapters=adapters))

    def stages(self, sess: Any, n: int) -> list[dict]:
        return sess.evidence()["stages"][-n:]

    def decode(self, sess: Any, cfg: DecodeConfig | None = None) -> tuple[str, int, BaseException | None]:
        text, frames, err = "", 0, None
        for chunk in sess.decode(cfg or DecodeConfig(max_tokens=self.p.max_tokens, temperature=0.0, seed=7)):
            frames += 1
            if chunk.error is not None:
                err = chunk.error
                break
            text += chunk.text
        return text, frames, err

    def refused(self, call: Callable[[], Any]) -> tuple[BaseException | None, int | None]:
        """Call; the error it raised (None if it did not) and the engine work done meanwhile. A session the call
        opened after all is closed again."""
        w0 = self.work()
        err = None
        try:
            got = call()
            if hasattr(got, "handle"):
                got.close()
        except Exception as e:  # noqa: BLE001 - the wire's answer is the reading
            err = e
        return err, work_delta(w0, self.work())


# --------------------------------------------------------------------------- the rows


def wire(r: Run) -> None:
    """Health unfenced; a stale fence, another owner's handle and an unknown handle refused, the engine untouched."""
    from ..transport.wire import Client

    h = r.client.health()
    r.row("cell.wire", "Health answers unfenced with the instance id and backend", bool(h.instance_id),
          observed=f"instance {h.instance_id}, backend {h.backend!r}, ready {h.ready}")
    sess = r.open()
    stale = Client(r.client.host, r.client.port, owner="stale-owner", api_key=r.client.api_key)
    try:
        pin, _ = r.inputs(words(r.rng, r.p.prompt_words), "hi")
        from ..transport.wire import RemoteSession

        checks = [("OpenSession with a stale fence", lambda: stale.open_session(OpenSessionRequest()), terr.ErrStaleFence),
                  ("EnsurePrefix with a stale fence", lambda: RemoteSession(stale, sess.handle).ensure_prefix(pin),
                   terr.ErrStaleFence),
                  ("EnsurePrefix on another owner's handle",
                   lambda: RemoteSession(r.client, "other-owner/1/1").ensure_prefix(pin), terr.ErrStaleFence),
                  ("EnsurePrefix on an unknown handle",
                   lambda: RemoteSession(r.client, f"{h.instance_id}/99/99999").ensure_prefix(pin),
                   terr.ErrSessionClosed)]
        right, work = 0, 0
        for label, call, want in checks:
            err, done = r.refused(call)
            ok = isinstance(err, want)
            right += ok
            work += done or 0
            r.row("cell.wire", label, ok, expected=want.token, observed=terr.token_of(err) if err else "accepted",
                  engine_work=done)
        r.values["conf_wire_refusals"] = right / len(checks)
        r.values["conf_engine_work_stale_fence"] = work if r.work() is not None else None
    finally:
        stale.close()
        sess.close()


def engine_prefix(r: Run, w0: dict | None, w1: dict | None, ev: dict) -> tuple[int | None, int | None]:
    """(reused, computed) prompt tokens of one EnsurePrefix by the engine's own counters, read beside the call and
    never from its PrefixStatus: computed, the growth of the engine's count of prompt tokens computed; reused, the
    growth of its count of prompt tokens served from cache, or where it counts none (llama.h) the KV it holds for
    the session (read from its state) less what it computed."""
    computed, cached = key_delta(w0, w1, COMPUTED), key_delta(w0, w1, CACHED)
    held = ev.get("engine_resident_tokens")
    if cached is None and held is not None and computed is not None:
        cached = int(held) - computed
    return cached, computed


def engine_turn(r: Run, sess: Any, pin: Any) -> tuple[Any, int | None, int | None, dict]:
    """One EnsurePrefix: its PrefixStatus, the engine's own (reused, computed) for it (:func:`engine_prefix`), and
    the session's evidence after it."""
    w0 = r.work()
    st = sess.ensure_prefix(pin)
    w1 = r.work()
    ev = sess.evidence()
    return (st, *engine_prefix(r, w0, w1, ev), ev)


def _turn_prefix(r: Run, sess: Any, pin: Any, label: str, claim: str = "contract.ensure_prefix") -> dict:
    """One EnsurePrefix with the engine's own count beside the PrefixStatus: equal within the engine's reuse
    granularity (a block) in reused and in prefilled tokens, or the counters lie."""
    st, eng_r, eng_c, ev = engine_turn(r, sess, pin)
    stage = ev["stages"][-1]
    tol = max(r.block, 1)
    held = [abs(st.reused_tokens - eng_r) <= tol] if eng_r is not None else []
    held += [abs(st.prefilled_tokens - eng_c) <= tol] if eng_c is not None else []
    exact = None if not held else (all(held) and st.reused_tokens + st.prefilled_tokens == st.prefix_tokens)
    r.row(claim, f"EnsurePrefix {label}: PrefixStatus against the engine's own counters", exact,
          reported=f"reused {st.reused_tokens}, prefilled {st.prefilled_tokens} of {st.prefix_tokens}",
          engine_reused=eng_r, engine_computed=eng_c, adapter_stage_reused=stage.get("engine_reused_tokens"),
          wall_s=stage.get("wall_s"))
    return {"status": st, "engine_reused": eng_r, "engine_computed": eng_c, "exact": exact}


def manifest_and_prefix(r: Run) -> dict:
    """contract.manifest and contract.ensure_prefix: cold, warm, another identity, an extension."""
    system = words(r.rng, r.p.prompt_words)
    sess = r.open()
    pin, sin = r.inputs(system, words(r.rng, r.p.suffix_words))
    other = replace(r.ident, runtime_digest="0" * 64)
    pin2, _ = r.inputs(system, "x", other)
    longer, _ = r.inputs(system + " " + words(r.rng, r.p.prompt_words), "x")
    got = [_turn_prefix(r, sess, pin, "cold"), _turn_prefix(r, sess, pin, "warm, same manifest"),
           _turn_prefix(r, sess, pin2, "same text, another runtime identity"),
           _turn_prefix(r, sess, pin, "back under the first identity"),
           _turn_prefix(r, sess, longer, "extended stable text")]
    r.values["conf_engine_reuse_same"] = got[1]["engine_reused"]
    r.values["conf_engine_reuse_cross"] = got[2]["engine_reused"]
    r.row("contract.manifest", "a repeat under the same manifest is reused by the engine", (got[1]["engine_reused"] or 0) > 0,
          engine_reused=got[1]["engine_reused"])
    r.row("contract.manifest", "the same text under another runtime identity reuses nothing in the engine",
          got[2]["engine_reused"] == 0, engine_reused=got[2]["engine_reused"],
          salts_differ=cache_salt(pin.manifest) != cache_salt(pin2.manifest))
    exact = [g["exact"] for g in got if g["exact"] is not None]
    r.values["conf_prefix_counters_exact"] = sum(exact) / len(exact) if exact else None
    sess.close()
    return {"system": system, "sin": sin, "pin": pin, "prefix_tokens": got[0]["status"].prefix_tokens}


def _counters(sess: Any) -> dict:
    rep = sess.explain_context()
    return {k: getattr(rep, k) for k in ("physical_prefill_calls", "physical_prefill_tokens", "deferred_prefill_calls",
                                         "deferred_prefill_tokens", "decode_calls", "decode_prompt_tokens")}


def _one_suffix(r: Run, base: dict, deferred: bool) -> dict:
    """EnsurePrefix (warm), PrefillSuffix, Decode in one mode: counters against the engine's work and counts."""
    r.daemon.service.defer_prefill = deferred  # the daemon's opt-in, as a restart with the flag would set it
    sess = r.open()
    try:
        sess.ensure_prefix(base["pin"])
        c0, w0 = _counters(sess), r.work()
        ss = sess.prefill_suffix(base["sin"])
        c1, w1 = _counters(sess), r.work()
        text, frames, err = r.decode(sess)
        c2, w2 = _counters(sess), r.work()
        dec = r.stages(sess, 1)[0]
    finally:
        sess.close()
    n = ss.suffix_tokens
    at_prefill = work_delta(w0, w1)
    moved = {k: c1[k] - c0[k] for k in c0}
    decode_prompt = c2["decode_prompt_tokens"] - c1["decode_prompt_tokens"]
    computed_at_decode = key_delta(w1, w2, COMPUTED)  # the engine's own count, never the adapter's stage
    if deferred:
        counters_ok = (moved["deferred_prefill_calls"] == 1 and moved["deferred_prefill_tokens"] == n
                       and moved["physical_prefill_calls"] == 0 and decode_prompt == n and at_prefill == 0)
        carried = None if computed_at_decode is None else computed_at_decode >= n - r.block
    else:
        counters_ok = (moved["physical_prefill_calls"] == 1 and moved["physical_prefill_tokens"] == n
                       and moved["deferred_prefill_calls"] == 0 and decode_prompt == 0
                       and (at_prefill is None or at_prefill >= n))
        carried = None
    return {"mode": "deferred" if deferred else "physical", "suffix_tokens": n, "engine_work_at_prefill": at_prefill,
            "counters_moved": moved, "decode_prompt_tokens": decode_prompt, "engine_computed_at_decode":
            computed_at_decode, "counters_ok": counters_ok if at_prefill is not None else None, "carried": carried,
            "text": text, "frames": frames, "error": str(err or ""), "decoded": dec.get("output_tokens")}


def prefill_suffix(r: Run, base: dict) -> dict:
    """contract.prefill_suffix and I6: each mode the backend has, its counters against the engine."""
    modes = [True, False] if r.declared["can_defer"] else [False]
    got = [_one_suffix(r, base, m) for m in modes]
    r.daemon.service.defer_prefill = r.declared["defers_by_default"]
    for g in got:
        r.row("parity.deferred_prefill", f"{g['mode']} PrefillSuffix of {g['suffix_tokens']} tokens: the counters "
              "against the engine", g["counters_ok"], engine_work_at_prefill=g["engine_work_at_prefill"],
              counters=json.dumps(g["counters_moved"]), decode_prompt_tokens=g["decode_prompt_tokens"],
              engine_computed_at_decode=g["engine_computed_at_decode"], mode=g["mode"],
              suffix_tokens=g["suffix_tokens"])
    oks = [g["counters_ok"] for g in got if g["counters_ok"] is not None]
    r.values["conf_suffix_counters_exact"] = sum(oks) / len(oks) if oks else None
    deferred = next((g for g in got if g["mode"] == "deferred"), None)
    if deferred is not None:
        r.values["conf_deferred_engine_work"] = deferred["engine_work_at_prefill"]
        r.values["conf_deferred_carried"] = deferred["carried"]
    return {g["mode"]: g for g in got}


def decode(r: Run, base: dict, modes: dict) -> None:
    """contract.decode: a greedy stream (frames as the engine generates), then structured output."""
    plain = next(iter(modes.values()))
    usual = modes.get("deferred" if r.daemon.service.defer_prefill else "physical", plain)
    if not usual["error"]:  # the base model's greedy decode of the turn in the daemon's own mode, for the LoRA row
        base["text"] = usual["text"]
    r.values["conf_stream_frames"] = plain["frames"]
    r.values["conf_engine_decoded_tokens"] = plain["decoded"]
    r.row("contract.decode", "a greedy Decode streams the engine's tokens as frames",
          (plain["decoded"] or 0) > 0 and plain["frames"] >= min(2, plain["decoded"] or 0),
          frames=plain["frames"], engine_tokens=plain["decoded"], text=plain["text"][:80])
    sess = r.open()
    try:
        sess.ensure_prefix(base["pin"])
        sess.prefill_suffix(base["sin"])
        cfg = DecodeConfig(max_tokens=24, temperature=0.0, seed=7,
                           structured_output=StructuredOutputConfig("json_schema", json.dumps(SCHEMA)))
        text, frames, err = r.decode(sess, cfg)
    finally:
        sess.close()
    valid = None if err is not None else _valid(text)
    r.values["conf_structured_valid"] = valid
    r.row("contract.decode", "StructuredOutput{json_schema} constrains the engine's output", valid,
          text=text[:80], error=str(err or ""))


def _valid(text: str) -> bool:
    import jsonschema

    try:
        jsonschema.validate(json.loads(text), SCHEMA)
        return True
    except (ValueError, jsonschema.ValidationError):
        return False


def capabilities(r: Run, base: dict) -> None:
    """I2 and contract.explain_context: RemoveTail and RecomputeRange exercised (the latter by :func:`snapshot`),
    each against the report."""
    sess = r.open()
    try:
        system = base["system"]
        # a tail of more than two blocks (a word is at least one token), and no longer than it ever was
        tail_words = max(8, min(max(r.p.prompt_words, 48), 2 * r.block + 4))
        long_in, _ = r.inputs(system + " " + words(r.rng, tail_words), "x")
        short_in, _ = r.inputs(system, "x")
        sess.ensure_prefix(long_in)
        _, shared, _, _ = engine_turn(r, sess, short_in)
        again, _, recomputed, _ = engine_turn(r, sess, long_in)
        caps = sess.explain_context().residency
        reported = caps.capabilities if caps is not None else None
    finally:
        sess.close()
    lies, exercised = 0, 0
    tail = again.prefix_tokens - (shared or 0)
    if reported is not None and shared is not None and recomputed is not None and tail > 2 * r.block:
        removed = recomputed > tail / 2
        exercised += 1
        lies += removed != reported.remove_tail
        r.row("parity.capability_truth", "RemoveTail: a dropped tail is recomputed on extension exactly when removed",
              removed == reported.remove_tail, reported=reported.remove_tail, tail_tokens=tail,
              engine_computed_on_extension=recomputed)
    snap_case = r.values.get("_recompute")
    if reported is not None and snap_case is not None and snap_case["restored"] is not None:
        exercised += 1
        lies += snap_case["restored"] != reported.recompute_range
        r.row("parity.capability_truth", "RecomputeRange: a snapshot's tokens without the engine's state are "
              "re-prefilled by the engine and decode as the original exactly when reported",
              snap_case["restored"] == reported.recompute_range, reported=reported.recompute_range,
              observed=snap_case["observed"])
    r.values["conf_caps_exercised"] = exercised
    r.values["conf_caps_lies"] = lies if exercised else None
    rep = {k: getattr(reported, k) for k in ROW_CAPS} if reported is not None else {}
    r.values["_caps_row"] = rep == ROW_CAPS
    r.row("contract.explain_context", "the reported capabilities against the row's", rep == ROW_CAPS,
          reported=json.dumps(rep), row_values=json.dumps(ROW_CAPS))


def _restored(r: Run, snap: Any, original: str) -> tuple[dict, str]:
    """Restore ``snap`` into a fresh session and decode it greedily: whether the restore was accepted, what the
    engine handled meanwhile (prompt tokens computed plus served from cache, by its own counters), the output."""
    fresh = r.open()
    try:
        w0 = r.work()
        try:
            fresh.restore(snap)
        except Exception as e:  # noqa: BLE001 - the refusal is the reading
            return {"accepted": False, "observed": f"refused: {str(e)[:80]}"}, ""
        w1 = r.work()
        text, _, err = r.decode(fresh)
    finally:
        fresh.close()
    got = [key_delta(w0, w1, k) for k in (COMPUTED, CACHED)]
    handled = None if all(g is None for g in got) else sum(g or 0 for g in got)
    return {"accepted": True, "handled": handled, "equal": None if err else text == original,
            "observed": f"restored; the engine handled {handled} prompt tokens, output "
                        f"{'equal' if text == original else 'different'}"}, text


def _recompute_case(r: Run, case: dict, tokens: int) -> dict:
    """RecomputeRange as an operation, the report never read: the engine re-prefilled a snapshot's tokens
    without its state (its counters handled them, within a block) and the session decodes as the original."""
    if not case["accepted"]:
        return {"restored": False, "observed": case["observed"]}
    if case["handled"] is None or case["equal"] is None:
        return {"restored": None, "observed": case["observed"]}
    return {"restored": case["handled"] >= tokens - r.block and case["equal"], "observed": case["observed"]}


def snapshot(r: Run, base: dict) -> None:
    """contract.snapshot: snapshot a session, restore into a fresh one, both decode the same greedy text; then the
    same snapshot's tokens alone (no engine state), for RecomputeRange (I2)."""
    sess = r.open()
    try:
        sess.ensure_prefix(base["pin"])
        sess.prefill_suffix(base["sin"])
        snap = sess.snapshot()
        a, _, err_a = r.decode(sess)
    finally:
        sess.close()
    case, b = _restored(r, snap, a)
    equal = None if err_a or not case["accepted"] else case["equal"]
    r.values["conf_restore_output_equal"] = equal
    r.values["conf_snapshot_engine_blob"] = bool(snap.state_id)
    r.row("contract.snapshot", "Restore into a fresh session decodes what the snapshotted session decodes", equal,
          engine_blob=bool(snap.state_id), resident_tokens=snap.resident_tokens, original=a[:60], restored=b[:60])
    if snap.state_id:  # the engine's blob withheld: only tokens, texts and the manifest remain
        case, _ = _restored(r, replace(snap, state_id="", state=None), a)
    r.values["_recompute"] = None if err_a else _recompute_case(r, case, snap.resident_tokens)


def _small_window(r: Run, base: dict, small: Any) -> int | None:
    """NumCtx for the overflow and Describe rows, sized from a measured render: the small prefix as this cell
    renders and tokenizes it (a chat template's own header included) plus half the way to the stable prefix, so
    the small one fits and the stable one does not. None, with a row saying why, where no such window exists."""
    sess = r.open()
    try:
        k = sess.ensure_prefix(small).prefix_tokens
    except terr.TransportError as e:
        r.row("contract.overflow", "a window sized from the small prefix's render", None, observed=str(e)[:120])
        return None
    finally:
        sess.close()
    big = base["prefix_tokens"]
    if big - k < 2:
        r.row("contract.overflow", "a window sized from the small prefix's render", None,
              observed=f"the stable prefix renders to {big} tokens, the small one to {k}: no window lies between")
        return None
    return k + (big - k) // 2


def describe_overflow(r: Run, base: dict) -> None:
    """contract.describe and contract.overflow: a small window (sized from a measured render) described, Describe's
    figures held to the engine's own, and the window enforced before dispatch."""
    small, sin = r.inputs(words(r.rng, 2), words(r.rng, r.p.prompt_words + 4 * r.p.suffix_words))
    n = _small_window(r, base, small)
    if n is None:
        return
    info = r.client.describe(OpenSessionRequest(config=Config(num_ctx=n)))
    ev = r.client.evidence("Daemon")
    kv = r.client.evidence("KvBytes").get("bytes_per_token")  # the engine's, read again another way
    served = int(ev.get("context_tokens") or 0)
    want = min(n, served) if served else None
    r.values["conf_describe_window"] = info.effective_context
    r.values["conf_describe_window_right"] = None if want is None else info.effective_context == want
    r.values["conf_describe_kv_bytes_match"] = None if kv is None else info.kv_bytes_per_token == kv
    r.row("contract.describe", f"Describe at NumCtx {n}: its window and KV bytes per token against the engine's",
          r.values["conf_describe_window_right"] is not False and r.values["conf_describe_kv_bytes_match"] is not False,
          num_ctx=n, model_max_context=info.model_max_context, effective_context=info.effective_context,
          engine_context=served,
          kv_bytes_per_token=info.kv_bytes_per_token, engine_kv_bytes_per_token=kv)
    sess = r.open(num_ctx=n)
    work, right = 0, 0
    try:
        err, done = r.refused(lambda: sess.ensure_prefix(base["pin"]))
        detail = getattr(err, "overflow", None)
        ok = isinstance(err, terr.ErrContextOverflow) and detail is not None and detail.stage == "prefix" \
            and detail.num_ctx == n
        right += ok
        work += done or 0
        r.row("contract.overflow", "a prefix past NumCtx is refused before dispatch", ok,
              observed=str(err)[:120], engine_work=done)
        try:
            sess.ensure_prefix(small)
        except terr.TransportError as e:  # the window was sized to hold it: a refusal here is no reading
            r.row("contract.overflow", "the small prefix inside NumCtx", None, observed=str(e)[:120])
            return
        err, done = r.refused(lambda: sess.prefill_suffix(sin))
        detail = getattr(err, "overflow", None)
        ok2 = isinstance(err, terr.ErrContextOverflow) and detail is not None and detail.stage == "suffix" \
            and detail.resident_tokens > 0 and detail.num_ctx == n
        right += ok2
        work += done or 0
        r.row("contract.overflow", "a suffix past NumCtx is refused with stage, resident, additional and NumCtx", ok2,
              observed=str(err)[:120], engine_work=done)
        r.values["conf_engine_work_overflow"] = work if r.work() is not None else None
        r.values["_overflow_right"] = right == 2
    finally:
        sess.close()


def embed(r: Run) -> None:
    """contract.embed: refused with no engine work, or the engine's vector where the backend embeds."""
    got: list = []
    err, done = r.refused(lambda: got.append(r.client.embed(EmbedRequest(text=words(r.rng, 8)))))
    vec = got[0] if got else None
    r.values["conf_embed_vector"] = len(vec) if vec else 0
    r.values["conf_engine_work_embed"] = done
    r.values["_embed_refused"] = isinstance(err, terr.ErrUnsupportedFeature)
    r.row("contract.embed", "Embed", None, observed=terr.token_of(err) if err else f"a vector of {len(vec or [])}",
          engine_work=done, vector=len(vec) if vec else 0, refused=r.values["_embed_refused"])


def switch_and_lora(r: Run, base: dict, adapter: str | None) -> None:
    """contract.slot_switch (a stale generation refused; a reload of the same variant, whose salt is the one the
    engine held the prefix under, leaves the engine nothing to reuse; the old session stale) and contract.lora (the
    adapter's variant changes the engine's output; another identity is not served as it)."""
    sess = r.open(adapters=r.client.status().active.adapters)
    sess.ensure_prefix(base["pin"])  # the prefix the engine holds before the switch
    base_text = base.get("text")  # the base model's greedy decode of this turn (contract.decode's)
    if not base_text:
        sess.prefill_suffix(base["sin"])
        base_text, _, _ = r.decode(sess)
    gen = r.client.status().active.generation
    err, _ = r.refused(lambda: r.client.load_model(LoadModelRequest(expected_generation=gen + 7)))
    refusals = [isinstance(err, terr.ErrSlotGenerationStale)]
    r.row("contract.slot_switch", "LoadModel at a stale ExpectedGeneration is refused", refusals[-1],
          observed=terr.token_of(err) if err else "accepted")
    same = r.client.load_model(LoadModelRequest(adapters=r.client.status().active.adapters, expected_generation=gen))
    r.values["conf_switch_generation"] = same.generation - gen
    err, _ = r.refused(lambda: sess.ensure_prefix(base["pin"]))
    refusals.append(isinstance(err, terr.ErrSlotGenerationStale))
    r.row("contract.slot_switch", "a session of the old generation answers slot_generation_stale", refusals[-1],
          observed=terr.token_of(err) if err else "accepted", generation_moved=same.generation - gen)
    r.values["_switch_refusals"] = all(refusals)
    again = r.open(adapters=same.adapters)
    try:  # the same variant, so the same salt: only the teardown can keep the engine from reusing the prefix
        got = _turn_prefix(r, again, base["pin"], "after a reload of the same variant", "contract.slot_switch")
        r.values["conf_switch_engine_reuse"] = got["engine_reused"]
    finally:
        again.close()
    if not adapter:
        return
    active = r.client.load_model(LoadModelRequest(adapters=[AdapterSpec(path=adapter, scale=1.0)],
                                                  expected_generation=same.generation))
    new = r.open(adapters=active.adapters)
    try:
        new.ensure_prefix(base["pin"])
        new.prefill_suffix(base["sin"])
        text, _, _ = r.decode(new)
        salt = new.evidence().get("cache_salt")
    finally:
        new.close()
    _lora_rows(r, base, base_text, text, salt, active)


def _lora_rows(r: Run, base: dict, base_text: str, text: str, salt: str, active: Any) -> None:
    r.values["lora_changed_output"] = text != base_text
    r.row("contract.lora", "the adapter's variant decodes otherwise than the base model (applied by the engine)",
          text != base_text, base=base_text[:60], adapted=text[:60])
    want = cache_salt(base["pin"].manifest, active.adapters or [])
    r.row("contract.lora", "the session's cache_salt is manifest digest ⊕ adapter digests, in order, with scale",
          salt == want and salt != cache_salt(base["pin"].manifest), observed=salt[:16], expected=want[:16])
    spec = active.adapters[0]
    for label, other in (("at another scale", [replace(spec, scale=0.5)]), ("without it", None),
                         ("twice, in another order", [spec, replace(spec, scale=0.5)][::-1])):
        err, _ = r.refused(lambda o=other: r.open(adapters=o))
        ok = isinstance(err, (terr.ErrModelSwitchRequired, terr.ErrUnsupportedFeature))
        r.row("contract.lora", f"a session naming the adapter {label} is not served as the loaded variant", ok,
              observed=terr.token_of(err) if err else "accepted")
    r.values["_lora_identity"] = all(x["ok"] for x in r.rows if x["row"] == "contract.lora")


def fatal(r: Run, base: dict) -> None:
    """I1: an engine fault under a session; ErrSessionFatal, the report, and no engine call after it. The fault is
    then undone (the engine serves again), so a poisoned session that still reached the engine would move the
    engine's own work counters; a fresh session's call shows that they would have."""
    sess = r.open(adapters=r.client.status().active.adapters)
    sess.ensure_prefix(base["pin"])
    done = sess.fault()
    _, _, err = r.decode(sess)
    rep = sess.explain_context()
    failed = [s for s in sess.evidence()["stages"] if s.get("error")]
    try:
        healed = r.client.evidence("Heal").get("done")
    except terr.TransportError as e:  # no way back: the fresh session's call below shows the engine still broken
        healed = f"not undone: {e}"
    fresh_text, _ = r.inputs(words(r.rng, 4), "x")  # a text no one sent: work the engine would have to do
    w0 = r.work()
    again, _ = r.refused(lambda: sess.ensure_prefix(fresh_text))
    w1 = r.work()
    control = r.open(adapters=r.client.status().active.adapters)
    try:
        control.ensure_prefix(fresh_text)
        w2 = r.work()
    except terr.TransportError:
        w2 = None
    finally:
        control.close()
    r.values["conf_fatal_engine_failed"] = bool(failed) and isinstance(err, terr.ErrSessionFatal)
    r.values["conf_engine_work_after_fatal"] = work_delta(w0, w1)
    r.values["conf_engine_work_after_heal"] = work_delta(w1, w2)
    reported = (isinstance(err, terr.ErrSessionFatal) and rep.closed and bool(rep.fatal_error)
                and isinstance(again, terr.ErrSessionFatal))
    r.values["conf_fatal_reported"] = reported
    r.row("parity.fatal", "an engine fault poisons the session", reported, fault=done.get("done"),
          decode=terr.token_of(err) if err else "no error", fatal_error=rep.fatal_error[:120],
          after=terr.token_of(again) if again else "accepted", engine_failed=r.values["conf_fatal_engine_failed"])
    r.row("parity.fatal", "after the fault is undone, the poisoned session's call leaves the engine's work counters "
          "where they were, and a fresh session's moves them", r.values["conf_engine_work_after_fatal"] == 0 and
          (r.values["conf_engine_work_after_heal"] or 0) > 0, healed=healed,
          engine_work_poisoned=r.values["conf_engine_work_after_fatal"],
          engine_work_fresh=r.values["conf_engine_work_after_heal"])
    try:
        sess.close()
    except Exception:  # noqa: BLE001 - a fatal session may answer its close with its cause
        pass


# --------------------------------------------------------------------------- the rule


_WORK0 = Support("conf_engine_work_stale_fence", "==", 0)
_RESTS = {
    ("cell.wire", "confirmed"): ((_WORK0,),),
    ("cell.wire", "refuted"): ((Support("conf_engine_work_stale_fence", ">", 0),),),
    ("contract.manifest", "confirmed"): ((Support("conf_engine_reuse_same", ">", 0),
                                          Support("conf_engine_reuse_cross", "==", 0)),),
    ("contract.manifest", "refuted"): ((Support("conf_engine_reuse_cross", ">", 0),),),
    ("contract.ensure_prefix", "confirmed"): ((Support("conf_prefix_counters_exact", "==", 1.0),),),
    ("contract.ensure_prefix", "refuted"): ((Support("conf_prefix_counters_exact", "<", 1.0),),),
    ("contract.prefill_suffix", "confirmed"): ((Support("conf_deferred_engine_work", "==", 0),
                                                Support("conf_deferred_carried", "==", True),
                                                Support("conf_suffix_counters_exact", "==", 1.0)),),
    ("contract.prefill_suffix", "refuted"): ((Support("conf_deferred_engine_work", ">", 0),),
                                             (Support("conf_suffix_counters_exact", "<", 1.0),)),
    ("contract.prefill_suffix", "not-applicable"): ((Support("conf_suffix_counters_exact", "==", 1.0),),),
    ("contract.decode", "confirmed"): ((Support("conf_engine_decoded_tokens", ">", 0),
                                        Support("conf_structured_valid", "==", True)),),
    ("contract.decode", "partial"): ((Support("conf_engine_decoded_tokens", ">", 0),
                                      Support("conf_structured_valid", "==", True)),),
    ("contract.decode", "refuted"): ((Support("conf_structured_valid", "==", False),),),
    ("contract.explain_context", "confirmed"): ((Support("conf_caps_lies", "==", 0),),),
    ("contract.explain_context", "not-applicable"): ((Support("conf_caps_lies", "==", 0),),),
    ("contract.explain_context", "refuted"): ((Support("conf_caps_lies", ">", 0),),),
    ("parity.capability_truth", "confirmed"): ((Support("conf_caps_lies", "==", 0),),),
    ("parity.capability_truth", "refuted"): ((Support("conf_caps_lies", ">", 0),),),
    ("contract.snapshot", "confirmed"): ((Support("conf_restore_output_equal", "==", True),),),
    ("contract.snapshot", "not-applicable"): ((Support("conf_restore_output_equal", "==", True),),),
    ("contract.snapshot", "refuted"): ((Support("conf_restore_output_equal", "==", False),),),
    ("contract.describe", "confirmed"): ((Support("conf_engine_work_overflow", "==", 0),
                                          Support("conf_describe_window_right", "==", True),
                                          Support("conf_describe_kv_bytes_match", "==", True)),
                                         (Support("conf_engine_work_overflow", "==", 0),
                                          Support("conf_describe_window_right", "==", True))),
    ("contract.describe", "refuted"): ((Support("conf_engine_work_overflow", ">", 0),),
                                       (Support("conf_describe_kv_bytes_match", "==", False),),
                                       (Support("conf_describe_window_right", "==", False),)),
    ("contract.overflow", "confirmed"): ((Support("conf_engine_work_overflow", "==", 0),),),
    ("contract.overflow", "refuted"): ((Support("conf_engine_work_overflow", ">", 0),),),
    ("contract.embed", "confirmed"): ((Support("conf_engine_work_embed", "==", 0),
                                       Support("conf_embed_vector", "==", 0)),),
    ("contract.embed", "not-applicable"): ((Support("conf_embed_vector", ">", 0),),),
    ("contract.embed", "refuted"): ((Support("conf_engine_work_embed", ">", 0),),),
    ("contract.lora", "confirmed"): ((Support("lora_changed_output", "==", True),),),
    ("contract.lora", "refuted"): ((Support("lora_changed_output", "==", False),),),
    ("contract.slot_switch", "confirmed"): ((Support("conf_switch_engine_reuse", "==", 0),
                                             Support("conf_engine_reuse_same", ">", 0)),),
    ("contract.slot_switch", "refuted"): ((Support("conf_switch_engine_reuse", ">", 0),),),
    ("parity.fatal", "confirmed"): ((Support("conf_fatal_engine_failed", "==", True),
                                     Support("conf_engine_work_after_fatal", "==", 0),
                                     Support("conf_engine_work_after_heal", ">", 0)),),
    ("parity.fatal", "refuted"): ((Support("conf_engine_work_after_fatal", ">", 0),),),
    ("parity.deferred_prefill", "confirmed"): ((Support("conf_suffix_counters_exact", "==", 1.0),
                                                Support("conf_deferred_engine_work", "==", 0)),),
    ("parity.deferred_prefill", "not-applicable"): ((Support("conf_suffix_counters_exact", "==", 1.0),),),
    ("parity.deferred_prefill", "refuted"): ((Support("conf_suffix_counters_exact", "<", 1.0),),
                                             (Support("conf_deferred_engine_work", ">", 0),)),
}


def _s(metric: str, op: str, value: Any) -> Support:
    return Support(metric, op, value)


def _is(v: dict, k: str, want: Any) -> bool:
    return v.get(k) is not None and v.get(k) == want


def _pos(v: dict, k: str) -> bool:
    return isinstance(v.get(k), (int, float)) and not isinstance(v.get(k), bool) and v[k] > 0


def decide_wire(v: dict, d: dict) -> Decision:
    if _pos(v, "conf_engine_work_stale_fence"):
        return Decision("refuted", "stale-reached-engine", rests_on=(_s("conf_engine_work_stale_fence", ">", 0),))
    if _is(v, "conf_wire_refusals", 1.0) and _is(v, "conf_engine_work_stale_fence", 0):
        return Decision("confirmed", "fenced", rests_on=(_WORK0,))
    return Decision("inconclusive", "wire-unread" if v.get("conf_engine_work_stale_fence") is None else "wrong-token")


def decide_manifest(v: dict, d: dict) -> Decision:
    if _pos(v, "conf_engine_reuse_cross"):
        return Decision("refuted", "crossed", rests_on=(_s("conf_engine_reuse_cross", ">", 0),))
    if _pos(v, "conf_engine_reuse_same") and _is(v, "conf_engine_reuse_cross", 0):
        return Decision("confirmed", "kept-apart", rests_on=(_s("conf_engine_reuse_same", ">", 0),
                                                             _s("conf_engine_reuse_cross", "==", 0)))
    return Decision("inconclusive", "no-warm-hit")


def _exact(v: dict, k: str, verdict_ok: str, case: str, **kw: Any) -> Decision:
    x = v.get(k)
    if x is None:
        return Decision("inconclusive", "unread")
    if x < 1.0:
        return Decision("refuted", "counters-lie", rests_on=(_s(k, "<", 1.0),))
    return Decision(verdict_ok, case, rests_on=(_s(k, "==", 1.0),))


def decide_ensure_prefix(v: dict, d: dict) -> Decision:
    return _exact(v, "conf_prefix_counters_exact", "confirmed", "exact")


def decide_prefill_suffix(v: dict, d: dict) -> Decision:
    if not d["can_defer"]:
        return _exact(v, "conf_suffix_counters_exact", "not-applicable", "prefills-now")
    if _pos(v, "conf_deferred_engine_work"):
        return Decision("refuted", "not-deferred", rests_on=(_s("conf_deferred_engine_work", ">", 0),))
    exact = _exact(v, "conf_suffix_counters_exact", "confirmed", "deferred")
    if exact.verdict != "confirmed":
        return exact
    if _is(v, "conf_deferred_carried", True) and _is(v, "conf_deferred_engine_work", 0):
        return Decision("confirmed", "deferred", rests_on=(_s("conf_deferred_engine_work", "==", 0),
                                                           _s("conf_deferred_carried", "==", True),
                                                           _s("conf_suffix_counters_exact", "==", 1.0)))
    return Decision("inconclusive", "decode-not-read")


def decide_decode(v: dict, d: dict) -> Decision:
    if v.get("conf_structured_valid") is False:
        return Decision("refuted", "schema-broken", rests_on=(_s("conf_structured_valid", "==", False),))
    if _pos(v, "conf_engine_decoded_tokens") and _is(v, "conf_structured_valid", True):
        rests = (_s("conf_engine_decoded_tokens", ">", 0), _s("conf_structured_valid", "==", True))
        streamed = (v.get("conf_stream_frames") or 0) >= min(2, v["conf_engine_decoded_tokens"])
        return Decision("confirmed" if streamed else "partial", "streamed" if streamed else "one-frame",
                        rests_on=rests)
    return Decision("inconclusive", "no-output")


def decide_caps(v: dict, d: dict, row: bool) -> Decision:
    lies = v.get("conf_caps_lies")
    if lies is None:
        return Decision("inconclusive", "not-exercised")
    if lies > 0:
        return Decision("refuted", "lies", rests_on=(_s("conf_caps_lies", ">", 0),))
    verdict = "confirmed" if not row or v.get("_caps_row") else "not-applicable"
    return Decision(verdict, "truthful" if verdict == "confirmed" else "other-caps",
                    rests_on=(_s("conf_caps_lies", "==", 0),))


def decide_snapshot(v: dict, d: dict) -> Decision:
    eq = v.get("conf_restore_output_equal")
    if eq is None:
        return Decision("inconclusive", "no-decode")
    if eq is False:
        return Decision("refuted", "differs", rests_on=(_s("conf_restore_output_equal", "==", False),))
    return Decision("not-applicable" if v.get("conf_snapshot_engine_blob") else "confirmed",
                    "engine-blob" if v.get("conf_snapshot_engine_blob") else "text-level",
                    rests_on=(_s("conf_restore_output_equal", "==", True),))


def decide_describe(v: dict, d: dict) -> Decision:
    if _pos(v, "conf_engine_work_overflow"):
        return Decision("refuted", "not-enforced", rests_on=(_s("conf_engine_work_overflow", ">", 0),))
    if v.get("conf_describe_kv_bytes_match") is False:
        return Decision("refuted", "kv-bytes", rests_on=(_s("conf_describe_kv_bytes_match", "==", False),))
    if v.get("conf_describe_window_right") is False:
        return Decision("refuted", "window", rests_on=(_s("conf_describe_window_right", "==", False),))
    if not (_is(v, "conf_engine_work_overflow", 0) and v.get("_overflow_right")
            and _is(v, "conf_describe_window_right", True)):
        return Decision("inconclusive", "unread")
    rests = (_s("conf_engine_work_overflow", "==", 0), _s("conf_describe_window_right", "==", True))
    if v.get("conf_describe_kv_bytes_match") is True:
        rests += (_s("conf_describe_kv_bytes_match", "==", True),)
    return Decision("confirmed", "enforced", rests_on=rests)


def decide_overflow(v: dict, d: dict) -> Decision:
    if _pos(v, "conf_engine_work_overflow"):
        return Decision("refuted", "reached-engine", rests_on=(_s("conf_engine_work_overflow", ">", 0),))
    if _is(v, "conf_engine_work_overflow", 0) and v.get("_overflow_right"):
        return Decision("confirmed", "before-dispatch", rests_on=(_s("conf_engine_work_overflow", "==", 0),))
    return Decision("inconclusive", "wrong-detail" if v.get("conf_engine_work_overflow") == 0 else "unread")


def decide_embed(v: dict, d: dict) -> Decision:
    if _pos(v, "conf_embed_vector"):
        return Decision("not-applicable", "embeds", rests_on=(_s("conf_embed_vector", ">", 0),))
    if _pos(v, "conf_engine_work_embed"):
        return Decision("refuted", "dispatched", rests_on=(_s("conf_engine_work_embed", ">", 0),))
    if v.get("_embed_refused") and _is(v, "conf_engine_work_embed", 0):
        return Decision("confirmed", "refused", rests_on=(_s("conf_engine_work_embed", "==", 0),
                                                          _s("conf_embed_vector", "==", 0)))
    return Decision("inconclusive", "unread")


def decide_lora(v: dict, d: dict) -> Decision:
    changed = v.get("lora_changed_output")
    if changed is None:
        return Decision("inconclusive", "no-adapter")
    if changed is False:
        return Decision("refuted", "not-applied", rests_on=(_s("lora_changed_output", "==", False),))
    if not v.get("_lora_identity"):
        return Decision("inconclusive", "identity")  # the salt or the identity check failed: the daemon's own word
    return Decision("confirmed", "applied", rests_on=(_s("lora_changed_output", "==", True),))


def decide_switch(v: dict, d: dict) -> Decision:
    if _pos(v, "conf_switch_engine_reuse"):
        return Decision("refuted", "leaked", rests_on=(_s("conf_switch_engine_reuse", ">", 0),))
    if not _pos(v, "conf_engine_reuse_same"):  # an engine that reuses nothing reuses nothing after a switch either
        return Decision("inconclusive", "no-reuse-to-lose")
    if _is(v, "conf_switch_engine_reuse", 0) and v.get("conf_switch_generation") == 1 and v.get("_switch_refusals"):
        return Decision("confirmed", "fresh", rests_on=(_s("conf_switch_engine_reuse", "==", 0),
                                                        _s("conf_engine_reuse_same", ">", 0)))
    return Decision("inconclusive", "unread")


def decide_fatal(v: dict, d: dict) -> Decision:
    if _pos(v, "conf_engine_work_after_fatal"):
        return Decision("refuted", "reused-poisoned", rests_on=(_s("conf_engine_work_after_fatal", ">", 0),))
    if not _is(v, "conf_fatal_engine_failed", True):
        return Decision("inconclusive", "no-fault")
    if not v.get("conf_fatal_reported"):
        return Decision("inconclusive", "not-reported")
    if _is(v, "conf_engine_work_after_fatal", 0) and _pos(v, "conf_engine_work_after_heal"):
        return Decision("confirmed", "poisoned", rests_on=(_s("conf_fatal_engine_failed", "==", True),
                                                           _s("conf_engine_work_after_fatal", "==", 0),
                                                           _s("conf_engine_work_after_heal", ">", 0)))
    return Decision("inconclusive", "not-healed" if v.get("conf_engine_work_after_fatal") == 0 else "unread")


def decide_deferred(v: dict, d: dict) -> Decision:
    if not d["can_defer"]:
        return _exact(v, "conf_suffix_counters_exact", "not-applicable", "no-opt-in")
    if _pos(v, "conf_deferred_engine_work"):
        return Decision("refuted", "not-deferred", rests_on=(_s("conf_deferred_engine_work", ">", 0),))
    exact = _exact(v, "conf_suffix_counters_exact", "confirmed", "both-modes")
    if exact.verdict == "confirmed":
        if not _is(v, "conf_deferred_engine_work", 0):
            return Decision("inconclusive", "unread")
        return Decision("confirmed", "both-modes", rests_on=(_s("conf_suffix_counters_exact", "==", 1.0),
                                                             _s("conf_deferred_engine_work", "==", 0)))
    return exact


DECIDE: dict[str, Callable[[dict, dict], Decision]] = {
    "cell.wire": decide_wire, "contract.manifest": decide_manifest, "contract.ensure_prefix": decide_ensure_prefix,
    "contract.prefill_suffix": decide_prefill_suffix, "contract.decode": decide_decode,
    "contract.explain_context": lambda v, d: decide_caps(v, d, True), "contract.snapshot": decide_snapshot,
    "contract.describe": decide_describe, "contract.embed": decide_embed, "contract.lora": decide_lora,
    "contract.slot_switch": decide_switch, "contract.overflow": decide_overflow, "parity.fatal": decide_fatal,
    "parity.capability_truth": lambda v, d: decide_caps(v, d, False), "parity.deferred_prefill": decide_deferred,
}
"""Each row's ladder: a pure function of the run's readings (``v``) and what the adapter declares of itself (``d``)."""

WORDS_OF = {
    "stale-reached-engine": "a call carrying a stale fence reached the engine",
    "fenced": "every call but Health is fenced: a stale fence, another owner's handle and an unknown handle came back "
              "as stale_fence / session_closed, and the engine did nothing meanwhile",
    "wrong-token": "the engine was untouched, but a refusal came back with another token than errors.go gives",
    "wire-unread": "the engine keeps no work counter the daemon can read",
    "crossed": "the engine reused KV across manifests of different runtime identity",
    "kept-apart": "the engine reused the prefix under its own manifest and nothing under another runtime identity",
    "no-warm-hit": "the engine reused nothing even for a repeat under the same manifest",
    "exact": "every PrefixStatus equals what the engine's own counters, read beside the call, say it reused and "
             "computed (within a block)",
    "counters-lie": "a counter of the contract disagrees with what the engine counted",
    "unread": "the engine's count was not read (its work counters say nothing of it)",
    "not-deferred": "in deferred mode PrefillSuffix made the engine work: it was not deferred",
    "deferred": "PrefillSuffix deferred the suffix (no engine work), the next decode computed it, and the "
                "DeferredPrefill* counters said so",
    "decode-not-read": "the decode's engine count was not read",
    "prefills-now": "this backend has no deferred mode (modeld's llama cell has none); PrefillSuffix prefilled at once "
                    "and the PhysicalPrefill* counters match the engine's work",
    "schema-broken": "the engine's output under StructuredOutput{json_schema} does not validate",
    "streamed": "Decode streamed the engine's tokens frame by frame, and the structured output validated",
    "one-frame": "the structured output validated, but Decode delivered the stream as one frame",
    "no-output": "the engine decoded nothing",
    "not-exercised": "no capability's operation could be read",
    "lies": "a reported capability contradicts what the engine did in its operation",
    "truthful": "each exercised capability is reported exactly as the engine behaved",
    "other-caps": "this backend reports other capabilities than the row's (modeld's llama cell: capabilities.go), "
                  "each exercised one as the engine behaved",
    "no-decode": "a decode failed",
    "differs": "the restored session decodes otherwise than the one snapshotted",
    "engine-blob": "the snapshot carries the engine's own state (as modeld's llama cell does); restored, it decodes "
                   "the same",
    "text-level": "a text-level snapshot (no engine state): restored by re-prefill, it decodes the same",
    "not-enforced": "a request past the described window made the engine work",
    "kv-bytes": "Describe's KV bytes per token differ from the engine's own, read again another way",
    "enforced": "Describe's window is the NumCtx asked for, within the engine's own context, and it is enforced before "
                "dispatch (the engine untouched past it); its KV bytes per token, where the engine states them, are "
                "the engine's own read again another way",
    "window": "Describe's EffectiveContext is not the NumCtx asked for within the engine's own context",
    "reached-engine": "a request past NumCtx reached the engine",
    "before-dispatch": "requests past NumCtx were refused as context_overflow with their detail, the engine untouched",
    "wrong-detail": "the engine was untouched, but the refusal lacked the overflow's detail",
    "embeds": "this backend embeds (modeld's llama cell does, embed.go): the engine returned a vector",
    "dispatched": "Embed made the engine work",
    "refused": "Embed was refused as unsupported_feature with no engine work",
    "no-adapter": "no adapter was loaded",
    "not-applied": "the adapter's variant decodes as the base model: the engine did not apply it",
    "identity": "the adapter changed the output, but the derived salt or the variant identity was wrong",
    "applied": "the adapter's variant changes the engine's output, its salt folds the adapter in order with scale, "
               "and no other identity is served as it",
    "leaked": "after a reload of the same variant the engine reused KV from before it",
    "no-reuse-to-lose": "the engine reused nothing even for a repeat before the switch, so reusing nothing after it "
                        "shows nothing (no room to differ)",
    "fresh": "the switch advanced the generation by one, a stale generation was refused, and after a reload of the "
             "same variant (the salt unchanged) the engine reused nothing from before",
    "reused-poisoned": "after the fault the poisoned session's call moved the engine's work counters: it went back "
                       "to the engine",
    "poisoned": "the engine failed, the session answered session_fatal with FatalError and Closed, and once the "
                "fault was undone its call left the engine's work counters where they were while a fresh session's "
                "moved them: it never reached the engine again",
    "not-healed": "the session reported the fault, but the engine did not serve a fresh session after the fault was "
                  "undone, so whether the poisoned one stayed off it cannot be read",
    "not-reported": "the engine failed but the session did not report fatal",
    "no-fault": "the fault lever did not make the engine fail",
    "no-opt-in": "this backend has no deferred mode: DeferredPrefill* stay a truthful zero and the physical counters "
                 "match the engine",
    "both-modes": "in each mode the counters moved exactly as the engine worked",
}


class Conformance(Probe):
    version = "3"  # 3: every reading on its rows (re-derived from them); the slot switch confirms only where the
    # engine reused the prefix before it (else no room to differ)
    measures = ("prompt_words", "suffix_words", "context_tokens", "max_tokens", "threads", "seed")
    claims = ROWS
    figures = (Figure("rows", "conformance_rows"),)
    rests = _RESTS
    Params = Params

    def run(self, ctx: ProbeContext, p: Params) -> Outcome:
        from .. import cells
        from ..transport.daemon import Daemon

        if ctx.engine not in cells.served_as_cell():
            raise NotRunnable(f"{ctx.engine} is not served as a cell on modeld's wire (cell engines: "
                              f"{', '.join(cells.served_as_cell())})")
        options = {"context_tokens": p.context_tokens} | ctx.fixed_threads(p.threads) | dict(ctx.cell_options)
        with Daemon(ctx.engine, ctx.model, options=options, faults=True, opener=_opener(ctx)) as d:
            client = d.client()
            ev = client.evidence("Daemon")
            ident = ManifestIdentity(profile_id="workbench-conformance", backend=ev["backend"], add_bos=True,
                                     runtime_digest="1" * 64)
            run = Run(d, client, p, np.random.default_rng(p.seed), ident, ev["declared"],
                      max(int(ev.get("block_tokens") or 1), 1))
            _all_rows(run, ctx, p)
        out = verdict(run.rows, run.values, run.declared, ctx.engine)
        out.inputs = {"declared": dict(run.declared), "block": run.block}
        return out

    def from_evidence(self, evidence, p) -> Outcome:
        """Every row's ladder again on the readings its rows give (:func:`readings`), with what the adapter declared
        of itself and the engine's block, as the run recorded them."""
        given = evidence["inputs"]
        return verdict(evidence["rows"], readings(evidence["rows"], int(given["block"])), given["declared"], "")


def _opener(ctx: ProbeContext) -> Callable[..., Any]:
    def opener(engine: str, model: str, **options: Any) -> Any:
        return ctx.open(None if model == ctx.model else model, **options)
    return opener


def _all_rows(run: Run, ctx: ProbeContext, p: Params) -> None:
    wire(run)
    base = manifest_and_prefix(run)
    modes = prefill_suffix(run, base)
    decode(run, base, modes)
    snapshot(run, base)
    capabilities(run, base)
    describe_overflow(run, base)
    embed(run)
    adapter = _adapter(run, ctx, p)
    switch_and_lora(run, base, adapter)
    fatal(run, base)


def _adapter(run: Run, ctx: ProbeContext, p: Params) -> str | None:
    """A LoRA adapter written from the model's own geometry (the wing's format), or None where none can be."""
    try:
        return run.daemon.service.session_cls.write_adapter(run.daemon.service.cell, ctx.scratch("wblora-"), p.seed)
    except (NotImplementedError, NotRunnable, ImportError) as e:
        run.row("contract.lora", "an adapter for this engine", None, observed=str(e))
        return None


def _mine(rows: list[dict], claim: str, check: str = "") -> list[dict]:
    return [x for x in rows if x["row"] == claim and str(x.get("check", "")).startswith(check)]


def _one(rows: list[dict], claim: str, check: str) -> dict:
    got = _mine(rows, claim, check)
    return got[0] if got else {}


def _share(oks: list) -> float | None:
    oks = [o for o in oks if o is not None]
    return sum(oks) / len(oks) if oks else None


def _work(rows: list[dict]) -> int | None:
    """Engine work summed over ``rows`` (their ``engine_work``); None where the engine keeps no work counter."""
    done = [x.get("engine_work") for x in rows]
    return None if all(d is None for d in done) else sum(d or 0 for d in done)


def readings(rows: list[dict], block: int) -> dict[str, Any]:
    """The run's readings (what each row's ladder reads) again from the rows it recorded: each the engine's counts
    and outputs as the rows carry them, by the same arithmetic the run did (``block``: the engine's block, in
    tokens). :meth:`Conformance.from_evidence` gives the verdicts again from these."""
    return _session_readings(rows, block) | _slot_readings(rows)


def _session_readings(rows: list[dict], block: int) -> dict[str, Any]:
    """The wire's, the manifest's, the prefix's and suffix's, and Decode's readings (:func:`readings`)."""
    v: dict[str, Any] = {}
    wire_rows = [x for x in _mine(rows, "cell.wire") if "expected" in x]
    if wire_rows:
        v["conf_wire_refusals"] = sum(bool(x["ok"]) for x in wire_rows) / len(wire_rows)
        v["conf_engine_work_stale_fence"] = _work(wire_rows)
    v["conf_engine_reuse_same"] = _one(rows, "contract.manifest", "a repeat").get("engine_reused")
    v["conf_engine_reuse_cross"] = _one(rows, "contract.manifest", "the same text").get("engine_reused")
    v["conf_prefix_counters_exact"] = _share([x["ok"] for x in _mine(rows, "contract.ensure_prefix")])
    modes = _mine(rows, "parity.deferred_prefill")
    v["conf_suffix_counters_exact"] = _share([x["ok"] for x in modes])
    deferred = next((x for x in modes if x.get("mode") == "deferred"), None)
    if deferred is not None:
        v["conf_deferred_engine_work"] = deferred["engine_work_at_prefill"]
        done = deferred["engine_computed_at_decode"]
        v["conf_deferred_carried"] = None if done is None else done >= deferred["suffix_tokens"] - block
    stream, structured = _one(rows, "contract.decode", "a greedy"), _one(rows, "contract.decode", "StructuredOutput")
    v["conf_stream_frames"], v["conf_engine_decoded_tokens"] = stream.get("frames"), stream.get("engine_tokens")
    v["conf_structured_valid"] = structured.get("ok")
    return v


def _slot_readings(rows: list[dict]) -> dict[str, Any]:
    """The capability, snapshot, Describe, overflow, Embed, switch, LoRA and fault readings (:func:`readings`)."""
    v: dict[str, Any] = {}
    caps = _mine(rows, "parity.capability_truth")
    v["conf_caps_exercised"] = len(caps)
    v["conf_caps_lies"] = sum(not x["ok"] for x in caps) if caps else None
    v["_caps_row"] = bool(_one(rows, "contract.explain_context", "").get("ok"))
    snap = _one(rows, "contract.snapshot", "")
    v["conf_restore_output_equal"], v["conf_snapshot_engine_blob"] = snap.get("ok"), bool(snap.get("engine_blob"))
    described = _one(rows, "contract.describe", "Describe at")
    if described:
        n, served = int(described["num_ctx"]), int(described.get("engine_context") or 0)
        want, kv = (min(n, served) if served else None), described.get("engine_kv_bytes_per_token")
        v["conf_describe_window"] = described.get("effective_context")
        v["conf_describe_window_right"] = None if want is None else described.get("effective_context") == want
        v["conf_describe_kv_bytes_match"] = None if kv is None else described.get("kv_bytes_per_token") == kv
    prefix, suffix = _one(rows, "contract.overflow", "a prefix past"), _one(rows, "contract.overflow", "a suffix past")
    if suffix:  # the run reads the overflow only once both refusals were asked for
        v["conf_engine_work_overflow"] = _work([prefix, suffix])
        v["_overflow_right"] = bool(prefix.get("ok")) and bool(suffix.get("ok"))
    emb = _one(rows, "contract.embed", "Embed")
    v["conf_embed_vector"], v["conf_engine_work_embed"] = emb.get("vector"), emb.get("engine_work")
    v["_embed_refused"] = bool(emb.get("refused"))
    stale = _one(rows, "contract.slot_switch", "a session of the old generation")
    v["conf_switch_generation"] = stale.get("generation_moved")
    v["_switch_refusals"] = all(x.get("ok") for x in (_one(rows, "contract.slot_switch", "LoadModel at a stale"), stale))
    v["conf_switch_engine_reuse"] = _one(rows, "contract.slot_switch", "EnsurePrefix after a reload").get(
        "engine_reused")
    applied = _one(rows, "contract.lora", "the adapter's variant")
    if applied:
        v["lora_changed_output"] = applied["ok"]
        v["_lora_identity"] = all(x["ok"] for x in _mine(rows, "contract.lora"))
    poisoned, undone = _one(rows, "parity.fatal", "an engine fault"), _one(rows, "parity.fatal", "after the fault")
    v["conf_fatal_engine_failed"] = poisoned.get("engine_failed")
    v["conf_engine_work_after_fatal"] = undone.get("engine_work_poisoned")
    v["conf_engine_work_after_heal"] = undone.get("engine_work_fresh")
    v["conf_fatal_reported"] = poisoned.get("ok")
    return v


def verdict(rows: list[dict], values: dict, declared: dict, engine: str) -> Outcome:
    """Each row's ladder over the run's readings; the finding's own verdict is the wire's (the cell answers at all)."""
    decisions = {c: DECIDE[c](values, declared) for c in ROWS}
    metrics = {k: v for k, v in values.items() if not k.startswith("_") and v is not None}
    reasons = {c: WORDS_OF.get(dd.case, dd.case) + "." for c, dd in decisions.items()}
    head = decisions["cell.wire"]
    tally = {}
    for dd in decisions.values():
        tally[dd.verdict] = tally.get(dd.verdict, 0) + 1
    summary = (f"modeld's contract through {engine}'s daemon, row by row: "
               + ", ".join(f"{n} {v}" for v, n in sorted(tally.items())) + ". " + reasons["cell.wire"])
    return Outcome(head.verdict, summary, metrics, rows,
                   notes=[f"{c}: {dd.verdict} ({reasons[c]})" for c, dd in decisions.items()],
                   claim_verdicts={c: dd.verdict for c, dd in decisions.items()},
                   rests_on=head.rests_on, claim_rests_on={c: dd.rests_on for c, dd in decisions.items()},
                   claim_reasons=reasons)


__all__ = ["Conformance", "DECIDE", "Params", "ROWS", "Run", "readings", "verdict"]
