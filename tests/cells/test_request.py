"""The request-level cells' shared base (``cells/request.py``), through a toy engine.

``ToyCell`` stands in for an engine that takes whole requests and reports reuse itself, the way
TensorRT-LLM and vLLM do: a pool of hash-keyed blocks shared by every slot, keyed by the salt a request
carries, with reuse counted in whole blocks. What is tested is the base's own part: slot bookkeeping,
the checks before dispatch, text snapshots, the slot switch and the lifecycle. The engines' mechanisms
are tested in ``test_trtllm.py`` (its double) and ``test_vllm.py`` (the real engine).
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Iterator

import pytest

from workbench.cells.request import RequestCell, Slot, Step, Warm
from workbench.engine import (ContextOverflow, EngineUnavailable, ManifestMismatch, Retention, Snapshot,
                                UnsupportedFeature, WorkbenchError)

BLOCK = 4


@dataclass(frozen=True)
class ToyOptions:
    slots: int = 2
    adapters: tuple[str, ...] = ()
    pool_tokens: int = 64


class ToyEngine:
    """Whole blocks of a request's prompt are stored under its salt; a prompt's last token is never reused."""

    def __init__(self) -> None:
        self.blocks: set[tuple[str, tuple[int, ...]]] = set()
        self.requests: list[tuple[list[int], str | None]] = []

    def reused(self, tokens: list[int], key: str | None) -> int:
        n = 0
        while n + BLOCK < len(tokens) and (key, tuple(tokens[:n + BLOCK])) in self.blocks:
            n += BLOCK
        return n

    def run(self, tokens: list[int], key: str | None) -> int:
        self.requests.append((list(tokens), key))
        reused = self.reused(tokens, key)
        self.blocks |= {(key, tuple(tokens[:n])) for n in range(BLOCK, len(tokens) + 1, BLOCK)}
        return reused


class ToyCell(RequestCell):
    engine = "toy"
    label = "Toy"
    prefill_now = True

    def __init__(self, opts: ToyOptions = ToyOptions(), *, fail_start: bool = False,
                 tmp_root: str | None = None) -> None:
        self.model = SimpleNamespace(sha256="toy-model", name="toy")
        self.opts = opts
        self.context_tokens = 32
        self._vocab_size = 100
        self.fail_start, self.tmp_root = fail_start, tmp_root
        self.starts = 0
        self._begin(opts.slots)

    def _start(self) -> None:
        self._tmp = self._tmp or tempfile.mkdtemp(prefix="workbench-toy-", dir=self.tmp_root)
        if self.fail_start:
            raise RuntimeError("the engine did not start")
        self.starts += 1
        self._llm = ToyEngine()

    def _stop(self) -> None:
        self._llm = None

    def _warm(self, tokens: list[int], key: str, retention: Retention | None, *, slot: int = 0) -> Warm:
        reused = self._llm.run(tokens, key)
        return Warm(reused, "toy_counter", {"cached": reused}, 0.0)

    def _stream(self, prompt: list[int], st: Slot, sampling: dict[str, Any]) -> Iterator[Step]:
        reused = self._llm.run(prompt, st.key)
        text = ""
        for i in range(sampling["max_tokens"]):  # one token per output: the prompt's last token + 1 + i
            piece = f"<{prompt[-1] + 1 + i}>"
            text += piece
            yield Step([prompt[-1] + 1 + i], piece, text, None, {"cached": reused})

    def _chat_tokens(self, messages: list, *, continuation: bool) -> list[int]:
        raise AssertionError("not used")

    def _capacity_tokens(self) -> int:
        return self.opts.pool_tokens

    @property
    def _granularity(self) -> int:
        return BLOCK

    def _context_notes(self, st: Slot) -> list[str]:
        return [f"toy: last request cached {st.counters.get('cached')}"]


class RetainingToyCell(ToyCell):
    """A toy engine with a retention priority (as TensorRT-LLM has)."""

    def _slot_retention(self, requested: Retention | None) -> Retention:
        return requested or Retention(35, None)


@pytest.fixture
def cell():
    with ToyCell() as c:
        yield c


P = list(range(10, 22))  # 12 tokens: three blocks


# ------------------------------------------------------------------ ensure_prefix / prefill / decode


def test_ensure_prefix_reports_the_engines_reuse_and_keeps_the_slot(cell):
    first = cell.ensure_prefix(P, salt="s")
    assert (first.reused_tokens, first.computed_tokens, first.source) == (0, 12, "toy_counter")
    again = cell.ensure_prefix(P, salt="s")
    assert (again.reused_tokens, again.computed_tokens) == (8, 4)  # whole blocks, never the last token
    assert again.exact is False and again.granularity_tokens == BLOCK
    assert cell.explain_context().tokens == 12 and cell._llm.requests[-1] == (P, cell.manifest.cache_key("s"))


def test_a_divergent_prefix_drops_the_tail_and_another_salt_drops_everything(cell):
    cell.ensure_prefix(P, salt="s")
    assert cell.ensure_prefix(P[:6] + [90, 91], salt="s").dropped_tokens == 6
    assert cell.ensure_prefix(P[:6] + [90, 91], salt="other").dropped_tokens == 8
    other = cell.ensure_prefix(P, salt="other")
    assert other.reused_tokens == 4  # the engine's pool is keyed by salt: only the block it stored under "other"


def test_each_slot_keeps_its_own_sequence(cell):
    cell.ensure_prefix(P, slot=0, salt="s")
    cell.ensure_prefix(P[:5], slot=1, salt="s")
    assert [cell.explain_context(slot=s).tokens for s in (0, 1)] == [12, 5]
    with pytest.raises(ValueError, match=r"slot 2 does not exist; this cell has slots 0..1"):
        cell.ensure_prefix(P, slot=2)


def test_prefill_sends_the_suffix_now_or_defers_it(cell):
    cell.ensure_prefix(P, salt="s")
    deferred = cell.prefill_suffix([50, 51], defer=True)
    assert (deferred.deferred_tokens, deferred.computed_tokens, deferred.source) == (2, 0, "bookkeeping")
    assert cell.explain_context().pending_tokens == 2
    now = cell.prefill_suffix([52])
    assert (now.prompt_tokens, now.reused_tokens, now.source) == (15, 12, "toy_counter")
    assert cell._llm.requests[-1][0] == P + [50, 51, 52]
    assert cell.explain_context().pending_tokens == 0


def test_an_engine_without_a_prefill_request_always_defers(cell, monkeypatch):
    monkeypatch.setattr(ToyCell, "prefill_now", False)
    cell.ensure_prefix(P, salt="s")
    sent = len(cell._llm.requests)
    assert cell.prefill_suffix([50]).source == "bookkeeping"
    assert len(cell._llm.requests) == sent


def test_prefill_needs_a_prefix(cell):
    with pytest.raises(WorkbenchError, match="slot 0 has no prefix; call ensure_prefix first"):
        cell.prefill_suffix([1])


def test_decode_streams_the_slot_and_its_deferred_suffix(cell):
    cell.ensure_prefix(P, salt="s")
    cell.prefill_suffix([50], defer=True)
    seen = []
    r = cell.decode(max_tokens=3, on_token=lambda tok, piece, t: seen.append((tok, piece)))
    assert cell._llm.requests[-1] == (P + [50], cell.manifest.cache_key("s"))
    assert r.tokens == [51, 52, 53] and r.text == "<51><52><53>" and r.finish_reason == "length"
    assert seen == [(51, "<51>"), (52, "<52>"), (53, "<53>")]
    assert (r.prompt_tokens, r.deferred_prefill_tokens, r.engine_counters) == (13, 1, {"cached": 12})
    assert len(r.token_times_s) == 3 and r.ttft_s == r.token_times_s[0]
    ctx = cell.explain_context()
    assert (ctx.tokens, ctx.pending_tokens) == (16, 0)  # the decoded tokens continue the slot


def test_decode_refuses_what_it_cannot_send(cell):
    with pytest.raises(WorkbenchError, match="slot 0 is empty; call ensure_prefix first"):
        cell.decode()
    cell.ensure_prefix(P, salt="s")
    with pytest.raises(ValueError, match="max_tokens must be at least 1"):
        cell.decode(max_tokens=0)
    with pytest.raises(ContextOverflow, match="context overflow: 33 tokens requested, limit is 32"):
        cell.decode(max_tokens=21)


def test_a_decode_with_no_output_is_an_error_naming_the_engine(cell, monkeypatch):
    monkeypatch.setattr(ToyCell, "_stream", lambda self, prompt, st, sampling: iter(()))
    cell.ensure_prefix(P, salt="s")
    with pytest.raises(WorkbenchError, match="Toy returned no output for the decode request"):
        cell.decode()
    assert cell.explain_context().tokens == 12  # the slot is as it was


def test_the_kv_pool_is_checked_before_dispatch():
    with ToyCell(ToyOptions(pool_tokens=10)) as c:
        with pytest.raises(ContextOverflow, match="KV cache overflow: 13 tokens requested, limit is 10"):
            c.ensure_prefix(P)
        assert c._llm.requests == []


def test_explain_context_says_what_the_slot_holds_and_what_the_engine_can_do(cell):
    cell.ensure_prefix(P, salt="s")
    cell.ensure_prefix(P, salt="s")
    ctx = cell.explain_context()
    assert (ctx.tokens, ctx.cache_key, ctx.pending_tokens) == (12, cell.manifest.cache_key("s"), 0)
    assert ctx.notes == ("toy: last request cached 8",)
    caps = ctx.capabilities
    assert not (caps.remove_tail or caps.remove_middle or caps.position_shift) and caps.recompute_range


def test_sampling_keywords_are_greedy_at_temperature_zero_and_stop_strings_need_a_tokenizer(cell):
    kw = dict(seed=1, stop=(), json_schema=None)
    assert cell._sampling_keywords(4, temperature=0.0, top_p=0.5, top_k=3, **kw) == {
        "max_tokens": 4, "seed": 1, "temperature": 0.0}
    assert cell._sampling_keywords(4, temperature=0.7, top_p=0.5, top_k=3, **kw) == {
        "max_tokens": 4, "seed": 1, "temperature": 0.7, "top_p": 0.5, "top_k": 3}
    with pytest.raises(UnsupportedFeature, match="toy does not support stop strings: toy is open without a tokenizer"):
        cell._sampling_keywords(4, temperature=0.0, top_p=1.0, top_k=0, seed=0, stop=("x",), json_schema=None)
    with pytest.raises(UnsupportedFeature, match="text prompts"):
        cell.ensure_prefix("some text")


# ------------------------------------------------------------------ snapshot / restore


def test_a_text_snapshot_restores_the_tokens_and_keeps_the_suffix_deferred(cell):
    cell.ensure_prefix(P, salt="s")
    cell.prefill_suffix([50, 51], defer=True)
    snap = cell.snapshot()
    assert (snap.kind, snap.engine, snap.tokens) == ("text", "toy", tuple(P + [50, 51]))
    assert json.loads(snap.payload) == {"salt": "s", "committed": 12}  # no retention on this engine
    status = cell.restore(snap, slot=1)
    assert (status.prompt_tokens, status.deferred_tokens, status.reused_tokens) == (14, 2, 8)
    ctx = cell.explain_context(slot=1)
    assert (ctx.tokens, ctx.pending_tokens, ctx.cache_key) == (12, 2, snap.cache_key)


def test_a_snapshot_carries_the_retention_where_the_engine_has_one():
    with RetainingToyCell() as c:
        c.ensure_prefix(P, salt="s", retention=Retention(90, 500))
        snap = c.snapshot()
        assert json.loads(snap.payload)["retention"] == [90, 500]
        c.restore(snap, slot=1)
        assert c._slots[1].retention == Retention(90, 500)
        c.ensure_prefix(P[:4], slot=0)
        assert json.loads(c.snapshot().payload)["retention"] == [35, None]  # the engine's default


def test_restore_refuses_another_manifest_or_another_engines_snapshot(cell):
    cell.ensure_prefix(P, salt="s")
    snap = cell.snapshot()
    with pytest.raises(ManifestMismatch):
        cell.restore(Snapshot("other", snap.cache_key, snap.tokens, "text", snap.payload, "toy"))
    with pytest.raises(WorkbenchError, match="cannot restore a vllm text snapshot into a Toy cell"):
        cell.restore(Snapshot(snap.manifest_digest, snap.cache_key, snap.tokens, "text", snap.payload, "vllm"))
    with pytest.raises(WorkbenchError, match="cannot restore a toy kv snapshot"):
        cell.restore(Snapshot(snap.manifest_digest, snap.cache_key, snap.tokens, "kv", b"", "toy"))
    with pytest.raises(WorkbenchError, match="slot 1 is empty; there is nothing to snapshot"):
        cell.snapshot(slot=1)


# ------------------------------------------------------------------ switch and lifecycle


def test_switch_restarts_the_engine_under_a_new_manifest_with_every_slot_empty(cell, tmp_path):
    (tmp_path / "adapter_config.json").write_text("{}")
    cell.ensure_prefix(P, salt="s")
    old = cell.manifest
    manifest = cell.switch(adapters=[tmp_path])
    assert manifest == cell.manifest != old and len(manifest.adapters) == 1
    assert cell.opts.adapters == (str(tmp_path),) and cell.starts == 2
    assert [cell.explain_context(slot=s).tokens for s in (0, 1)] == [0, 0]


def test_a_refused_switch_leaves_the_engine_and_the_slots_alone(cell, monkeypatch):
    def refuse(self, opts):
        raise EngineUnavailable("toy", "no adapters here")

    monkeypatch.setattr(ToyCell, "_prepare_switch", refuse)
    cell.ensure_prefix(P, salt="s")
    with pytest.raises(EngineUnavailable, match="no adapters here"):
        cell.switch(adapters=["x"])
    assert cell.starts == 1 and cell.explain_context().tokens == 12


def test_a_closed_cell_refuses_everything_and_a_failed_start_leaves_nothing_behind(tmp_path):
    with ToyCell(tmp_root=str(tmp_path)) as c:
        assert list(tmp_path.iterdir())
    with pytest.raises(WorkbenchError, match="this cell is closed"):
        c.ensure_prefix(P)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(RuntimeError, match="did not start"):
        ToyCell(fail_start=True, tmp_root=str(tmp_path))
    assert list(tmp_path.iterdir()) == []


def test_the_connector_log_needs_the_recording_connector(cell):
    with pytest.raises(UnsupportedFeature, match="toy does not support connector log: open the cell with connector="):
        cell.connector_log()


# ------------------------------------------------------------------ audit 17: missing counts, adapter requests


class SilentToyCell(ToyCell):
    """A toy engine that returns no reuse count (TensorRT-LLM without perf metrics, vLLM's None)."""

    def _warm(self, tokens: list[int], key: str, retention: Retention | None, *, slot: int = 0) -> Warm:
        self._llm.run(tokens, key)
        return Warm.read(None, "toy_counter", {"cached": None}, 0.0)


def test_no_count_from_the_engine_is_no_reading_never_an_engine_count_of_0():
    with SilentToyCell() as c:
        c.ensure_prefix(P, salt="s")
        st = c.ensure_prefix(P, salt="s")
    assert st.source == "none" and st.engine_reused_tokens is None and st.computed_tokens == 12


class LoraToyCell(ToyCell):
    """A toy engine with the cell's adapter loaded; it keys blocks by the adapter a request carries."""

    def _start(self) -> None:
        super()._start()
        self._lora_request = "toy-lora" if self.opts.adapters else None
        self.carried: list[str | None] = []

    def _warm(self, tokens: list[int], key: str, retention: Retention | None) -> Warm:
        self.carried.append(self._lora_request)
        return super()._warm(tokens, f"{key}|{self._lora_request}", retention)

    def _manifest_for(self, adapters):
        return super()._manifest_for(())


def test_adapter_requests_carry_the_adapter_or_not_under_the_callers_key():
    with LoraToyCell(ToyOptions(adapters=("toy-adapter",))) as c:
        base = [c.adapter_request(P, key="k", adapter=False, max_tokens=2) for _ in range(2)]
        lora = [c.adapter_request(P, key="k", adapter=True, max_tokens=2) for _ in range(2)]
        assert c.carried == [None, None, "toy-lora", "toy-lora"] and c._lora_request == "toy-lora"
    assert [r.reused_tokens for r in base + lora] == [0, 8, 0, 8] and base[0].tokens == (22, 23)
    with LoraToyCell() as c, pytest.raises(UnsupportedFeature, match="adapters"):
        c.adapter_request(P, key="k", adapter=True)
